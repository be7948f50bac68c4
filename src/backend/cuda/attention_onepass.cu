// The backward of non-causal, unpadded attention over short rows (T = 64, 128 or 256 keys, head
// size 64: CDEIT's 16x16 windows and its global stages, DiT's 256 patches) in one kernel: one
// block a (sample, head) holds every key, so dQ, dK and dV all come out of it without atomics,
// without an fp32 dQ buffer and without a pass of its own for D = rowsum(dO * O).
//
// Why: at CDEIT's windows (512 windows of 256 tokens, 8 heads of 64) cuDNN's backward streams
// key tiles in separate blocks and adds every block's part of dQ into an fp32 buffer with
// atomics, then runs two passes of its own (D, and dQ's cast to 16 bits): on an H200 the two
// passes alone took 1.39 ms of a 42.6 ms CDEIT step (docs/PERFORMANCE.md, session 21). With
// T <= 256, the whole key range of a (sample, head) fits one block's shared memory, and the
// dQ sum over keys can be a product inside the block.
//
// Layout (NW = T / 16 warps; accumulators as attention_tc2_tiles.cuh describes):
//   - warp w owns keys [16w, 16w + 16); the K and V rows of all T keys stay in shared memory;
//   - D and the base-2 log-sum-exp of all T queries are computed (D from dO and O, two
//     threads a row) into shared memory at the start;
//   - query tiles of 64 rows (Q and dO) stream through two stages by cp.async. For each half
//     tile of 32 queries a warp forms S^T and dP^T for its keys, P^T = exp2(S^T - lse),
//     dS^T = P^T (dP^T - D), adds P^T dO into dV and dS^T Q into dK (as attention_tc2.cu's
//     dK/dV kernel), and writes dS^T, rounded to E as the dK product takes it, into a shared
//     [T keys x 64 queries] slab;
//   - after a barrier, the tile's dQ = dS K [64 x 64] is computed from the slab in 16 pieces of
//     16 x 16 spread over the warps (K = T), and stored. dK, dV are stored at the end.
// Every sum has one order, so the result is bit-reproducible (unlike cuDNN's).
//
// The log-sum-exp comes from either forward: cuDNN's (natural log, stats_to_log2 = log2 e)
// or fittrain's (base 2 already, stats_to_log2 = 1).
#include <cooperative_groups.h>

#include <cstdlib>
#include <string>
#include <type_traits>

#include "backend/cuda/attention_tc2_tiles.cuh"

namespace ft::cuda::onepass {
using namespace tc;
using tc2::kKT;
using tc2::kLog2e;

constexpr int kHS = 64;
constexpr int kRow = tc2::kS<kHS>;  // 16-bit elements a shared row (64 + 8 pad)
static_assert(kKT == kHS, "the dS^T slab's rows (kKT queries) share the padded row of kHS");

// Shared memory of a block owning KB keys of a T-query row: K, V (KB rows each), [stage][Q | dO]
// (4 tiles of kKT rows), the dS^T slab (KB rows), the lse and D of the T queries, and (PAIR)
// the block's fp32 part of a tile's dQ, [kKT][kXRow].
constexpr int kXRow = kHS + 4;
template <int KB, int T, bool PAIR> constexpr size_t smem_bytes() {
  return (size_t)(3 * KB + 4 * kKT) * kRow * 2 + 2 * T * sizeof(float) +
         (PAIR ? (size_t)kKT * kXRow * sizeof(float) : 0);
}

// acc[m] (16 x 32: keys 16m.. of the warp x 32 queries) += A[m] (16 x kHS) B^T, B = 32 shared
// rows x kHS: each B fragment loaded once for the MT row tiles.
template <int MT, class E>
__device__ __forceinline__ void mma_abt_rows(float (&acc)[MT][4][4], const uint32_t (&a)[MT][kHS / 16][4],
                                             const E* B, int lane) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int kp = 0; kp < kHS / 32; ++kp) {
      uint32_t b[4];
      ldsm_x4(b, B + (8 * j + lane % 8) * kRow + kp * 32 + 8 * (lane / 8));
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma<E>(acc[m][j], a[m][2 * kp], b[0], b[1]);
        mma<E>(acc[m][j], a[m][2 * kp + 1], b[2], b[3]);
      }
    }
}
// acc[m] (16 x kHS) += A[m] (16 x 32, from registers) B, B = 32 shared rows (k) x kHS (n).
template <int MT, class E>
__device__ __forceinline__ void mma_ab_rows(float (&acc)[MT][kHS / 8][4], const uint32_t (&a)[MT][2][4],
                                            const E* B, int lane) {
#pragma unroll
  for (int t = 0; t < 2; ++t)
#pragma unroll
    for (int np = 0; np < kHS / 16; ++np) {
      uint32_t b[4];
      ldsm_x4_t(b, B + (16 * t + lane % 8 + 8 * ((lane / 8) % 2)) * kRow + 16 * np + 8 * (lane / 16));
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma<E>(acc[m][2 * np], a[m][t], b[0], b[1]);
        mma<E>(acc[m][2 * np + 1], a[m][t], b[2], b[3]);
      }
    }
}

