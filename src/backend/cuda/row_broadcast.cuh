// Shared by modulate.cu and gated_residual.cu: ops on x[B,T,C] with a per-sample row r[B,C]
// broadcast over T. Forward kernels take a pack of 16 bytes when C is a multiple of the pack
// (a pack then never straddles two rows) and one element otherwise. The backward kernel
// writes the element-wise gradient and sums columns over t in one pass, deterministically.
//
// The gated residual's operand y (and dy) may be in window order (WIN, backend.h WindowOrder):
// token row R of dout then pairs with y's row window::reverse_src(g, R). Without MOD the first
// sum is free, and sums dx instead (the stored values): with bias_part given, per-sample
// column sums of dx go to bias_part[b][c] (floats), the first stage of the bias gradient of
// the product that wrote x (bias_reduce in matmul.cu adds them up).
#pragma once
#include <initializer_list>

#include "backend/cuda/cuda_ops.cuh"
#include "backend/window_shapes.h"

namespace ft::cuda {

// Elements per thread of a forward kernel: a 16-byte pack when every pointer is 16-byte
// aligned and C a multiple of the pack, else 1.
template <class T> inline int row_broadcast_step(int64_t C, std::initializer_list<const void*> ptrs) {
  if (C % Pack<T>::N != 0) return 1;
  for (const void* p : ptrs)
    if (!aligned16(p)) return 1;
  return Pack<T>::N;
}

// Runs a forward kernel over n = B*T*C elements for the tensors' storage type E with S
// elements per thread (row_broadcast_step): calls launch(E{}, std::integral_constant<int, S>,
// grid) for the one (E, S) that applies, then checks the launch.
template <class F>
void launch_row_broadcast_forward(DType t, int64_t n, int64_t C, std::initializer_list<const void*> ptrs,
                                  F&& launch) {
  if (n == 0) return;
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    auto go = [&](auto step) {
      constexpr int S = decltype(step)::value;
      launch(tag, step, (unsigned)ceil_div(ceil_div(n, S), kPackBlock));
      CUDA_CHECK_LAUNCH();
    };
    if (row_broadcast_step<E>(C, ptrs) == 1) go(std::integral_constant<int, 1>{});
    else go(std::integral_constant<int, Pack<E>::N>{});
  });
}

constexpr int kColBlockX = 32, kColBlockY = 8;  // columns x row groups of a column block

// One block per (32 columns, sample b), grid (ceil(C/32), B), kColBlockX*kColBlockY threads.
// Thread (tx, ty) walks rows t = ty, ty + 8, ... of column c, writing
//   dx = dout * (MOD ? 1 + r : r)
// and summing s1 = dout (only if MOD: dshift) and s2 = dout * x; the 8 partial sums of a
// column are then added in a fixed order (deterministic; no atomics, no scratch). Each element
// is read before it is written by the same thread, so dx may alias dout or x.
template <class T, bool MOD, bool WIN>
__global__ void __launch_bounds__(kColBlockX* kColBlockY)
    row_broadcast_backward_kernel(T* dx, T* dsum1, T* dsum2, const T* dout, const T* x,
                                  const T* r, int64_t T_, int64_t C, window::Geom win, float* bias_part) {
  __shared__ float s1[kColBlockY][kColBlockX + 1], s2[kColBlockY][kColBlockX + 1];
  const int tx = threadIdx.x % kColBlockX, ty = threadIdx.x / kColBlockX;
  const int64_t b = blockIdx.y, c = (int64_t)blockIdx.x * kColBlockX + tx;
  float a1 = 0.f, a2 = 0.f;
  if (c < C) {
    const float rv = to_f32(r[b * C + c]);
    const float g = MOD ? 1.f + rv : rv;
    for (int64_t t = ty; t < T_; t += kColBlockY) {
      const int64_t i = (b * T_ + t) * C + c;
      const int64_t j = WIN ? window::reverse_src(win, b * T_ + t) * C + c : i;
      const float d = to_f32(dout[i]);
      const T o = from_f32<T>(d * g);
      a1 += MOD ? d : to_f32(o);
      a2 += d * to_f32(x[j]);
      dx[j] = o;
    }
  }
  s1[ty][tx] = a1;
  s2[ty][tx] = a2;
  __syncthreads();
  if (ty == 0 && c < C) {
    float r1 = 0.f, r2 = 0.f;
#pragma unroll
    for (int k = 0; k < kColBlockY; ++k) {
      r1 += s1[k][tx];
      r2 += s2[k][tx];
    }
    if (MOD) dsum1[b * C + c] = from_f32<T>(r1);
    else if (bias_part) bias_part[b * C + c] = r1;
    dsum2[b * C + c] = from_f32<T>(r2);
  }
}

