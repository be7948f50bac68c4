// GELU (tanh approximation, GPT-2's), forward and backward, 16-byte vectorised.
#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
}

__device__ __forceinline__ float gelu_f(float x) {
  float u = kGeluScale * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad_f(float x) {
  float u = kGeluScale * (x + 0.044715f * x * x * x);
  float th = tanhf(u);
  float du = kGeluScale * (1.f + 3.f * 0.044715f * x * x);
  return 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * du;
}

// Thread i handles pack i; packs past the last full one are done element by element.
template <class T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  constexpr int P = Pack<T>::N;
  const int64_t i = pack_begin<T>();
  if (i + P <= n) {
    Pack<T> x = load16_cs(inp + i), y;
#pragma unroll
    for (int k = 0; k < P; ++k) y.set(k, gelu_f(x.f(k)));
    store16(out + i, y);
  } else {
    for (int64_t j = i; j < n; ++j) out[j] = from_f32<T>(gelu_f(to_f32(inp[j])));
  }
}

template <class T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  constexpr int P = Pack<T>::N;
  const int64_t i = pack_begin<T>();
  if (i + P <= n) {
    Pack<T> x = load16_cs(inp + i), d = load16_cs(dout + i), y;
#pragma unroll
    for (int k = 0; k < P; ++k) y.set(k, gelu_grad_f(x.f(k)) * d.f(k));
    store16(dinp + i, y);
  } else {
    for (int64_t j = i; j < n; ++j)
      dinp[j] = from_f32<T>(gelu_grad_f(to_f32(inp[j])) * to_f32(dout[j]));
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

void gelu_forward(const Ctx& c, DType t, void* out, const void* inp, int64_t n) {
  FT_CHECK(aligned16(out) && aligned16(inp), "gelu: pointers must be 16-byte aligned");
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    gelu_forward_kernel<E><<<pack_grid<E>(n), kPackBlock, 0, c.stream>>>(
        static_cast<E*>(out), static_cast<const E*>(inp), n);
    CUDA_CHECK_LAUNCH();
  });
}

void gelu_backward(const Ctx& c, DType t, void* dinp, const void* inp, const void* dout,
                   int64_t n) {
  FT_CHECK(aligned16(dinp) && aligned16(inp) && aligned16(dout),
           "gelu: pointers must be 16-byte aligned");
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    gelu_backward_kernel<E><<<pack_grid<E>(n), kPackBlock, 0, c.stream>>>(
        static_cast<E*>(dinp), static_cast<const E*>(inp), static_cast<const E*>(dout), n);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ft::cuda
