// Shared by the fused norm + modulate's kernels (norm_modulate.cu) and the fused backward with
// the gated residual behind it (norm_modulate_residual.cu): the launch constants, the row
// helpers of the register kernels, the block sums and the chunking of the backward.
#pragma once
#include <algorithm>
#include <initializer_list>

#include "backend/cuda/cuda_ops.cuh"
#include "backend/window_shapes.h"

namespace ft::cuda {

constexpr int kNmFwdThreads = 256;  // forward: 8 rows a block
constexpr int kNmWarps = 8;         // backward: warps a block
constexpr int kNmReduceThreads = 256;
// Backward blocks per launch: one wave, the two 8-warp blocks an SM that the backward kernels'
// registers (108-128) and shared memory leave, each warp still taking >= 4 rows (B=32 T=4096 ->
// 8 chunks a sample of 512 rows). Each block pays a start (per-sample rows, its cp.async
// pipeline filled) and an end (the warps' column sums in warp order, a partial row written), so
// fewer, longer blocks do more of their work streaming. On an H200 (session 25, bf16, CDEIT's
// first stage B=32 T=4096 C=512 in window order) the block-middle backward took 0.275 ms in one
// wave against 0.309 ms in four (8 blocks an SM wanted, as before), 0.287 at 16 chunks and 0.346
// at 12 (1.45 waves: a part-empty second); the plain norm + modulate backward 0.185 against 0.211;
// DiT-S's block-middle backward (B=256 T=256 C=384, one chunk a sample now) 0.117 against 0.142.
constexpr int kNmBlocksPerSm = 2;
constexpr int kNmMinRowsPerWarp = 4;

__device__ __forceinline__ int64_t nm_src(const window::Geom& g, bool win, int64_t r) {
  return win ? window::partition_src(g, r) : r;
}

// The end of a backward block: the block's column sums cs[2C] (dshift's, then dscale's) go to
// partial[b][chunk] (G > 1), or straight to dshift/dscale[b] in the storage type (G == 1).
template <class T>
__device__ __forceinline__ void nm_write_block_sums(T* dshift, T* dscale, float* partial, const float* cs,
                                                    int64_t C) {
  const int64_t b = blockIdx.y;
  if (gridDim.x == 1) {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      dshift[b * C + c] = from_f32<T>(cs[c]);
      dscale[b * C + c] = from_f32<T>(cs[C + c]);
    }
  } else {
    float* p = partial + ((int64_t)b * gridDim.x + blockIdx.x) * 2 * C;
    for (int64_t c = threadIdx.x; c < 2 * C; c += blockDim.x) p[c] = cs[c];
  }
}

// One row of the backward from its packs in registers (the lane's K packs of inp, dout, the
// old dinp and scale): the lane's column sums a1 (dout) and a2 (dout * xhat), then dinp's row
// written.
template <class T, int K, bool RMS>
__device__ __forceinline__ void nm_backward_row(Pack<T> (&xv)[K], Pack<T> (&dv)[K], Pack<T> (&gv)[K],
                                                Pack<T> (&scv)[K], float m, float s,
                                                float (&a1)[K][Pack<T>::N], float (&a2)[K][Pack<T>::N], T* dx,
                                                int lane, int64_t CP, int64_t C) {
  constexpr int P = Pack<T>::N;
  float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
  for (int i = 0; i < K; ++i)
    if (lane + 32 * i < CP)
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const float d = dv[i].f(k), gg = d * (1.f + scv[i].f(k));
        const float xh = RMS ? xv[i].f(k) * s : (xv[i].f(k) - m) * s;
        sum_g += gg;
        sum_gx += gg * xh;
        a1[i][k] += d;
        a2[i][k] += d * xh;
      }
  const float mg = RMS ? 0.f : warp_sum(sum_g) / C, mgx = warp_sum(sum_gx) / C;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    pack_opaque(xv[i]);
    pack_opaque(dv[i]);
    pack_opaque(scv[i]);
  }
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int64_t j = lane + 32 * i;
    if (j < CP) {
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const float gg = dv[i].f(k) * (1.f + scv[i].f(k)), xv_k = xv[i].f(k);
        // rmsnorm.cu's dinp += r (g - x r a); layernorm.cu's (g - mean g - xhat mean(g xhat)) r
        gv[i].set(k, RMS ? gv[i].f(k) + s * (gg - xv_k * s * mgx)
                         : gv[i].f(k) + (gg - mg - (xv_k - m) * s * mgx) * s);
      }
      store16(dx + j * P, gv[i]);
    }
  }
}

// The end of a backward block: the warps' column sums into cs[2C], warp 0 first, then each
// warp adds in warp order (every thread of the block calls it).
template <int K, int P>
__device__ __forceinline__ void nm_warp_sums(float* cs, const float (&a1)[K][P], const float (&a2)[K][P], int lane,
                                             int warp, int64_t CP, int64_t C) {
  for (int w = 0; w < kNmWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int i = 0; i < K; ++i) {
        const int64_t j = lane + 32 * i;
        if (j < CP) {
#pragma unroll
          for (int k = 0; k < P; ++k) {
            float* p1 = cs + j * P + k;
            float* p2 = cs + C + j * P + k;
            *p1 = w == 0 ? a1[i][k] : *p1 + a1[i][k];
            *p2 = w == 0 ? a2[i][k] : *p2 + a2[i][k];
          }
        }
      }
    }
    __syncthreads();
  }
}

// ---- host side ----

// Packs a lane of the register kernels: the fewest of `ks` that hold C / P packs over 32 lanes,
// 0 where none does (the loop kernels take those rows).
inline int nm_packs_per_lane(int64_t C, int P, std::initializer_list<int> ks) {
  const int64_t need = ceil_div(C / P, 32);
  for (int k : ks)
    if (need <= k) return k;
  return 0;
}
template <class E> bool nm_packed(int64_t C, std::initializer_list<const void*> ptrs) {
  if (C % Pack<E>::N != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}
// Rows a backward chunk (a multiple of kNmWarps) and chunks a sample, from the shape alone.
struct NmChunks {
  int64_t R, G;
};
// Chunks a sample: as many as one wave holds (rounded down: a second, part-empty wave costs more
// than a few idle block slots), at least one.
inline NmChunks nm_chunks(int64_t B, int64_t T, int num_sms) {
  const int64_t min_rows = int64_t{kNmWarps} * kNmMinRowsPerWarp;
  const int64_t want = std::max<int64_t>(1, int64_t{kNmBlocksPerSm} * std::max(1, num_sms) / std::max<int64_t>(1, B));
  const int64_t G0 = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, ceil_div(T, min_rows)));
  const int64_t R = ceil_div(ceil_div(T, G0), kNmWarps) * kNmWarps;
  return {R, ceil_div(T, R)};
}

}  // namespace ft::cuda