// One block (PAIR: one cluster of two blocks) a (sample, head); NW warps a block, each owning
// MT row tiles of 16 keys, so a block owns KB = 16 MT NW keys and T = KB (PAIR: 2 KB).
// MT = 2 halves the shared-memory reads a product takes (each B fragment feeds two row tiles)
// at twice the accumulators a thread. PAIR (sm_90 clusters): each block of the pair owns half
// the keys and streams every query; a tile's dQ is the sum of the two blocks' parts over their
// keys, which they exchange through distributed shared memory (block r sums and stores query
// rows [32r, 32r + 32) of the tile): twice the blocks, each small enough for two an SM.
template <int NW, int MT, bool PAIR, class E>
__global__ void __launch_bounds__(NW * 32, MT == 1 ? 16 / NW : (NW >= 8 ? 1 : 2))
    bwd_kernel(E* dqkv, const E* dout, const E* qkv, const E* out, const float* stats,
               float stats_to_log2, int64_t NH) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  if constexpr (PAIR) {  // launchers take pairs only on sm_90+
    __trap();
    return;
  }
#endif
  constexpr int KW = 16 * MT, KB = KW * NW, T = PAIR ? 2 * KB : KB, NT = NW * 32, TS = kKT * kRow;
  constexpr int ntiles = T / kKT, TPR = NT > T ? NT / T : 1;  // threads a query row for D
  static_assert(T % kKT == 0 && TPR <= 2, "whole query tiles; at most two threads a row");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* Ks = reinterpret_cast<E*>(smem_raw);
  E* Vs = Ks + KB * kRow;
  E* QD = Vs + KB * kRow;    // [stage][Q | dO]
  E* slab = QD + 4 * TS;     // dS^T of the current query tile: [KB keys][kKT queries]
  float* Ls = reinterpret_cast<float*>(slab + KB * kRow);
  float* Ds = Ls + T;
  float* xq = Ds + T;        // PAIR: this block's part of the tile's dQ
  const int rank = PAIR ? (int)(blockIdx.x % 2) : 0;  // cluster dims (2, 1, 1): rank = x % 2
  const int64_t C = NH * kHS, bh = PAIR ? blockIdx.x / 2 : blockIdx.x, b = bh / NH, h = bh % NH;
  const int64_t k0 = (int64_t)rank * KB;  // this block's keys [k0, k0 + KB)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float qscale = rsqrtf((float)kHS) * kLog2e, sc = rsqrtf((float)kHS);
  const E* base = qkv + b * T * 3 * C + h * kHS;
  const E* dobase = dout + b * T * C + h * kHS;

  auto issue = [&](int it) {
    E* q = QD + (it & 1) * 2 * TS;
    tc2::tile_async<kHS, kKT, NT>(q, base, (int64_t)it * kKT, T, 3 * C);
    tc2::tile_async<kHS, kKT, NT>(q + TS, dobase, (int64_t)it * kKT, T, C);
  };
  tc2::tile_async<kHS, KB, NT>(Ks, base + C, k0, T, 3 * C);
  tc2::tile_async<kHS, KB, NT>(Vs, base + 2 * C, k0, T, 3 * C);
  issue(0);
  cp_commit();
  // D and the base-2 lse of every query while the copies fly: TPR threads a row
  for (int r = threadIdx.x / TPR; r < T; r += NT / TPR) {
    constexpr int W = kHS / TPR;
    const int part = threadIdx.x % TPR;
    const E* o = out + (b * T + r) * C + h * kHS + W * part;
    const E* d = dobase + (int64_t)r * C + W * part;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < W; k += Pack<E>::N) {
      const Pack<E> x = load16(o + k), y = load16(d + k);
#pragma unroll
      for (int i = 0; i < Pack<E>::N; ++i) s += x.f(i) * y.f(i);
    }
    if constexpr (TPR == 2) s += __shfl_xor_sync(0xffffffffu, s, 1);
    if (part == 0) {
      Ds[r] = s;
      Ls[r] = stats[bh * T + r] * stats_to_log2;
    }
  }

  float dk[MT][kHS / 8][4] = {}, dv[MT][kHS / 8][4] = {};
  const E* Kw = Ks + KW * warp * kRow;  // this warp's keys
  const E* Vw = Vs + KW * warp * kRow;
  for (int it = 0; it < ntiles; ++it) {
    if (it + 1 < ntiles) issue(it + 1);
    // this tile's copies done and seen by all; also Ls/Ds (it == 0), and every warp is past
    // the previous tile's dQ, which read the slab this tile rewrites
    tc2::await_tile();
    const E* Qs = QD + (it & 1) * 2 * TS;
    const E* dOs = Qs + TS;
    const float* Lt = Ls + it * kKT;
    const float* Dt = Ds + it * kKT;
#pragma unroll
    for (int hq = 0; hq < 2; ++hq) {
      uint32_t ka[MT][kHS / 16][4];
      float s[MT][4][4] = {}, dp[MT][4][4] = {};
#pragma unroll
      for (int m = 0; m < MT; ++m) tc2::load_a<kHS>(ka[m], Kw + 16 * m * kRow, lane);
      mma_abt_rows<MT>(s, ka, Qs + 32 * hq * kRow, lane);  // S^T: rows = keys
#pragma unroll
      for (int m = 0; m < MT; ++m) tc2::load_a<kHS>(ka[m], Vw + 16 * m * kRow, lane);
      mma_abt_rows<MT>(dp, ka, dOs + 32 * hq * kRow, lane);  // dP^T
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c0 = 32 * hq + 8 * j + 2 * t;
        const float2 L2 = *reinterpret_cast<const float2*>(Lt + c0);
        const float2 D2 = *reinterpret_cast<const float2*>(Dt + c0);
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float p = tc2::ex2<true>(s[m][j][e] * qscale - (e % 2 ? L2.y : L2.x));
            s[m][j][e] = p;
            dp[m][j][e] = p * (dp[m][j][e] - (e % 2 ? D2.y : D2.x));
          }
      }
      uint32_t pa[MT][2][4], sa[MT][2][4];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        tc2::acc_to_a<E, 4>(pa[m], s[m]);
        tc2::acc_to_a<E, 4>(sa[m], dp[m]);
        // dS^T into the slab: sa[m][u] holds columns 16u.. (regs 0, 1) and 16u + 8.. (regs
        // 2, 3) of rows g (regs 0, 2) and g + 8 (regs 1, 3) of row tile m
        E* srow = slab + (KW * warp + 16 * m + g) * kRow + 32 * hq + 2 * t;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          *reinterpret_cast<uint32_t*>(srow + 16 * u) = sa[m][u][0];
          *reinterpret_cast<uint32_t*>(srow + 8 * kRow + 16 * u) = sa[m][u][1];
          *reinterpret_cast<uint32_t*>(srow + 16 * u + 8) = sa[m][u][2];
          *reinterpret_cast<uint32_t*>(srow + 8 * kRow + 16 * u + 8) = sa[m][u][3];
        }
      }
      mma_ab_rows<MT>(dv, pa, dOs + 32 * hq * kRow, lane);
      mma_ab_rows<MT>(dk, sa, Qs + 32 * hq * kRow, lane);
    }
    __syncthreads();  // the tile's dS^T complete
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    // PAIR: the peer has read this block's previous part (its arrive after reading)
    if (PAIR && it > 0) cooperative_groups::this_cluster().barrier_wait();
