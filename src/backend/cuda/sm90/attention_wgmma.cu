// The backward of non-causal, unpadded attention over short rows (T = 64, 128 or 256 keys, head
// size 64: CDEIT's 16x16 windows, DiT's 256 patches) with Hopper's warpgroup products (wgmma).
// Compiled for sm_90a only (its own CMake target): wgmma is not part of plain sm_90.
//
// Why: attention_onepass.cu's kernel (one block a (sample, head), mma.sync) and cuDNN's backward
// both took about 0.9 ms at CDEIT's first-stage windows (B = 512 windows x 8 heads, T = 256) on
// an H200, 4 of a batch-32 step's ~39 ms (docs/PERFORMANCE.md, sessions 22-26): about 200 TFLOP/s.
// mma.sync takes every operand through registers, each warp loading its own copy from shared
// memory; wgmma reads B (and A where it stays in shared memory) once a warpgroup of four warps.
//
// Layout: one block an SM (persistent), NWG warpgroups of 128 threads, T = 64 NWG keys; each
// (sample, head) in turn is one item, all of whose keys the block holds; warpgroup w owns keys
// [64 w, 64 w + 64) (one m64 row block). Every operand in shared memory is in rows of 128 bytes
// (64 16-bit elements) with the 128-byte swizzle (16-byte chunk c of row r stored at chunk
// c ^ (r % 8)), so one descriptor form serves every product:
//   - K and V of all T keys ([key][d]), two stages: the next item's are copied during the
//     current item's last query tile;
//   - query tiles of 64 rows of Q, dO and O and their lse, two stages, by cp.async;
//   - dS of the current tile as [query][key] (blocks of 64 keys) for dQ's product.
// Per tile: D = rowsum(dO * O) of its queries from shared memory; then per half of 32 queries,
// each warpgroup:
//   S^T = K_w Q^T and dP^T = V_w dO^T (m64n32k16, both operands from shared memory);
//   P^T = exp2(S^T scale - lse), dS^T = P^T (dP^T - D) in registers;
//   dV += P^T dO and dK += dS^T Q (m64n64k16, A from registers, B = the tile read N-major);
//   dS^T rounded to E into the dS slab.
// Then dQ of the tile = dS K (m64, K = T): warpgroup w computes 64 / NWG of its 64 columns, B
// = K's rows read N-major from a start inside the swizzled row.
// No atomics: every sum has one order and the result is bit-reproducible.
// Measured (H200, session 27, `fittrain_ops --mode perf --op attention_bwd`, one call): 0.801 ms
// (215 TFLOP/s, 5 products counted) at CDEIT's first-stage windows (B = 512 x 8 heads, T = 256)
// against the one-pass kernel's 0.860 and cuDNN's 0.890; faster than both at every T = 256 shape.
// It is latency-bound: a warpgroup's products wait for its softmax and each tile's dQ for a
// barrier, and one block of 128 registers a thread an SM leaves nothing else to run. In
// bench/wgmma_probe.cu's timings neither a block a (sample, head) with its loads exposed (0.79 ms)
// nor this persistent layout that hides them (0.80) moved it, nor staggering the warpgroups' halves.
#include <algorithm>

#include "backend/cuda/attention_tc2_tiles.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FT_WGMMA 1
#endif