// The same with 16-byte packs (C a multiple of the pack, every pointer aligned): a block of 256
// threads is X packs of columns by 256/X row groups, one block per (X packs, sample b); each
// thread keeps its pack's P column sums in registers, and the row groups' partials are added
// in a fixed order through shared memory. X is chosen by the launcher so that there are
// blocks for every SM: 16 for DiT's many samples of 256 tokens (a warp reads 2 rows of 256
// bytes), down to 4 for CDEIT's few samples of 4096 tokens. The scalar kernel above moved 2
// bytes a thread and ran at 1.3-1.4 TB/s on an H100 (DiT-S and CDEIT shapes).
constexpr int kPackedThreads = 256;

// One row's pack of the packed kernel: dx = dout * g, the sums a1 (MOD: dout, else the stored
// dx) and a2 (dout * x).
template <class T, bool MOD>
__device__ __forceinline__ Pack<T> rb_row(const Pack<T>& dv, const Pack<T>& xv, const float (&g)[Pack<T>::N],
                                          float (&a1)[Pack<T>::N], float (&a2)[Pack<T>::N]) {
  Pack<T> o;
#pragma unroll
  for (int k = 0; k < Pack<T>::N; ++k) {
    const float d = dv.f(k);
    o.set(k, d * g[k]);
    a1[k] += MOD ? d : o.f(k);
    a2[k] += d * xv.f(k);
  }
  return o;
}

// The end of the packed kernel: the Y row groups' sums of the block's W columns added in a
// fixed order through s1/s2 into dsum1 (MOD) or bias_part, and dsum2, for sample b.
template <class T, bool MOD, int Y, int W>
__device__ __forceinline__ void rb_block_sums(float (&s1)[Y][W + 1], float (&s2)[Y][W + 1],
                                              const float (&a1)[Pack<T>::N], const float (&a2)[Pack<T>::N], int tx,
                                              int ty, int64_t b, int64_t C, T* dsum1, T* dsum2, float* bias_part) {
  constexpr int P = Pack<T>::N;
#pragma unroll
  for (int k = 0; k < P; ++k) {
    s1[ty][tx * P + k] = a1[k];
    s2[ty][tx * P + k] = a2[k];
  }
  __syncthreads();
  for (int j = threadIdx.x; j < W; j += kPackedThreads) {
    const int64_t col = (int64_t)blockIdx.x * W + j;
    if (col >= C) continue;
    float r1 = 0.f, r2 = 0.f;
    for (int k = 0; k < Y; ++k) {
      r1 += s1[k][j];
      r2 += s2[k][j];
    }
    if (MOD) dsum1[b * C + col] = from_f32<T>(r1);
    else if (bias_part) bias_part[b * C + col] = r1;
    dsum2[b * C + col] = from_f32<T>(r2);
  }
}