#endif
    // dQ of the tile over this block's keys, [kKT x kHS] = dS [kKT x KB] K [KB x kHS], in 8
    // pieces of 16 x 32. A from the slab (stored transposed, so ldmatrix.trans), B from K as
    // mma_ab reads V.
    const int mi = lane / 8, rr = lane % 8;
    for (int piece = warp; piece < 8; piece += NW) {
      const int qr = 16 * (piece / 2), dc = 32 * (piece % 2);
      float acc[4][4] = {};
#pragma unroll 4
      for (int kk = 0; kk < KB / 16; ++kk) {
        uint32_t a[4];
        ldsm_x4_t(a, slab + (16 * kk + 8 * (mi / 2) + rr) * kRow + qr + 8 * (mi % 2));
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t bk[4];
          ldsm_x4_t(bk, Ks + (16 * kk + 8 * (mi % 2) + rr) * kRow + dc + 16 * np + 8 * (mi / 2));
          mma<E>(acc[2 * np], a, bk[0], bk[1]);
          mma<E>(acc[2 * np + 1], a, bk[2], bk[3]);
        }
      }
      if constexpr (PAIR) {  // the block's part, unscaled, for the exchange
        float* x = xq + (qr + g) * kXRow + dc + 2 * t;
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          *reinterpret_cast<float2*>(x + 8 * n) = make_float2(acc[n][0], acc[n][1]);
          *reinterpret_cast<float2*>(x + 8 * kXRow + 8 * n) = make_float2(acc[n][2], acc[n][3]);
        }
      } else {
        E* dq = dqkv + (b * T + (int64_t)it * kKT + qr + g) * 3 * C + h * kHS + dc + 2 * t;
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          *reinterpret_cast<uint32_t*>(dq + 8 * n) = pack2<E>(acc[n][0] * sc, acc[n][1] * sc);
          *reinterpret_cast<uint32_t*>(dq + 8 * 3 * C + 8 * n) = pack2<E>(acc[n][2] * sc, acc[n][3] * sc);
        }
      }
    }
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    if constexpr (PAIR) {
      // both parts written (release / acquire); then rows [32 rank, 32 rank + 32) of the
      // tile summed, part 0 + part 1 in both blocks, and stored; arrive: done reading
      auto cluster = cooperative_groups::this_cluster();
      cluster.barrier_arrive();
      cluster.barrier_wait();
      const float* peer = cluster.map_shared_rank(xq, rank ^ 1);
      for (int i = threadIdx.x; i < 32 * kHS / 4; i += NT) {
        const int row = 32 * rank + i / (kHS / 4), col = 4 * (i % (kHS / 4));
        const float4 a = *reinterpret_cast<const float4*>(xq + row * kXRow + col);
        const float4 p = *reinterpret_cast<const float4*>(peer + row * kXRow + col);
        const float4 lo = rank == 0 ? a : p, hi = rank == 0 ? p : a;
        E* dq = dqkv + (b * T + (int64_t)it * kKT + row) * 3 * C + h * kHS + col;
        uint2 v;
        v.x = pack2<E>((lo.x + hi.x) * sc, (lo.y + hi.y) * sc);
        v.y = pack2<E>((lo.z + hi.z) * sc, (lo.w + hi.w) * sc);
        *reinterpret_cast<uint2*>(dq) = v;
      }
      cluster.barrier_arrive();
    }