namespace ft::cuda::wg {
using namespace tc;

constexpr int kHS = 64;      // head size: one 128-byte row
constexpr int kRowB = 128;   // bytes a shared row
constexpr int kQT = 64;      // queries a streamed tile
constexpr int kBlockB = 64 * kRowB;  // a block of 64 rows (8 KiB)

// A tile stage: Q, dO and O rows of kQT queries and their lse, padded to whole KiB (the next
// stage's swizzled rows start 1024-aligned).
constexpr uint32_t kStage = (3 * kQT * kRowB + kQT * 4 + 1023) / 1024 * 1024;
// Shared memory: two stages of K and V (T rows of 128 bytes each), the dS slab (T rows), two
// tile stages, D of a tile; 1 KiB for aligning the swizzled buffers. T = 256: 211 KiB.
template <int T> constexpr size_t smem_bytes() {
  return 1024 + (size_t)5 * T * kRowB + 2 * kStage + kQT * sizeof(float);
}

// Byte offset of 16-byte chunk c of row r in a 128-byte-swizzled buffer (1024-aligned).
__device__ __forceinline__ uint32_t sw(int r, int c) { return (uint32_t)(r * kRowB + ((c ^ (r & 7)) << 4)); }

// wgmma shared-memory descriptor, 128-byte swizzle. K-major: rows of the operand's M or N
// dimension, 8-row groups 1024 bytes apart (SBO); the leading offset is unused (1). N-major
// (B read transposed): rows of K; its leading offset is the stride of 8-row groups along K and
// its stride offset that of 64-column groups along N, which a 64-wide operand never takes: both
// are 1024 (PTX ISA, "Matrix Descriptor Format").
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
         (1ull << 62);
}
__device__ __forceinline__ uint64_t kmajor(uint32_t addr) { return desc(addr, 16, 1024); }
__device__ __forceinline__ uint64_t nmajor(uint32_t addr) { return desc(addr, 1024, 1024); }

#ifdef FT_WGMMA
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Generic-proxy writes to shared memory (st.shared, cp.async) made visible to wgmma's reads.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#else
__device__ __forceinline__ void wg_fence() {}
__device__ __forceinline__ void wg_commit() {}
template <int N> __device__ __forceinline__ void wg_wait() {}
__device__ __forceinline__ void fence_async_smem() {}
#endif

// Keeps the compiler from moving reads or writes of a register across a wgmma wait (CUTLASS's
// warpgroup_fence_operand): accumulators are written asynchronously, and A fragments read so.
template <int NJ> __device__ __forceinline__ void fence_regs(float (&d)[NJ][4]) {
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}
template <int K> __device__ __forceinline__ void fence_regs(uint32_t (&a)[K][4]) {
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[k][e])::"memory");
}

#define FT_ACC4(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define FT_ACC8(d, j) FT_ACC4(d, j), FT_ACC4(d, j + 1)
#define FT_ACC16(d, j) FT_ACC8(d, j), FT_ACC8(d, j + 2)
#define FT_ACC32(d, j) FT_ACC16(d, j), FT_ACC16(d, j + 4)

// The wgmma instructions' register lists and input type ("bf16" or "f16", pasted into the
// mnemonic): one asm statement a shape, written once for both types.
#define FT_WG_SS16(TY)                                                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"                                                 \
               "wgmma.mma_async.sync.aligned.m64n16k16.f32." TY "." TY " {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, " \
               "1, 1, 0, %11;\n}\n"                                                                          \
               : FT_ACC8(d, 0) : "l"(a), "l"(b), "r"(accumulate), "n"(TB))
#define FT_WG_SS32(TY)                                                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                  \
               "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11," \
               "%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, %19;\n}\n"                                            \
               : FT_ACC16(d, 0) : "l"(a), "l"(b), "r"(accumulate), "n"(TB))
#define FT_WG_SS64(TY)                                                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                  \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11," \
               "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, " \
               "1, 1, 0, %35;\n}\n"                                                                          \
               : FT_ACC32(d, 0) : "l"(a), "l"(b), "r"(accumulate), "n"(TB))
#define FT_WG_RS64(TY)                                                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                                    \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11," \
               "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "              \
               "{%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"                                                     \
               : FT_ACC32(d, 0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b))

