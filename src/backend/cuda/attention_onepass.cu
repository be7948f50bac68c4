// The backward of non-causal, unpadded attention over short rows (T = 64, 128 or 256 keys, head
// size 64: CDEIT's 16x16 windows and its global stages, DiT's 256 patches) in one kernel: one
// block a (sample, head) holds every key, so dQ, dK and dV all come out of it without atomics,
// without an fp32 dQ buffer and without a pass of its own for D = rowsum(dO * O).
//
// Why: cuDNN's backward streams key tiles in separate blocks, adds every block's part of dQ
// into an fp32 buffer with atomics, then runs two passes of its own (D, and dQ's cast to 16
// bits): on an H200 the two passes alone took 1.39 ms of a 42.6 ms CDEIT step
// (docs/PERFORMANCE.md, session 21). With T <= 256 a (sample, head)'s keys fit one block's
// shared memory, and the dQ sum over keys becomes a product inside the block.
// Measured (H200, session 22): at CDEIT's windows (B=512 T=256, 8 heads) 0.855 ms against
// cuDNN's 0.882 with 32 keys a warp (0.920 with 16), but a step no faster (the later stages
// have too few (sample, head)s for one block each to fill the card). FT_ATTENTION_BACKWARD=auto
// takes it at T = 64 (CDEIT's last stage: 0.011-0.012 ms against 0.021) and, where
// sm90/attention_wgmma.cu's Hopper form does not run, at T = 128/256 with 24 (sample, head)s an
// SM (CudaBackendBase::own_backward). Splitting a
// (sample, head) over a cluster of two blocks that exchange their dQ parts through distributed
// shared memory was slower still (1.11-1.28 ms; commit 568adf4 has it).
//
// Layout (NW warps of MT row tiles of 16 keys, T = 16 MT NW; accumulators as
// attention_tc2_tiles.cuh describes):
//   - warp w owns keys [KW w, KW w + KW), KW = 16 MT; the K and V rows of all T keys stay in
//     shared memory;
//   - D and the base-2 log-sum-exp of all T queries are computed (D from dO and O) into shared
//     memory at the start;
//   - query tiles of 64 rows (Q and dO) stream through two stages by cp.async. For each half
//     tile of 32 queries a warp forms S^T and dP^T for its keys, P^T = exp2(S^T - lse),
//     dS^T = P^T (dP^T - D), adds P^T dO into dV and dS^T Q into dK (as attention_tc2.cu's
//     dK/dV kernel), and writes dS^T, rounded to E as the dK product takes it, into a shared
//     [T keys x 64 queries] slab;
//   - after a barrier, the tile's dQ = dS K [64 x 64] is computed from the slab in 8 pieces of
//     16 x 32 spread over the warps (K = T), and stored. dK, dV are stored at the end.
// Every sum has one order, so the result is bit-reproducible (unlike cuDNN's).
//
// The log-sum-exp comes from either forward: cuDNN's (natural log, stats_to_log2 = log2 e)
// or fittrain's (base 2 already, stats_to_log2 = 1).
#include <type_traits>

#include "backend/cuda/attention_tc2_tiles.cuh"

namespace ft::cuda::onepass {
using namespace tc;
using tc2::kKT;
using tc2::kLog2e;

constexpr int kHS = 64;
constexpr int kRow = tc2::kS<kHS>;  // 16-bit elements a shared row (64 + 8 pad)
static_assert(kKT == kHS, "the dS^T slab's rows (kKT queries) share the padded row of kHS");

// K, V (T rows each), [stage][Q | dO] (4 tiles of kKT rows), the dS^T slab (T rows), then
// the lse and D of the T queries.
template <int T> constexpr size_t smem_bytes() {
  return (size_t)(3 * T + 4 * kKT) * kRow * 2 + 2 * T * sizeof(float);
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

// grid B*NH blocks of NW warps, each warp owning MT row tiles of 16 keys; T = 16 MT NW.
// MT = 2 halves the shared-memory reads a product takes (each B fragment feeds two row tiles)
// at twice the accumulators a thread (H200, CDEIT's windows: 0.855 against 0.920 ms).
template <int NW, int MT, class E>
__global__ void __launch_bounds__(NW * 32, MT == 1 ? 16 / NW : (NW >= 8 ? 1 : 2))
    bwd_kernel(E* dqkv, const E* dout, const E* qkv, const E* out, const float* stats,
               float stats_to_log2, int64_t NH) {
  constexpr int KW = 16 * MT, T = KW * NW, NT = NW * 32, TS = kKT * kRow;
  constexpr int ntiles = T / kKT, TPR = NT > T ? NT / T : 1;  // threads a query row for D
  static_assert(T % kKT == 0 && TPR <= 2, "whole query tiles; at most two threads a row");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* Ks = reinterpret_cast<E*>(smem_raw);
  E* Vs = Ks + T * kRow;
  E* QD = Vs + T * kRow;     // [stage][Q | dO]
  E* slab = QD + 4 * TS;     // dS^T of the current query tile: [T keys][kKT queries]
  float* Ls = reinterpret_cast<float*>(slab + T * kRow);
  float* Ds = Ls + T;
  const int64_t C = NH * kHS, bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float qscale = rsqrtf((float)kHS) * kLog2e, sc = rsqrtf((float)kHS);
  const E* base = qkv + b * T * 3 * C + h * kHS;
  const E* dobase = dout + b * T * C + h * kHS;

  auto issue = [&](int it) {
    E* q = QD + (it & 1) * 2 * TS;
    tc2::tile_async<kHS, kKT, NT>(q, base, (int64_t)it * kKT, T, 3 * C);
    tc2::tile_async<kHS, kKT, NT>(q + TS, dobase, (int64_t)it * kKT, T, C);
  };
  tc2::tile_async<kHS, T, NT>(Ks, base + C, 0, T, 3 * C);
  tc2::tile_async<kHS, T, NT>(Vs, base + 2 * C, 0, T, 3 * C);
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
    // dQ of the tile, [kKT x kHS] = dS [kKT x T] K [T x kHS], in 8 pieces of 16 x 32. A from
    // the slab (stored transposed, so ldmatrix.trans), B from K as mma_ab reads V.
    const int mi = lane / 8, rr = lane % 8;
    for (int piece = warp; piece < 8; piece += NW) {
      const int qr = 16 * (piece / 2), dc = 32 * (piece % 2);
      float acc[4][4] = {};
#pragma unroll 4
      for (int kk = 0; kk < T / 16; ++kk) {
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
      E* dq = dqkv + (b * T + (int64_t)it * kKT + qr + g) * 3 * C + h * kHS + dc + 2 * t;
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        *reinterpret_cast<uint32_t*>(dq + 8 * n) = pack2<E>(acc[n][0] * sc, acc[n][1] * sc);
        *reinterpret_cast<uint32_t*>(dq + 8 * 3 * C + 8 * n) = pack2<E>(acc[n][2] * sc, acc[n][3] * sc);
      }
    }
  }
  E* dbase = dqkv + b * T * 3 * C + h * kHS;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    tc2::store_acc<kHS>(dbase + C, 3 * C, KW * warp + 16 * m, T, dk[m], sc, sc, lane);
    tc2::store_acc<kHS>(dbase + 2 * C, 3 * C, KW * warp + 16 * m, T, dv[m], 1.f, 1.f, lane);
  }
}

