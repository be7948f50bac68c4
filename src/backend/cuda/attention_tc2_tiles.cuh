// Tile building blocks of the second-generation tensor-core attention kernels
// (attention_tc2.cu): cp.async tile copies into padded shared rows, the two-stage pipeline
// step, ldmatrix fragment loads, the two mma.sync products (S = Q K^T and O += P V), and the
// accumulator store. Kept apart from the kernels so that each file stays readable.
// Accumulator element acc[j][e] of a warp's 16-row result is row g + 8*(e/2), column
// 8j + 2*t + (e%2), with g = lane/4, t = lane%4.
#pragma once
#include "backend/cuda/attention_tc.cuh"

namespace ft::cuda::tc2 {
using namespace tc;

constexpr int kKT = 64;  // rows of a streamed tile
constexpr float kLog2e = 1.4426950408889634f;
template <int HS> constexpr int kS = HS + 8;  // 16-bit elements per shared row (16-byte pad: no conflicts)

// 2^x. FTZ: one ex2.approx.ftz (subnormal results flush to zero); else exp2f, whose
// ex2.approx without ftz costs extra instructions to keep subnormal results.
template <bool FTZ> __device__ __forceinline__ float ex2(float x) {
  if constexpr (FTZ) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  } else {
    return exp2f(x);
  }
}

// rows [r0, r0 + ROWS) of a [.., stride] matrix into shared memory; rows past T zero-filled.
template <int HS, int ROWS, int NT, class E>
__device__ __forceinline__ void tile_async(E* dst, const E* src, int64_t r0, int64_t T_,
                                           int64_t stride) {
  constexpr int chunks = HS / 8;
  static_assert(ROWS * chunks % NT == 0, "tile_async: threads must divide the tile");
  const E* s0 = src + r0 * stride;
  const int nvalid = T_ - r0 < ROWS ? (int)(T_ - r0) : ROWS, st = (int)stride;
  const uint32_t d0 = smem_addr(dst);
#pragma unroll
  for (int k = 0; k < ROWS * chunks / NT; ++k) {
    const int i = threadIdx.x + k * NT, r = i / chunks, c = (i % chunks) * 8;
    const bool ok = r < nvalid;
    const uint32_t da = d0 + (uint32_t)(r * kS<HS> + c) * 2u;
    const E* sa = s0 + (ok ? r * st + c : 0);
    const int n = ok ? 16 : 0;
#ifndef FT_TC_UNAVAILABLE
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(da), "l"(sa), "r"(n));
#endif
  }
}

// Key and value rows [k0, k0 + kKT) of one (batch, head) into stage `stage` of KV, laid out
// [stage][K | V] with kKT * kS<HS> elements a tile; `base` is its q part in qkv [.., 3C].
template <int HS, int NT, class E>
__device__ __forceinline__ void kv_tile_async(E* KV, int stage, const E* base, int64_t k0,
                                              int64_t T_, int64_t C) {
  constexpr int TS = kKT * kS<HS>;
  E* kv = KV + stage * 2 * TS;
  tile_async<HS, kKT, NT>(kv, base + C, k0, T_, 3 * C);
  tile_async<HS, kKT, NT>(kv + TS, base + 2 * C, k0, T_, 3 * C);
}

// Two-stage pipeline step, after the next tile's copies were issued (or none, on the last
// tile): closes that group, waits for the one before it (this tile's), and the barrier makes
// this tile visible to every warp.
__device__ __forceinline__ void await_tile() {
  cp_commit();
  cp_wait<1>();
  __syncthreads();
}

// A fragments (16 rows x HS, all k-steps) of the rows starting at `rows`.
template <int HS, class E>
__device__ __forceinline__ void load_a(uint32_t (&a)[HS / 16][4], const E* rows, int lane) {
#pragma unroll
  for (int ks = 0; ks < HS / 16; ++ks)
    ldsm_x4(a[ks], rows + (lane % 8 + 8 * ((lane / 8) % 2)) * kS<HS> + ks * 16 + 8 * (lane / 16));
}
// acc[16 x 8NJ] += A[16 x HS] @ B^T, B = 8NJ shared rows x HS.
template <int HS, int NJ, class E>
__device__ __forceinline__ void mma_abt(float (&acc)[NJ][4], const uint32_t (&a)[HS / 16][4],
                                        const E* B, int lane) {
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int kp = 0; kp < HS / 32; ++kp) {
      uint32_t b[4];
      ldsm_x4(b, B + (8 * j + lane % 8) * kS<HS> + kp * 32 + 8 * (lane / 8));
      mma<E>(acc[j], a[2 * kp], b[0], b[1]);
      mma<E>(acc[j], a[2 * kp + 1], b[2], b[3]);
    }
}
// acc[16 x HS] += A[16 x 16KT] @ B, B = 16KT shared rows (k) x HS (n); A from registers.
template <int HS, int KT, class E>
__device__ __forceinline__ void mma_ab(float (&acc)[HS / 8][4], const uint32_t (&a)[KT][4],
                                       const E* B, int lane) {
#pragma unroll
  for (int t = 0; t < KT; ++t)
#pragma unroll
    for (int np = 0; np < HS / 16; ++np) {
      uint32_t b[4];
      ldsm_x4_t(b, B + (16 * t + lane % 8 + 8 * ((lane / 8) % 2)) * kS<HS> + 16 * np + 8 * (lane / 16));
      mma<E>(acc[2 * np], a[t], b[0], b[1]);
      mma<E>(acc[2 * np + 1], a[t], b[2], b[3]);
    }
}
// A fragments (16 x 8NJ, E) from a 16 x 8NJ fp32 accumulator.
template <class E, int NJ>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[NJ / 2][4], const float (&s)[NJ][4]) {
#pragma unroll
  for (int t = 0; t < NJ / 2; ++t) {
    a[t][0] = pack2<E>(s[2 * t][0], s[2 * t][1]);
    a[t][1] = pack2<E>(s[2 * t][2], s[2 * t][3]);
    a[t][2] = pack2<E>(s[2 * t + 1][0], s[2 * t + 1][1]);
    a[t][3] = pack2<E>(s[2 * t + 1][2], s[2 * t + 1][3]);
  }
}
template <int HS, class E>
__device__ __forceinline__ void store_acc(E* dst, int64_t row_stride, int64_t r0, int64_t T_,
                                          const float (&acc)[HS / 8][4], float scale0,
                                          float scale1, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int64_t r = r0 + g + 8 * h;
    if (r >= T_) continue;
    float sc = h ? scale1 : scale0;
#pragma unroll
    for (int j = 0; j < HS / 8; ++j)
      *reinterpret_cast<uint32_t*>(dst + r * row_stride + 8 * j + 2 * t) =
          pack2<E>(acc[j][2 * h] * sc, acc[j][2 * h + 1] * sc);
  }
}

// Host: lets `kernel` take `smem` bytes of dynamic shared memory where that is over the 48 KiB
// every launch may take.
template <class K> void smem_optin(K kernel, size_t smem) {
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

}  // namespace ft::cuda::tc2