// D (m64 x N, fp32) (+)= A B, A and B from shared memory; TB: B N-major. E: bf16 or f16.
template <int N, int TB, class E>
__device__ __forceinline__ void mma_ss(float (&d)[N / 8][4], uint64_t a, uint64_t b, int accumulate) {
#ifdef FT_WGMMA
  constexpr bool h = std::is_same_v<E, f16>;
  static_assert(N == 16 || N == 32 || N == 64, "mma_ss: N = 16, 32 or 64");
  if constexpr (N == 16) {
    if constexpr (h) FT_WG_SS16("f16");
    else FT_WG_SS16("bf16");
  } else if constexpr (N == 32) {
    if constexpr (h) FT_WG_SS32("f16");
    else FT_WG_SS32("bf16");
  } else {
    if constexpr (h) FT_WG_SS64("f16");
    else FT_WG_SS64("bf16");
  }
#endif
}

// D (m64 x 64, fp32) += A B, A (m64 x k16) from registers (mma.sync's m16n8k16 A fragment a
// warp), B from shared memory read N-major.
template <class E>
__device__ __forceinline__ void mma_rs64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
#ifdef FT_WGMMA
  if constexpr (std::is_same_v<E, f16>) FT_WG_RS64("f16");
  else FT_WG_RS64("bf16");
#endif
}

// ROWS rows of 64 elements ([.., stride] from src) into a swizzled buffer by cp.async.
template <int ROWS, int NT, class E>
__device__ __forceinline__ void rows_async(uint32_t dst, const E* src, int64_t stride) {
#pragma unroll
  for (int k = 0; k < ROWS * 8 / NT; ++k) {
    const int i = threadIdx.x + k * NT, r = i / 8, c = i % 8;
#ifdef FT_WGMMA
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + sw(r, c)), "l"(src + r * stride + 8 * c));
#endif
  }
}

__device__ __forceinline__ void st_b16(uint32_t addr, uint16_t v) {
  asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(addr), "h"(v) : "memory");
}
// x, as a value the compiler cannot compute ahead of this point (nor keep in a register until then)
__device__ __forceinline__ uint32_t opaque(uint32_t x) {
  asm volatile("mov.b32 %0, %0;\n" : "+r"(x));
  return x;
}
__device__ __forceinline__ uint64_t opaque64(uint64_t x) {
  asm volatile("mov.b64 %0, %0;\n" : "+l"(x));
  return x;
}
template <class E> __device__ __forceinline__ float2 unpack2(uint32_t v) {
  if constexpr (std::is_same_v<E, f16>) return __half22float2(*reinterpret_cast<const __half2*>(&v));
  else return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
}
__device__ __forceinline__ float2 ld_f2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint4 ld_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}