#endif
  }
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
  // PAIR: the peer has read this block's last part before the block (its shared memory) ends
  if constexpr (PAIR) cooperative_groups::this_cluster().barrier_wait();
#endif
  E* dbase = dqkv + b * T * 3 * C + h * kHS;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    tc2::store_acc<kHS>(dbase + C, 3 * C, k0 + KW * warp + 16 * m, T, dk[m], sc, sc, lane);
    tc2::store_acc<kHS>(dbase + 2 * C, 3 * C, k0 + KW * warp + 16 * m, T, dv[m], 1.f, 1.f, lane);
  }
}

template <int NW, int MT, bool PAIR, class E>
void launch(const Ctx& c, E* dqkv, const E* dout, const E* qkv, const E* out, const float* stats,
            float stats_to_log2, int64_t B, int64_t NH) {
  constexpr int KB = 16 * MT * NW;
  constexpr size_t smem = smem_bytes<KB, PAIR ? 2 * KB : KB, PAIR>();
  auto kernel = bwd_kernel<NW, MT, PAIR, E>;
  static const bool once = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    return true;
  }();
  (void)once;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)(B * NH * (PAIR ? 2 : 1)));
  cfg.blockDim = dim3(NW * 32);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = c.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = PAIR ? 2 : 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = PAIR ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, dqkv, dout, qkv, out, stats, stats_to_log2, NH));
}