template <int NW, int MT, class E>
void launch(const Ctx& c, E* dqkv, const E* dout, const E* qkv, const E* out, const float* stats,
            float stats_to_log2, int64_t B, int64_t NH) {
  constexpr size_t smem = smem_bytes<16 * MT * NW>();
  static const bool once = (tc2::smem_optin(bwd_kernel<NW, MT, E>, smem), true);
  (void)once;
  bwd_kernel<NW, MT, E><<<(unsigned)(B * NH), NW * 32, smem, c.stream>>>(dqkv, dout, qkv, out, stats,
                                                                          stats_to_log2, NH);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda::onepass

namespace ft::cuda {

bool attention_backward_onepass_fits(const Ctx& c, int64_t T, int64_t HS, bool causal) {
  if (causal || HS != onepass::kHS || c.cc_major < 8) return false;
  const size_t smem = T == 64    ? onepass::smem_bytes<64>()
                      : T == 128 ? onepass::smem_bytes<128>()
                      : T == 256 ? onepass::smem_bytes<256>()
                                 : 0;
  return smem > 0 && smem <= c.max_smem_optin;
}

void attention_backward_onepass(const Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv,
                                const void* out, const float* stats, float stats_to_log2, int64_t B, int64_t T,
                                int64_t NH, int keys_per_warp) {
  FT_CHECK(t == DType::bf16 || t == DType::f16, "attention (one-pass backward): ", dtype_name(t),
           " storage; it takes bf16 or f16");
  FT_CHECK(attention_backward_onepass_fits(c, T, onepass::kHS, false),
           "attention (one-pass backward): T=", T, " is not 64, 128 or 256, or this device (sm_",
           c.cc_major, "x, ", c.max_smem_optin, " bytes of shared memory a block) cannot run it");
  FT_CHECK(aligned16(dqkv) && aligned16(dout) && aligned16(qkv) && aligned16(out),
           "attention (one-pass backward): pointers must be 16-byte aligned");
  if (B * NH == 0) return;
  // 32 keys a warp from T = 128 on, 16 at T = 64 (where 32 would leave two warps a block)
  const bool wide = keys_per_warp == 32 || (keys_per_warp != 16 && T >= 128);  // MT = 2
  auto typed = [&](auto tag) {
    using E = decltype(tag);
    auto run = [&](auto nw, auto mt) {
      onepass::launch<decltype(nw)::value, decltype(mt)::value>(
          c, static_cast<E*>(dqkv), static_cast<const E*>(dout), static_cast<const E*>(qkv),
          static_cast<const E*>(out), stats, stats_to_log2, B, NH);
    };
    using std::integral_constant;
    using M1 = integral_constant<int, 1>;
    using M2 = integral_constant<int, 2>;
    if (T == 64) wide ? run(integral_constant<int, 2>{}, M2{}) : run(integral_constant<int, 4>{}, M1{});
    else if (T == 128) wide ? run(integral_constant<int, 4>{}, M2{}) : run(integral_constant<int, 8>{}, M1{});
    else wide ? run(integral_constant<int, 8>{}, M2{}) : run(integral_constant<int, 16>{}, M1{});
  };
  if (t == DType::f16) typed(f16{});
  else typed(bf16{});
}

}  // namespace ft::cuda