// Persistent: a block an SM, each taking (sample, head)s blockIdx.x, + gridDim.x, ...; NWG
// warpgroups, T = 64 NWG. While an item's last query tile is processed, the next item's K, V and
// first tile are copied into the other stages, so an item's start waits for no load.
template <int NWG, class E>
__global__ void __launch_bounds__(NWG * 128, 1)
    bwd_kernel(E* dqkv, const E* dout, const E* qkv, const E* out, const float* stats, float stats_to_log2,
               int64_t NH, int64_t items) {
#ifdef FT_WGMMA
  constexpr int T = 64 * NWG, NT = 128 * NWG, ntiles = T / kQT, DN = kHS / NWG;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw), base = (raw + 1023u) & ~1023u;
  const uint32_t sKV = base;                    // [stage][K | V], T rows each
  const uint32_t sS = sKV + 4 * T * kRowB;      // dS of the current tile, [key block][query][128 bytes]
  const uint32_t sQD = sS + T * kRowB;          // [stage][Q | dO | O | lse], kStage bytes a stage
  const uint32_t sD = sQD + 2 * kStage;         // D of the current tile's queries (fp32)
  const int64_t C = NH * kHS;
  const int wgi = threadIdx.x / 128, wq = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const float qscale = rsqrtf((float)kHS) * tc2::kLog2e, sc = rsqrtf((float)kHS);
  const int key0 = 64 * wgi;            // this warpgroup's keys
  const int krow = key0 + 16 * wq + g;  // this thread's accumulator rows: krow, krow + 8
  // copies of item bh: its K and V into kv stage `ks`; query tile `it` (Q, dO, O rows and the
  // lse) into tile stage `qs`
  auto issue_kv = [&](int64_t bh, int ks) {
    const E* qb = qkv + (bh / NH) * T * 3 * C + (bh % NH) * kHS;
    rows_async<T, NT>(sKV + (uint32_t)ks * 2 * T * kRowB, qb + C, 3 * C);
    rows_async<T, NT>(sKV + (uint32_t)ks * 2 * T * kRowB + T * kRowB, qb + 2 * C, 3 * C);
  };
  auto issue_tile = [&](int64_t bh, int it, int qs) {
    const int64_t r0 = (bh / NH) * T + (int64_t)it * kQT, hc = (bh % NH) * kHS;
    const uint32_t q = sQD + (uint32_t)qs * kStage;
    rows_async<kQT, NT>(q, qkv + r0 * 3 * C + hc, 3 * C);
    rows_async<kQT, NT>(q + kQT * kRowB, dout + r0 * C + hc, C);
    rows_async<kQT, NT>(q + 2 * kQT * kRowB, out + r0 * C + hc, C);
    if (threadIdx.x < kQT / 4)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(q + 3 * kQT * kRowB + 16 * threadIdx.x),
                   "l"(stats + bh * T + (int64_t)it * kQT + 4 * threadIdx.x));
  };
  if (blockIdx.x < items) {
    issue_kv(blockIdx.x, 0);
    issue_tile(blockIdx.x, 0, 0);
  }
  cp_commit();
  int tc = 0;  // tiles processed by this block: tile stage tc & 1
  for (int64_t bh = blockIdx.x, n = 0; bh < items; bh += gridDim.x, ++n) {
    const uint32_t sK = sKV + (uint32_t)(n & 1) * 2 * T * kRowB, sV = sK + T * kRowB;
    float dk[8][4] = {}, dv[8][4] = {};
    for (int it = 0; it < ntiles; ++it, ++tc) {
      if (it + 1 < ntiles) {
        issue_tile(bh, it + 1, (tc + 1) & 1);
      } else if (bh + gridDim.x < items) {  // the next item's K, V (the other kv stage) and first tile
        issue_kv(bh + gridDim.x, (int)((n + 1) & 1));
        issue_tile(bh + gridDim.x, 0, (tc + 1) & 1);
      }
      // this tile's copies done and visible to wgmma; every warpgroup past the previous tile's
      // dQ (which read the dS slab this tile rewrites, and the kv stage the copies above refill)
      cp_commit();
      cp_wait<1>();
      fence_async_smem();
      __syncthreads();
      const uint32_t sQ = sQD + (uint32_t)(tc & 1) * kStage, sdO = sQ + kQT * kRowB, sO = sdO + kQT * kRowB;
      const uint32_t sL = sO + kQT * kRowB;
      // D = rowsum(dO * O) of the tile's queries: 8 threads a row, a 16-byte chunk each
#pragma unroll
      for (int r = threadIdx.x / 8; r < kQT; r += NT / 8) {
        const int c = threadIdx.x % 8;
        const uint4 x = ld_v4(sdO + sw(r, c)), y = ld_v4(sO + sw(r, c));
        const uint32_t xa[4] = {x.x, x.y, x.z, x.w}, ya[4] = {y.x, y.y, y.z, y.w};
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 a = unpack2<E>(xa[i]), b = unpack2<E>(ya[i]);
          d += a.x * b.x + a.y * b.y;
        }
        d += __shfl_xor_sync(0xffffffffu, d, 1);
        d += __shfl_xor_sync(0xffffffffu, d, 2);
        d += __shfl_xor_sync(0xffffffffu, d, 4);
        if (c == 0) asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sD + 4 * r), "f"(d) : "memory");
      }
      __syncthreads();