template <class T, bool MOD, bool WIN, int X>
__global__ void __launch_bounds__(kPackedThreads)
    row_broadcast_backward_packed_kernel(T* dx, T* dsum1, T* dsum2, const T* dout, const T* x,
                                         const T* r, int64_t T_, int64_t C, window::Geom win,
                                         float* bias_part) {
  wait_for_prior_kernel();
  constexpr int P = Pack<T>::N, Y = kPackedThreads / X, W = X * P;
  __shared__ float s1[Y][W + 1], s2[Y][W + 1];
  const int tx = threadIdx.x % X, ty = threadIdx.x / X;
  const int64_t b = blockIdx.y, c0 = ((int64_t)blockIdx.x * X + tx) * P;
  float a1[P], a2[P];
#pragma unroll
  for (int k = 0; k < P; ++k) a1[k] = a2[k] = 0.f;
  if (c0 < C) {
    const Pack<T> rv = load16(r + b * C + c0);
    float g[P];
#pragma unroll
    for (int k = 0; k < P; ++k) g[k] = MOD ? 1.f + rv.f(k) : rv.f(k);
    for (int64_t t = ty; t < T_; t += Y) {
      const int64_t i = (b * T_ + t) * C + c0;
      const int64_t j = WIN ? window::reverse_src(win, b * T_ + t) * C + c0 : i;
      const Pack<T> dv = load16(dout + i), xv = load16(x + j);  // read before dx is written
      store16(dx + j, rb_row<T, MOD>(dv, xv, g, a1, a2));
    }
  }
  rb_block_sums<T, MOD, Y, W>(s1, s2, a1, a2, tx, ty, b, C, dsum1, dsum2, bias_part);
}

template <bool MOD, bool WIN>
void launch_row_broadcast_backward_impl(const Ctx& c, DType t, void* dx, void* dsum1, void* dsum2,
                                        const void* dout, const void* x, const void* r, int64_t B,
                                        int64_t T, int64_t C, const window::Geom& win, float* bias_part) {
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    constexpr int P = Pack<E>::N;
    if (C % P == 0 && aligned16(dx) && aligned16(dout) && aligned16(x) && aligned16(r)) {
      // the widest column block that still gives two blocks an SM
      auto go = [&](auto xc) {
        constexpr int X = decltype(xc)::value;
        dim3 grid((unsigned)ceil_div(C / P, X), (unsigned)B);
        launch(c, row_broadcast_backward_packed_kernel<E, MOD, WIN, X>, grid, dim3(kPackedThreads), 0,
               static_cast<E*>(dx), static_cast<E*>(dsum1), static_cast<E*>(dsum2), static_cast<const E*>(dout),
               static_cast<const E*>(x), static_cast<const E*>(r), T, C, win, bias_part);
      };
      const int64_t want = 2LL * c.num_sms;
      if (ceil_div(C / P, 16) * B >= want) go(std::integral_constant<int, 16>{});
      else if (ceil_div(C / P, 8) * B >= want) go(std::integral_constant<int, 8>{});
      else go(std::integral_constant<int, 4>{});
      return;
    }
    dim3 grid((unsigned)ceil_div(C, kColBlockX), (unsigned)B);
    row_broadcast_backward_kernel<E, MOD, WIN><<<grid, kColBlockX * kColBlockY, 0, c.stream>>>(
        static_cast<E*>(dx), static_cast<E*>(dsum1), static_cast<E*>(dsum2),
        static_cast<const E*>(dout), static_cast<const E*>(x), static_cast<const E*>(r), T, C, win, bias_part);
    CUDA_CHECK_LAUNCH();
  });
}

// win (the gated residual only, MOD false): x and dx in window order; bias_part (MOD false):
// [B, C] floats of per-sample column sums of dx
template <bool MOD>
void launch_row_broadcast_backward(const Ctx& c, DType t, void* dx, void* dsum1, void* dsum2,
                                   const void* dout, const void* x, const void* r, int64_t B,
                                   int64_t T, int64_t C, const window::Geom* win = nullptr,
                                   float* bias_part = nullptr) {
  if (B == 0 || C == 0) return;
  FT_CHECK(B <= 65535, "row broadcast backward: B=", B, " exceeds the grid's 65535");
  FT_CHECK(!MOD || (!win && !bias_part), "row broadcast backward: window order and bias sums are the gated residual's");
  if constexpr (!MOD) {
    if (win) {
      launch_row_broadcast_backward_impl<false, true>(c, t, dx, dsum1, dsum2, dout, x, r, B, T, C, *win, bias_part);
      return;
    }
  }
  launch_row_broadcast_backward_impl<MOD, false>(c, t, dx, dsum1, dsum2, dout, x, r, B, T, C, window::Geom{},
                                                 bias_part);
}

}  // namespace ft::cuda
