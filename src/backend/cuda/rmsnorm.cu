// RMSNorm without affine (CDEIT's): out = x * rstd, rstd = 1/sqrt(mean(x^2) + eps) saved
// (fp32); backward ACCUMULATES into dinp (as layernorm's). One warp a row, a lane taking
// 16-byte packs lane, lane+32, ... when C is a whole number of packs and the rows are
// aligned, single elements otherwise. Row sums: lane partials in order, then the fixed xor
// butterfly (the same bits run to run).
#include "backend/cuda/cuda_ops.cuh"
#include "backend/diffusion_shapes.h"

namespace ft::cuda {

namespace {
constexpr int kRmsThreads = 256;  // 8 rows a block

}  // namespace

// ---- CUDA kernels ---------------------------------------------------------------------------

template <class T, bool PACK>
__global__ void __launch_bounds__(kRmsThreads)
    rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, int64_t N, int64_t C, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  float ss = 0.f;
  row_for_lane<T, PACK>(x, C, lane, [&](int64_t, float v) { ss += v * v; });
  const float r = rsqrtf(warp_sum(ss) / static_cast<float>(C) + eps);
  T* o = out + row * C;
  if constexpr (PACK) {
    constexpr int P = Pack<T>::N;
    for (int64_t c = (int64_t)lane * P; c < C; c += 32 * P) {
      const Pack<T> v = load16(x + c);
      Pack<T> y;
#pragma unroll
      for (int k = 0; k < P; ++k) y.set(k, v.f(k) * r);
      store16(o + c, y);
    }
  } else {
    for (int64_t c = lane; c < C; c += 32) o[c] = from_f32<T>(to_f32(x[c]) * r);
  }
  if (lane == 0) rstd[row] = r;
}

// dinp += r * (dout - xhat * a), xhat = x r, a = mean_c(dout * xhat)
template <class T, bool PACK>
__global__ void __launch_bounds__(kRmsThreads)
    rmsnorm_backward_kernel(T* dinp, const T* dout, const T* inp, const float* rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* d = dout + row * C;
  T* g = dinp + row * C;
  const float r = rstd[row];
  float dot = 0.f;
  row_for_lane<T, PACK>(x, C, lane, [&](int64_t c, float v) { dot += to_f32(d[c]) * (v * r); });
  const float a = warp_sum(dot) / static_cast<float>(C);
  if constexpr (PACK) {
    constexpr int P = Pack<T>::N;
    for (int64_t c = (int64_t)lane * P; c < C; c += 32 * P) {
      const Pack<T> xv = load16(x + c), dv = load16(d + c);
      Pack<T> gv = load16(g + c);
#pragma unroll
      for (int k = 0; k < P; ++k) gv.set(k, gv.f(k) + r * (dv.f(k) - xv.f(k) * r * a));
      store16(g + c, gv);
    }
  } else {
    for (int64_t c = lane; c < C; c += 32)
      g[c] = from_f32<T>(to_f32(g[c]) + r * (to_f32(d[c]) - to_f32(x[c]) * r * a));
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

// Packs when C is a whole number of them and every row start is 16-byte aligned.
template <class E> static bool rms_packed(int64_t C, std::initializer_list<const void*> ptrs) {
  if (C % Pack<E>::N != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

void rmsnorm_forward(const Ctx& c, DType t, void* out, float* rstd, const void* inp, int64_t N, int64_t C) {
  if (N == 0) return;
  const unsigned grid = (unsigned)ceil_div(N * 32, kRmsThreads);
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    auto* o = static_cast<E*>(out);
    auto* x = static_cast<const E*>(inp);
    if (rms_packed<E>(C, {out, inp}))
      rmsnorm_forward_kernel<E, true><<<grid, kRmsThreads, 0, c.stream>>>(o, rstd, x, N, C, diffusion::kRmsNormEps);
    else
      rmsnorm_forward_kernel<E, false><<<grid, kRmsThreads, 0, c.stream>>>(o, rstd, x, N, C, diffusion::kRmsNormEps);
    CUDA_CHECK_LAUNCH();
  });
}

void rmsnorm_backward(const Ctx& c, DType t, void* dinp, const void* dout, const void* inp, const float* rstd,
                      int64_t N, int64_t C) {
  if (N == 0) return;
  const unsigned grid = (unsigned)ceil_div(N * 32, kRmsThreads);
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    auto* g = static_cast<E*>(dinp);
    auto* d = static_cast<const E*>(dout);
    auto* x = static_cast<const E*>(inp);
    if (rms_packed<E>(C, {dinp, dout, inp}))
      rmsnorm_backward_kernel<E, true><<<grid, kRmsThreads, 0, c.stream>>>(g, d, x, rstd, N, C);
    else
      rmsnorm_backward_kernel<E, false><<<grid, kRmsThreads, 0, c.stream>>>(g, d, x, rstd, N, C);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ft::cuda