#pragma unroll
      for (int hq = 0; hq < 2; ++hq) {
        float s[4][4] = {}, dp[4][4] = {};
        wg_fence();
        // k-steps advance the descriptors' start address (16-byte units: +2 is 32 bytes, 16
        // elements); opaque() keeps the compiler from computing all eight ahead
        uint64_t da = kmajor(opaque(sK + key0 * kRowB)), db = kmajor(opaque(sQ + hq * 32 * kRowB));
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          mma_ss<32, 0, E>(s, da, db, kk);
          da = opaque64(da + 2), db = opaque64(db + 2);
        }
        da = kmajor(opaque(sV + key0 * kRowB)), db = kmajor(opaque(sdO + hq * 32 * kRowB));
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          mma_ss<32, 0, E>(dp, da, db, kk);
          da = opaque64(da + 2), db = opaque64(db + 2);
        }
        wg_commit();
        wg_wait<0>();
        fence_regs(s);
        fence_regs(dp);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c0 = 32 * hq + 8 * j + 2 * t;
          const float2 L2 = ld_f2(sL + 4 * c0), D2 = ld_f2(sD + 4 * c0);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float p = tc2::ex2<true>(s[j][e] * qscale - (e % 2 ? L2.y : L2.x) * stats_to_log2);
            s[j][e] = p;
            dp[j][e] = p * (dp[j][e] - (e % 2 ? D2.y : D2.x));
          }
        }
        uint32_t pa[2][4], sa[2][4];
        tc2::acc_to_a<E, 4>(pa, s);
        tc2::acc_to_a<E, 4>(sa, dp);
        // dS into the slab as [query][key], from the fragments the dK product takes (rounded
        // to E): sa[j / 2][2 (j % 2) + (e / 2)] holds queries 8j + 2t, + 1 of row krow + 8 (e / 2)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = krow + 8 * (e / 2), q = 32 * hq + 8 * j + 2 * t + (e % 2);
            const uint32_t two = sa[j / 2][2 * (j % 2) + e / 2];
            st_b16(sS + (uint32_t)(key / 64) * kBlockB + sw(q, (key % 64) / 8) + (uint32_t)(key % 8) * 2,
                   (uint16_t)(two >> (16 * (e % 2))));
          }
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) mma_rs64<E>(dv, pa[kk], nmajor(sdO + (hq * 32 + 16 * kk) * kRowB));
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) mma_rs64<E>(dk, sa[kk], nmajor(sQ + (hq * 32 + 16 * kk) * kRowB));
        wg_commit();
        wg_wait<0>();
        fence_regs(dv);
        fence_regs(dk);
        fence_regs(pa);
        fence_regs(sa);
      }
      fence_async_smem();
      __syncthreads();  // the tile's dS complete
      // dQ [kQT x kHS] = dS [kQT x T] K [T x kHS]: this warpgroup's DN columns of K, read N-major
      // from the K rows (a start inside the 128-byte swizzle row: measured right on an H200)
      float dq[DN / 8][4] = {};
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < T / 16; ++kk) {
        const uint32_t kb = (uint32_t)(kk / 4) * kBlockB, ko = 32 * (kk % 4);
        mma_ss<DN, 1, E>(dq, kmajor(sS + kb + ko), nmajor(sK + (uint32_t)(16 * kk) * kRowB + (uint32_t)(wgi * DN) * 2),
                         kk);
      }
      wg_commit();
      wg_wait<0>();
      fence_regs(dq);
      const int64_t b = bh / NH, hc = (bh % NH) * kHS;
      E* dqp = dqkv + (b * T + (int64_t)it * kQT + 16 * wq + g) * 3 * C + hc + wgi * DN + 2 * t;