// FT_ATTN_ONEPASS_LAYOUT (for measurements and tests; read at every call): keys16 / keys32 (a
// warp owns 16 / 32 keys, one block a (sample, head)), pair16 / pair32 (the same in a cluster
// of two blocks, sm_90; T >= 128). Unset: the defaults below.
enum class Layout { keys16, keys32, pair16, pair32 };
Layout layout_for(int64_t T, int cc_major) {
  const char* e = std::getenv("FT_ATTN_ONEPASS_LAYOUT");
  const std::string v = e ? e : "";
  Layout l = T >= 128 ? Layout::keys32 : Layout::keys16;
  if (v == "keys16") l = Layout::keys16;
  else if (v == "keys32") l = Layout::keys32;
  else if (v == "pair16" && T >= 128) l = cc_major >= 9 ? Layout::pair16 : Layout::keys16;
  else if (v == "pair32" && T >= 128) l = cc_major >= 9 ? Layout::pair32 : Layout::keys32;
  return l;
}

}  // namespace ft::cuda::onepass

namespace ft::cuda {

bool attention_backward_onepass_fits(int64_t T, int64_t HS, bool causal, int cc_major) {
  return !causal && HS == onepass::kHS && (T == 64 || T == 128 || T == 256) && cc_major >= 8;
}

template <class E>
void attention_backward_onepass(const Ctx& c, E* dqkv, const E* dout, const E* qkv, const E* out,
                                const float* stats, float stats_to_log2, int64_t B, int64_t T,
                                int64_t NH) {
  FT_CHECK(attention_backward_onepass_fits(T, onepass::kHS, false, c.cc_major),
           "attention (one-pass backward): T=", T, " is not 64, 128 or 256 on sm_80+");
  FT_CHECK(aligned16(dqkv) && aligned16(dout) && aligned16(qkv) && aligned16(out),
           "attention (one-pass backward): pointers must be 16-byte aligned");
  if (B * NH == 0) return;
  using onepass::Layout;
  const Layout l = onepass::layout_for(T, c.cc_major);
  auto run = [&](auto nw, auto mt, auto pair) {
    onepass::launch<decltype(nw)::value, decltype(mt)::value, decltype(pair)::value>(
        c, dqkv, dout, qkv, out, stats, stats_to_log2, B, NH);
  };
  using std::integral_constant;
  using I4 = integral_constant<int, 4>;
  using I8 = integral_constant<int, 8>;
  using M1 = integral_constant<int, 1>;
  using M2 = integral_constant<int, 2>;
  using Single = std::false_type;
  using Pair = std::true_type;
  if (T == 64) {
    if (l == Layout::keys32) run(integral_constant<int, 2>{}, M2{}, Single{});
    else run(I4{}, M1{}, Single{});
  } else if (T == 128) {
    if (l == Layout::keys16) run(I8{}, M1{}, Single{});
    else if (l == Layout::keys32) run(I4{}, M2{}, Single{});
    else if (l == Layout::pair16) run(I4{}, M1{}, Pair{});
    else run(integral_constant<int, 2>{}, M2{}, Pair{});
  } else {
    if (l == Layout::keys16) run(integral_constant<int, 16>{}, M1{}, Single{});
    else if (l == Layout::keys32) run(I8{}, M2{}, Single{});
    else if (l == Layout::pair16) run(I8{}, M1{}, Pair{});
    else run(I4{}, M2{}, Pair{});
  }
}

template void attention_backward_onepass<bf16>(const Ctx&, bf16*, const bf16*, const bf16*, const bf16*,
                                               const float*, float, int64_t, int64_t, int64_t);
template void attention_backward_onepass<f16>(const Ctx&, f16*, const f16*, const f16*, const f16*,
                                              const float*, float, int64_t, int64_t, int64_t);

}  // namespace ft::cuda
