// SiLU (swish) x * sigmoid(x), forward and backward, 16-byte vectorised like gelu.cu.
#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

__device__ __forceinline__ float sigmoid_f(float x) { return 1.f / (1.f + __expf(-x)); }
__device__ __forceinline__ float silu_f(float x) { return x * sigmoid_f(x); }
__device__ __forceinline__ float silu_grad_f(float x) {
  const float s = sigmoid_f(x);
  return s * (1.f + x * (1.f - s));
}

// Thread i handles pack i; packs past the last full one are done element by element.
template <class T>
__global__ void silu_forward_kernel(T* out, const T* inp, int64_t n) {
  constexpr int P = Pack<T>::N;
  const int64_t i = pack_begin<T>();
  if (i + P <= n) {
    Pack<T> x = load16(inp + i), y;
#pragma unroll
    for (int k = 0; k < P; ++k) y.set(k, silu_f(x.f(k)));
    store16(out + i, y);
  } else {
    for (int64_t j = i; j < n; ++j) out[j] = from_f32<T>(silu_f(to_f32(inp[j])));
  }
}

// kRecompute: also out = silu(inp), written after the pack (or element) is read, so out may
// alias inp and dinp may alias dout. No __restrict__ for the same reason.
template <class T, bool kRecompute>
__global__ void silu_backward_kernel(T* dinp, const T* inp, const T* dout, T* out, int64_t n) {
  constexpr int P = Pack<T>::N;
  const int64_t i = pack_begin<T>();
  if (i + P <= n) {
    Pack<T> x = load16(inp + i), d = load16(dout + i), y, s;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      y.set(k, silu_grad_f(x.f(k)) * d.f(k));
      if constexpr (kRecompute) s.set(k, silu_f(x.f(k)));
    }
    store16(dinp + i, y);
    if constexpr (kRecompute) store16(out + i, s);
  } else {
    for (int64_t j = i; j < n; ++j) {
      const float x = to_f32(inp[j]), d = to_f32(dout[j]);
      dinp[j] = from_f32<T>(silu_grad_f(x) * d);
      if constexpr (kRecompute) out[j] = from_f32<T>(silu_f(x));
    }
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

void silu_forward(const Ctx& c, DType t, void* out, const void* inp, int64_t n) {
  FT_CHECK(aligned16(out) && aligned16(inp), "silu: pointers must be 16-byte aligned");
  if (n == 0) return;
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    silu_forward_kernel<E><<<pack_grid<E>(n), kPackBlock, 0, c.stream>>>(
        static_cast<E*>(out), static_cast<const E*>(inp), n);
    CUDA_CHECK_LAUNCH();
  });
}

void silu_backward(const Ctx& c, DType t, void* dinp, const void* inp, const void* dout,
                   int64_t n, void* out) {
  FT_CHECK(aligned16(dinp) && aligned16(inp) && aligned16(dout) && (!out || aligned16(out)),
           "silu: pointers must be 16-byte aligned");
  if (n == 0) return;
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    if (out)
      silu_backward_kernel<E, true><<<pack_grid<E>(n), kPackBlock, 0, c.stream>>>(
          static_cast<E*>(dinp), static_cast<const E*>(inp), static_cast<const E*>(dout),
          static_cast<E*>(out), n);
    else
      silu_backward_kernel<E, false><<<pack_grid<E>(n), kPackBlock, 0, c.stream>>>(
          static_cast<E*>(dinp), static_cast<const E*>(inp), static_cast<const E*>(dout),
          nullptr, n);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ft::cuda