#pragma unroll
      for (int j = 0; j < DN / 8; ++j) {
        *reinterpret_cast<uint32_t*>(dqp + 8 * j) = pack2<E>(dq[j][0] * sc, dq[j][1] * sc);
        *reinterpret_cast<uint32_t*>(dqp + 8 * 3 * C + 8 * j) = pack2<E>(dq[j][2] * sc, dq[j][3] * sc);
      }
    }
    const int64_t b = bh / NH, hc = (bh % NH) * kHS;
    E* dkp = dqkv + (b * T + krow) * 3 * C + C + hc + 2 * t;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      *reinterpret_cast<uint32_t*>(dkp + 8 * j) = pack2<E>(dk[j][0] * sc, dk[j][1] * sc);
      *reinterpret_cast<uint32_t*>(dkp + 8 * 3 * C + 8 * j) = pack2<E>(dk[j][2] * sc, dk[j][3] * sc);
      *reinterpret_cast<uint32_t*>(dkp + C + 8 * j) = pack2<E>(dv[j][0], dv[j][1]);
      *reinterpret_cast<uint32_t*>(dkp + C + 8 * 3 * C + 8 * j) = pack2<E>(dv[j][2], dv[j][3]);
    }
  }
#else
  __trap();  // launched only where attention_backward_wgmma_fits (an sm_90 device, this file's sm_90a code)
#endif
}

template <int NWG, class E>
void launch(const Ctx& c, E* dqkv, const E* dout, const E* qkv, const E* out, const float* stats,
            float stats_to_log2, int64_t B, int64_t NH) {
  constexpr size_t smem = smem_bytes<64 * NWG>();
  static const bool once = (tc2::smem_optin(bwd_kernel<NWG, E>, smem), true);
  (void)once;
  const int64_t items = B * NH, grid = std::min<int64_t>(items, c.num_sms);
  bwd_kernel<NWG, E><<<(unsigned)grid, NWG * 128, smem, c.stream>>>(dqkv, dout, qkv, out, stats, stats_to_log2, NH,
                                                                     items);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda::wg

namespace ft::cuda {

bool attention_backward_wgmma_fits(const Ctx& c, int64_t T, int64_t HS, bool causal) {
  // sm_90a code runs on compute capability 9.0 only (H100, H200, GH200)
  if (causal || HS != wg::kHS || c.cc_major != 9) return false;
  const size_t smem = T == 64    ? wg::smem_bytes<64>()
                      : T == 128 ? wg::smem_bytes<128>()
                      : T == 256 ? wg::smem_bytes<256>()
                                 : 0;
  return smem > 0 && smem <= c.max_smem_optin;
}

void attention_backward_wgmma(const Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* stats, float stats_to_log2, int64_t B, int64_t T, int64_t NH) {
  FT_CHECK(t == DType::bf16 || t == DType::f16, "attention (wgmma backward): ", dtype_name(t),
           " storage; it takes bf16 or f16");
  FT_CHECK(attention_backward_wgmma_fits(c, T, wg::kHS, false), "attention (wgmma backward): T=", T,
           " is not 64, 128 or 256, or this device (sm_", c.cc_major, "x) is not sm_90");
  FT_CHECK(aligned16(dqkv) && aligned16(dout) && aligned16(qkv) && aligned16(out) && aligned16(stats),
           "attention (wgmma backward): pointers must be 16-byte aligned");
  if (B * NH == 0) return;
  auto typed = [&](auto tag) {
    using E = decltype(tag);
    auto run = [&](auto nwg) {
      wg::launch<decltype(nwg)::value>(c, static_cast<E*>(dqkv), static_cast<const E*>(dout),
                                       static_cast<const E*>(qkv), static_cast<const E*>(out), stats, stats_to_log2, B,
                                       NH);
    };
    using std::integral_constant;
    if (T == 64) run(integral_constant<int, 1>{});
    else if (T == 128) run(integral_constant<int, 2>{});
    else run(integral_constant<int, 4>{});
  };
  if (t == DType::f16) typed(f16{});
  else typed(bf16{});
}

}  // namespace ft::cuda
