// SiLU (swish) x * sigmoid(x), forward and backward, 16-byte vectorised like gelu.cu.
#include <algorithm>

#include "backend/cuda/column_partials.cuh"
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

// silu_backward_kernel<T, true> over [N, H] that also sums dinp's columns (the bias gradient of
// the product that wrote inp) the way matmul.cu's bias_partial_kernel sums dout's: block
// (column block of 32 packs, row group g); thread (tx, ty) owns one pack of columns and rows
// start + ty, + kSiluBiasRows, ...; the kSiluBiasRows row slices of a block are added in a
// fixed order into partial[g][col] (deterministic), which bias_reduce then sums over g. The
// sums are of the stored (rounded) dinp, as a reduction over dinp would read them. Two rows'
// packs are loaded before either is used (kSiluBiasUnroll), to keep enough loads in flight.
constexpr int kSiluBiasRows = 16, kSiluBiasUnroll = 2;
constexpr int kSiluBiasThreads = 32 * kSiluBiasRows;

template <class T>
__global__ void __launch_bounds__(kSiluBiasThreads)
    silu_backward_bias_kernel(T* dinp, T* out, const T* inp, const T* dout, float* partial, int64_t N, int64_t H,
                              int64_t rows_per_group) {
  constexpr int P = Pack<T>::N;
  __shared__ float sh[kSiluBiasRows][32 * P];
  const auto [ty, col0, col, start, end] = column_tile<P>(N, rows_per_group);
  float acc[P];
#pragma unroll
  for (int k = 0; k < P; ++k) acc[k] = 0.f;
  if (col < H) {
    for (int64_t n = start + ty; n < end; n += kSiluBiasRows * kSiluBiasUnroll) {
      Pack<T> x[kSiluBiasUnroll], d[kSiluBiasUnroll];
#pragma unroll
      for (int u = 0; u < kSiluBiasUnroll; ++u) {
        const int64_t r = n + (int64_t)u * kSiluBiasRows;
        if (r < end) {
          x[u] = load16(inp + r * H + col);
          d[u] = load16(dout + r * H + col);
        }
      }
#pragma unroll
      for (int u = 0; u < kSiluBiasUnroll; ++u) {
        const int64_t r = n + (int64_t)u * kSiluBiasRows;
        if (r >= end) continue;
        Pack<T> y, s;  // written after both rows were read (out / dinp may alias inp / dout)
#pragma unroll
        for (int k = 0; k < P; ++k) {
          y.set(k, silu_grad_f(x[u].f(k)) * d[u].f(k));
          s.set(k, silu_f(x[u].f(k)));
          acc[k] += y.f(k);
        }
        store16(dinp + r * H + col, y);
        store16(out + r * H + col, s);
      }
    }
  }
  store_column_partials<P, kSiluBiasRows>(sh, acc, partial, blockIdx.y, col0, H);
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

void silu_backward_recompute_bias(const Ctx& c, DType t, void* dinp, void* out, const void* inp, const void* dout,
                                  void* dbias, int64_t N, int64_t H, float beta) {
  if (N * H == 0) return;
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    constexpr int P = Pack<E>::N;
    const bool packs = H % P == 0 && aligned16(dinp) && aligned16(out) && aligned16(inp) && aligned16(dout);
    const RowGroups g = packs ? bias_row_groups(c, N, H, P) : RowGroups{};
    if (g.G < 1) {  // not whole packs, or no scratch: the element-wise kernel, then the column sums
      silu_backward(c, t, dinp, inp, dout, N * H, out);
      bias_backward(c, t, dbias, dinp, N, H, beta);
      return;
    }
    float* partial = static_cast<float*>(c.scratch);
    dim3 grid((unsigned)ceil_div(H, 32 * P), (unsigned)g.G);
    silu_backward_bias_kernel<E><<<grid, kSiluBiasThreads, 0, c.stream>>>(
        static_cast<E*>(dinp), static_cast<E*>(out), static_cast<const E*>(inp), static_cast<const E*>(dout), partial,
        N, H, g.rows);
    CUDA_CHECK_LAUNCH();
    bias_reduce(c, t, dbias, partial, g.G, H, beta);
  });
}

}  // namespace ft::cuda
