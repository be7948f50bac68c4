// Causal flash attention on tensor cores (bf16 or f16 storage E, mma.sync m16n8k16, fp32
// accumulate and softmax), second generation:
// 8 warps per block own 128 query (or key) rows, so each streamed 64-row tile is shared by
// twice the rows of the first version; tiles stream through shared memory with cp.async,
// two stages deep (the next tile's copy runs under the current tile's math, no register
// staging); warps skip tiles that the causal mask hides completely and mask only on the
// diagonal. Backward keeps the deterministic two-kernel split (dQ; dK/dV), and processes the
// streamed tile in halves of 32 so that S and dP need half the registers.
// Accumulator element acc[j][e] of a warp's 16-row result is row g + 8*(e/2), column
// 8j + 2*t + (e%2), with g = lane/4, t = lane%4.
// GEN instantiations (attention_tc.cuh's AttnMask) add non-causal attention and per-sample
// lengths; GEN = false is GPT-2's causal kernel unchanged. Padded query rows store output 0 and
// lse = +inf, so backward's exp2(s - lse) is 0 for them without a mask.
// PACK instantiations (GEN = false, PACK = true) keep attention inside packed samples: each
// query row also hides the keys before its sample's first token. Sample starts never decrease
// down a row, so a block starts at the key tile of its first query's sample (a packed row of
// short samples costs about what its samples cost alone, not T^2/2), a warp skips the tiles
// before its first row's sample, and dK/dV stops at the first query tile past the samples of
// its keys. PACK = false compiles every line of it away.
#include <cstdlib>

#include "backend/cuda/attention_tc2_tiles.cuh"

namespace ft::cuda::tc2 {
using namespace tc;

// PACK: this thread's rows' first visible keys (rows row0, row0 + 8), the warp's smallest (its
// first row's: sample starts never decrease down a row) and the block's first key tile (its
// first row q0's). Rows past T take 0 (they store nothing). All 0 without PACK.
struct PackRows {
  int64_t kmin[2], wmin, kfirst;
};
template <bool PACK>
__device__ __forceinline__ PackRows pack_rows(const AttnMask& m, int64_t b, int64_t q0,
                                              int64_t wr0, int64_t row0, int64_t T_) {
  PackRows p{{0, 0}, 0, 0};
  if constexpr (PACK) {
    p.kmin[0] = row0 < T_ ? attn_first_key(m, b, row0, T_) : 0;
    p.kmin[1] = row0 + 8 < T_ ? attn_first_key(m, b, row0 + 8, T_) : 0;
    p.wmin = wr0 < T_ ? attn_first_key(m, b, wr0, T_) : 0;
    p.kfirst = attn_first_key(m, b, q0, T_) / kKT * kKT;
  }
  return p;
}

template <int HS, int NW> constexpr size_t fwd_smem() {
  return (size_t)(16 * NW + 4 * kKT) * kS<HS> * 2;  // 2 = sizeof(E) = sizeof(f16)
}
// grid (B*NH, ceil(T / 16NW)); y = 0 is the last (heaviest) query tile.
template <int HS, int NW, bool FTZ, bool GEN, bool PACK, class E>
__global__ void __launch_bounds__(NW * 32, 16 / NW)
    fwd_kernel(E* out, float* lse, const E* qkv, int64_t T_, int64_t NH, AttnMask mask) {
  static_assert(!(GEN && PACK), "packed samples take the causal, full-length kernel");
  constexpr int NT = NW * 32, QR = 16 * NW, TS = kKT * kS<HS>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* Qs = reinterpret_cast<E*>(smem_raw);
  E* KV = Qs + QR * kS<HS>;  // [stage][K | V]
  const int64_t C = NH * HS;
  const int64_t bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int64_t q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * QR;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t wr0 = q0 + warp * 16, row0 = wr0 + g;  // this thread's rows: row0, row0 + 8
  const float qscale = rsqrtf((float)HS) * kLog2e;
  const E* base = qkv + b * T_ * 3 * C + h * HS;
  const bool causal = attn_causal<GEN>(mask);
  const int64_t kvlen = attn_len<GEN>(mask, b, T_);  // keys past it are masked
  const int64_t kend = causal ? min(kvlen, q0 + QR) : kvlen;
  const PackRows pr = pack_rows<PACK>(mask, b, q0, wr0, row0, T_);  // PACK: key lower bounds
  const int ntiles = (int)((kend - pr.kfirst + kKT - 1) / kKT);

  tile_async<HS, QR, NT>(Qs, base, q0, T_, 3 * C);
  kv_tile_async<HS, NT>(KV, 0, base, pr.kfirst, T_, C);
  cp_commit();
  uint32_t qa[HS / 16][4];
  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for (int it = 0; it < ntiles; ++it) {
    const int64_t k0 = pr.kfirst + (int64_t)it * kKT;
    if (it + 1 < ntiles) kv_tile_async<HS, NT>(KV, (it + 1) & 1, base, k0 + kKT, T_, C);
    await_tile();
    if (it == 0) load_a<HS>(qa, Qs + warp * 16 * kS<HS>, lane);
    const E* Ks = KV + (it & 1) * 2 * TS;
    // warp-uniform: some key of the tile is visible to the warp (PACK: and not wholly before
    // the sample of the warp's first row)
    if ((!causal || k0 <= wr0 + 15) && (!PACK || k0 + kKT > pr.wmin)) {
      float s[8][4] = {};
      mma_abt<HS, 8>(s, qa, Ks, lane);
      const bool diag = causal && k0 + kKT - 1 > wr0;
      const int rel = (int)(row0 - k0);  // 32-bit mask arithmetic
      const bool edge = GEN && k0 + kKT > kvlen;  // the tile has keys past the sample (or T)
      const int klim = (int)(kvlen - k0);
      // PACK: columns below these are keys before the row's sample
      const int lo[2] = {(int)(pr.kmin[0] - k0), (int)(pr.kmin[1] - k0)};
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = s[j][e] * qscale;
          if (diag && 8 * j + 2 * t + (e % 2) > rel + 8 * (e / 2)) v = -INFINITY;
          if (edge && 8 * j + 2 * t + (e % 2) >= klim) v = -INFINITY;
          if (PACK && 8 * j + 2 * t + (e % 2) < lo[e / 2]) v = -INFINITY;
          s[j][e] = v;
          mx[e / 2] = fmaxf(mx[e / 2], v);
        }
      float corr[2], mn[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        mn[r] = fmaxf(m[r], mx[r]);
        // PACK: a row may have seen no key yet (its sample starts further on): m stays -inf
        // and the exponentials subtract 0, giving 0 instead of exp2(-inf + inf) = NaN.
        // (Without PACK every row sees key 0 of the first tile.)
        const float sub = PACK && mn[r] == -INFINITY ? 0.f : mn[r];
        corr[r] = ex2<FTZ>(m[r] - sub);
        l[r] *= corr[r];
        m[r] = mn[r];
        mn[r] = sub;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float p = ex2<FTZ>(s[j][e] - mn[e / 2]);
          s[j][e] = p;
          l[e / 2] += p;
        }
#pragma unroll
      for (int j = 0; j < HS / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] *= corr[e / 2];
      uint32_t pa[4][4];
      acc_to_a<E, 8>(pa, s);
      mma_ab<HS, 4>(o, pa, Ks + TS, lane);
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  // padded query rows (GEN): output 0 (every row saw key 0, so o is finite) and lse +inf
  const bool pad0 = GEN && row0 >= kvlen, pad1 = GEN && row0 + 8 >= kvlen;
  store_acc<HS>(out + b * T_ * C + h * HS, C, wr0, T_, o, pad0 ? 0.f : 1.f / l[0],
                pad1 ? 0.f : 1.f / l[1], lane);
  if (t == 0) {
    if (row0 < T_) lse[bh * T_ + row0] = pad0 ? INFINITY : m[0] + log2f(l[0]);
    if (row0 + 8 < T_) lse[bh * T_ + row0 + 8] = pad1 ? INFINITY : m[1] + log2f(l[1]);
  }
}

template <int HS, int NW> constexpr size_t dq_smem() {
  return (size_t)(2 * 16 * NW + 4 * kKT) * kS<HS> * 2 + 2 * 16 * NW * sizeof(float);
}
// dQ, and Drow = rowsum(dO * O) for the dK/dV kernel. Grid as fwd_kernel.
template <int HS, int NW, bool FTZ, bool GEN, bool PACK, class E>
__global__ void __launch_bounds__(NW * 32, 16 / NW)
    dq_kernel(E* dqkv, float* Drow, const E* dout, const E* qkv, const E* out,
              const float* lse, int64_t T_, int64_t NH, AttnMask mask) {
  static_assert(!(GEN && PACK), "packed samples take the causal, full-length kernel");
  constexpr int NT = NW * 32, QR = 16 * NW, TS = kKT * kS<HS>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* Qs = reinterpret_cast<E*>(smem_raw);
  E* dOs = Qs + QR * kS<HS>;
  E* KV = dOs + QR * kS<HS>;
  float* Ls = reinterpret_cast<float*>(KV + 4 * TS);
  float* Ds = Ls + QR;
  const int64_t C = NH * HS;
  const int64_t bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int64_t q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * QR;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t wr0 = q0 + warp * 16, row0 = wr0 + g;
  const float qscale = rsqrtf((float)HS) * kLog2e;
  const E* base = qkv + b * T_ * 3 * C + h * HS;
  const E* dobase = dout + b * T_ * C + h * HS;
  const bool causal = attn_causal<GEN>(mask);
  const int64_t kvlen = attn_len<GEN>(mask, b, T_);
  const int64_t kend = causal ? min(kvlen, q0 + QR) : kvlen;
  const PackRows pr = pack_rows<PACK>(mask, b, q0, wr0, row0, T_);  // PACK: key lower bounds
  const int ntiles = (int)((kend - pr.kfirst + kKT - 1) / kKT);

  tile_async<HS, QR, NT>(Qs, base, q0, T_, 3 * C);
  tile_async<HS, QR, NT>(dOs, dobase, q0, T_, C);
  kv_tile_async<HS, NT>(KV, 0, base, pr.kfirst, T_, C);
  cp_commit();
  if (threadIdx.x < QR) {  // D and lse of the tile's rows
    int64_t r = q0 + threadIdx.x;
    float d = 0.f, L = 0.f;
    if (r < T_) {
      const E* o = out + (b * T_ + r) * C + h * HS;
      const E* dO = dobase + r * C;
#pragma unroll
      for (int k = 0; k < HS; k += 8) {
        Pack<E> x = load16(o + k), y = load16(dO + k);
#pragma unroll
        for (int i = 0; i < 8; ++i) d += x.f(i) * y.f(i);
      }
      L = lse[bh * T_ + r];
      Drow[bh * T_ + r] = d;
    }
    Ds[threadIdx.x] = d;
    Ls[threadIdx.x] = L;
  }
  uint32_t qa[HS / 16][4], da[HS / 16][4];
  float Lr[2], Dr[2];
  float dq[HS / 8][4] = {};
  for (int it = 0; it < ntiles; ++it) {
    const int64_t k0 = pr.kfirst + (int64_t)it * kKT;
    if (it + 1 < ntiles) kv_tile_async<HS, NT>(KV, (it + 1) & 1, base, k0 + kKT, T_, C);
    await_tile();
    if (it == 0) {
      load_a<HS>(qa, Qs + warp * 16 * kS<HS>, lane);
      load_a<HS>(da, dOs + warp * 16 * kS<HS>, lane);
      Lr[0] = Ls[warp * 16 + g], Lr[1] = Ls[warp * 16 + g + 8];
      Dr[0] = Ds[warp * 16 + g], Dr[1] = Ds[warp * 16 + g + 8];
    }
    const E* Ks = KV + (it & 1) * 2 * TS;
    const E* Vs = Ks + TS;
#pragma unroll
    for (int hk = 0; hk < 2; ++hk) {
      const int64_t kh = k0 + 32 * hk;
      if (causal && kh > wr0 + 15) continue;  // warp-uniform: all 32 keys hidden from the warp
      if (GEN && kh >= kvlen) continue;       // block-uniform: all 32 keys past the sample
      if (PACK && kh + 32 <= pr.wmin) continue;  // warp-uniform: all before the warp's samples
      float s[4][4] = {}, dp[4][4] = {};
      mma_abt<HS, 4>(s, qa, Ks + 32 * hk * kS<HS>, lane);
      mma_abt<HS, 4>(dp, da, Vs + 32 * hk * kS<HS>, lane);
      const bool diag = causal && kh + 31 > wr0;
      const int rel = (int)(row0 - kh);  // 32-bit mask arithmetic
      const bool edge = GEN && kh + 32 > kvlen;  // some of the 32 keys past the sample (or T)
      const int klim = (int)(kvlen - kh);
      // PACK: columns below these are keys before the row's sample
      const int lo[2] = {(int)(pr.kmin[0] - kh), (int)(pr.kmin[1] - kh)};
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e / 2;
          bool ok = !diag || 8 * j + 2 * t + (e % 2) <= rel + 8 * r;
          if (edge && 8 * j + 2 * t + (e % 2) >= klim) ok = false;
          if (PACK && 8 * j + 2 * t + (e % 2) < lo[r]) ok = false;
          float p = ok ? ex2<FTZ>(s[j][e] * qscale - Lr[r]) : 0.f;
          s[j][e] = p * (dp[j][e] - Dr[r]);
        }
      uint32_t sa[2][4];
      acc_to_a<E, 4>(sa, s);
      mma_ab<HS, 2>(dq, sa, Ks + 32 * hk * kS<HS>, lane);
    }
    __syncthreads();
  }
  const float sc = rsqrtf((float)HS);
  store_acc<HS>(dqkv + b * T_ * 3 * C + h * HS, 3 * C, wr0, T_, dq, sc, sc, lane);
}

// PACK adds the streamed query tiles' positions, [stage][kKT] ints after [stage][L | D].
template <int HS, int NW, bool PACK = false> constexpr size_t dkv_smem() {
  return (size_t)(2 * 16 * NW + 4 * kKT) * kS<HS> * 2 + 4 * kKT * sizeof(float) +
         (PACK ? 2 * kKT * sizeof(int) : 0);
}
// dK, dV: a warp owns 16 keys (a block 16NW); query tiles from the block's first key on
// stream through shared memory with their lse and Drow. grid (B*NH, ceil(T / 16NW)), y = 0
// (the heaviest key tile) first. KVREG: the warp's K/V fragments stay in registers
// (else they are re-read from shared memory for each half tile). PACK: a query sees a key
// only inside its sample, i.e. when its position reaches back to the key.
template <int HS, int NW, int MINB, bool KVREG, bool FTZ, bool GEN, bool PACK, class E>
__global__ void __launch_bounds__(NW * 32, MINB)
    dkv_kernel(E* dqkv, const E* dout, const E* qkv, const float* lse,
               const float* Drow, int64_t T_, int64_t NH, AttnMask mask) {
  static_assert(!(GEN && PACK), "packed samples take the causal, full-length kernel");
  constexpr int NT = NW * 32, KR = 16 * NW, TS = kKT * kS<HS>;
  static_assert(KR % kKT == 0, "dkv_kernel: key block must be whole tiles");
  static_assert(!PACK || NT >= kKT, "dkv_kernel: one thread per query position");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* Ks = reinterpret_cast<E*>(smem_raw);
  E* Vs = Ks + KR * kS<HS>;
  E* QD = Vs + KR * kS<HS>;                        // [stage][Q | dO]
  float* St = reinterpret_cast<float*>(QD + 4 * TS);  // [stage][L | D]
  int* Ps = reinterpret_cast<int*>(St + 4 * kKT);     // PACK: [stage][positions]
  const int64_t C = NH * HS;
  const int64_t bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int64_t j0 = (int64_t)blockIdx.y * KR;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t wk0 = j0 + warp * 16, key0 = wk0 + g;  // this thread's keys: key0, key0 + 8
  const float qscale = rsqrtf((float)HS) * kLog2e;
  const E* base = qkv + b * T_ * 3 * C + h * HS;
  const E* dobase = dout + b * T_ * C + h * HS;
  const bool causal = attn_causal<GEN>(mask);
  const int64_t qlen = attn_len<GEN>(mask, b, T_);  // the sample's queries (and keys)
  const int64_t istart = causal ? j0 : 0;           // first query tile that sees these keys
  int ntiles;
  if constexpr (GEN) {
    ntiles = (int)((qlen - istart + kKT - 1) / kKT);
    // At least one tile, so the pipeline's first copies are awaited; a block whose keys are
    // all past the sample then streams one masked tile and stores zeros.
    if (ntiles < 1) ntiles = 1;
  } else {
    ntiles = (int)((T_ - j0 + kKT - 1) / kKT);
  }
  if constexpr (PACK) {
    // Queries past the samples of the block's keys see none of them. Sample starts never
    // decrease down the row, so the query tiles end before the first one whose first query's
    // sample starts after the block's last key: count the tiles that do not (one thread a
    // tile; at least one, the tile of j0 itself, whose sample starts at or before j0).
    const int64_t klast = min(j0 + KR, T_) - 1;
    const int cand = ntiles;
    ntiles = 0;
    for (int c0 = 0; c0 < cand; c0 += NT) {
      const int c = c0 + (int)threadIdx.x;
      const bool need = c < cand && attn_first_key(mask, b, j0 + (int64_t)c * kKT, T_) <= klast;
      const int n = __syncthreads_count(need);
      ntiles += n;
      if (n < NT) break;  // block-uniform
    }
  }
  // GEN: keys past the sample get no probability (their dk, dv stay 0)
  const bool kval0 = !GEN || key0 < qlen, kval1 = !GEN || key0 + 8 < qlen;

  auto issue = [&](int it) {
    const int64_t i0 = istart + (int64_t)it * kKT;
    E* q = QD + (it & 1) * 2 * TS;
    tile_async<HS, kKT, NT>(q, base, i0, T_, 3 * C);
    tile_async<HS, kKT, NT>(q + TS, dobase, i0, T_, C);
    if (threadIdx.x < 2 * kKT) {
      const int i = threadIdx.x % kKT;
      const bool ok = i0 + i < T_;
      const float* src = threadIdx.x < kKT ? lse : Drow;
      cp4(St + (it & 1) * 2 * kKT + threadIdx.x, src + bh * T_ + (ok ? i0 + i : 0), ok);
    }
    if constexpr (PACK) {
      if (threadIdx.x < kKT) {  // rows past T read as position 0 (their columns are masked)
        const bool ok = i0 + threadIdx.x < T_;
        cp4(Ps + (it & 1) * kKT + threadIdx.x,
            mask.positions + b * T_ + (ok ? i0 + threadIdx.x : 0), ok);
      }
    }
  };
  tile_async<HS, KR, NT>(Ks, base + C, j0, T_, 3 * C);
  tile_async<HS, KR, NT>(Vs, base + 2 * C, j0, T_, 3 * C);
  issue(0);
  cp_commit();
  uint32_t ka[HS / 16][4], va[HS / 16][4];
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  for (int it = 0; it < ntiles; ++it) {
    const int64_t i0 = istart + (int64_t)it * kKT;
    if (it + 1 < ntiles) issue(it + 1);
    await_tile();
    if (KVREG && it == 0) {
      load_a<HS>(ka, Ks + warp * 16 * kS<HS>, lane);
      load_a<HS>(va, Vs + warp * 16 * kS<HS>, lane);
    }
    const E* Qs = QD + (it & 1) * 2 * TS;
    const E* dOs = Qs + TS;
    const float* Ls = St + (it & 1) * 2 * kKT;
    const float* Ds = Ls + kKT;
    const int* P = Ps + (it & 1) * kKT;  // PACK
#pragma unroll
    for (int hq = 0; hq < 2; ++hq) {
      const int64_t ih = i0 + 32 * hq;
      if (causal && ih + 31 < wk0) continue;  // warp-uniform: all 32 queries precede the warp's keys
      // PACK, warp-uniform: the first of the 32 queries (so all) in samples after the warp's keys
      if (PACK && ih - P[32 * hq] > wk0 + 15) continue;
      if (!KVREG) {
        load_a<HS>(ka, Ks + warp * 16 * kS<HS>, lane);
        load_a<HS>(va, Vs + warp * 16 * kS<HS>, lane);
      }
      float s[4][4] = {}, dp[4][4] = {};
      mma_abt<HS, 4>(s, ka, Qs + 32 * hq * kS<HS>, lane);   // S^T: rows = keys
      mma_abt<HS, 4>(dp, va, dOs + 32 * hq * kS<HS>, lane); // dP^T
      bool edge;  // GEN = false: GPT-2's expression as it was
      if constexpr (GEN) edge = (causal && ih < wk0 + 15) || ih + 32 > T_;
      else edge = ih < wk0 + 15 || ih + 32 > T_;
      const int qk = (int)(i0 - key0), qlim = (int)min(T_ - i0, (int64_t)kKT);  // 32-bit masks
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c0 = 32 * hq + 8 * j + 2 * t;
        const float2 L2 = *reinterpret_cast<const float2*>(Ls + c0);
        const float2 D2 = *reinterpret_cast<const float2*>(Ds + c0);
        int2 P2{};
        if constexpr (PACK) P2 = *reinterpret_cast<const int2*>(P + c0);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = c0 + (e % 2);
          bool ok;
          if constexpr (GEN)
            ok = (e / 2 ? kval1 : kval0) &&
                 (!edge || ((!causal || qk + col >= 8 * (e / 2)) && col < qlim));
          else
            ok = !edge || (qk + col >= 8 * (e / 2) && col < qlim);
          // PACK: query i0 + col's sample starts at or before the key: its position reaches
          // back over (query - key) = qk + col - 8(e/2) tokens
          if (PACK && (e % 2 ? P2.y : P2.x) < qk + col - 8 * (e / 2)) ok = false;
          float p = ok ? ex2<FTZ>(s[j][e] * qscale - (e % 2 ? L2.y : L2.x)) : 0.f;
          s[j][e] = p;
          dp[j][e] = p * (dp[j][e] - (e % 2 ? D2.y : D2.x));
        }
      }
      uint32_t pa[2][4], sa[2][4];
      acc_to_a<E, 4>(pa, s);
      acc_to_a<E, 4>(sa, dp);
      mma_ab<HS, 2>(dv, pa, dOs + 32 * hq * kS<HS>, lane);
      mma_ab<HS, 2>(dk, sa, Qs + 32 * hq * kS<HS>, lane);
    }
    __syncthreads();
  }
  E* dbase = dqkv + b * T_ * 3 * C + h * HS;
  const float sc = rsqrtf((float)HS);
  store_acc<HS>(dbase + C, 3 * C, wk0, T_, dk, sc, sc, lane);
  store_acc<HS>(dbase + 2 * C, 3 * C, wk0, T_, dv, 1.f, 1.f, lane);
}

// FT_ATTN_DKV selects the dK/dV variant (for measurements; H200, GPT-2 124M B=8 T=1024):
// 0 = 8 warps, K/V fragments re-read from shared memory (2 blocks/SM): 0.271 ms with dQ;
// 1 = 8 warps, fragments in registers (1 block/SM): 0.332 ms; 2 (default) = 4 warps,
// re-read (4 blocks/SM): 0.256 ms; 3 = 4 warps, fragments in registers (3 blocks/SM).
// FT_ATTN_EX2: 1 (default) = softmax exponentials by ex2.approx.ftz; 0 = exp2f. The dK/dV
// variants other than the default (FT_ATTN_DKV) always use exp2f. H200, GPT-2 124M B=8:
// backward 0.215 ms (ftz) against 0.236 (exp2f); forward 0.073-0.074 against 0.071-0.072.
bool ex2_ftz() {
  static const bool v = [] {
    const char* e = std::getenv("FT_ATTN_EX2");
    return e ? std::atoi(e) != 0 : true;
  }();
  return v;
}
int dkv_variant() {
  static const int v = [] {
    const char* e = std::getenv("FT_ATTN_DKV");
    return e ? std::atoi(e) : 2;
  }();
  return v;
}
// FT_ATTN_NW: warps per block of the forward kernel, 4 (default; H200 B=8: 0.073 ms) or 8
// (0.077 ms). The dQ kernel runs 8 (4 measured the same).
int fwd_warps() {
  static const int v = [] {
    const char* e = std::getenv("FT_ATTN_NW");
    return e && std::atoi(e) == 8 ? 8 : 4;
  }();
  return v;
}

}  // namespace ft::cuda::tc2

namespace ft::cuda {

// GEN: the masked kernels (AttnMask), PACK: the packed-sample ones; the default tuning
// variant only.
template <int NW, bool FTZ, bool GEN = false, bool PACK = false, class E>
static void launch_fwd(const Ctx& c, E* out, float* lse, const E* qkv, int64_t B, int64_t T,
                       int64_t NH, AttnMask mask = {}) {
  using namespace tc2;
  constexpr size_t smem = fwd_smem<64, NW>();
  static const bool once = (smem_optin(fwd_kernel<64, NW, FTZ, GEN, PACK, E>, smem), true);
  (void)once;
  dim3 grid((unsigned)(B * NH), (unsigned)ceil_div(T, 16 * NW));
  fwd_kernel<64, NW, FTZ, GEN, PACK, E>
      <<<grid, NW * 32, smem, c.stream>>>(out, lse, qkv, T, NH, mask);
  CUDA_CHECK_LAUNCH();
}

template <class E>
void attention_forward_tc2(const Ctx& c, E* out, float* lse, const E* qkv, int64_t B, int64_t T,
                           int64_t NH, const AttnMask* mask) {
  const bool ftz = tc2::ex2_ftz();
  if (mask && mask->positions) {  // packed samples
    if (ftz) launch_fwd<4, true, false, true>(c, out, lse, qkv, B, T, NH, *mask);
    else launch_fwd<4, false, false, true>(c, out, lse, qkv, B, T, NH, *mask);
    return;
  }
  if (mask) {
    if (ftz) launch_fwd<4, true, true>(c, out, lse, qkv, B, T, NH, *mask);
    else launch_fwd<4, false, true>(c, out, lse, qkv, B, T, NH, *mask);
    return;
  }
  if (tc2::fwd_warps() == 4) {
    if (ftz) launch_fwd<4, true>(c, out, lse, qkv, B, T, NH);
    else launch_fwd<4, false>(c, out, lse, qkv, B, T, NH);
  } else {
    if (ftz) launch_fwd<8, true>(c, out, lse, qkv, B, T, NH);
    else launch_fwd<8, false>(c, out, lse, qkv, B, T, NH);
  }
}

template <int NW, bool FTZ, bool GEN = false, bool PACK = false, class E>
static void launch_dq(const Ctx& c, E* dqkv, float* Drow, const E* dout, const E* qkv,
                      const E* out, const float* lse, int64_t B, int64_t T, int64_t NH,
                      AttnMask mask = {}) {
  using namespace tc2;
  constexpr size_t smem = dq_smem<64, NW>();
  static const bool once = (smem_optin(dq_kernel<64, NW, FTZ, GEN, PACK, E>, smem), true);
  (void)once;
  dim3 grid((unsigned)(B * NH), (unsigned)ceil_div(T, 16 * NW));
  dq_kernel<64, NW, FTZ, GEN, PACK, E>
      <<<grid, NW * 32, smem, c.stream>>>(dqkv, Drow, dout, qkv, out, lse, T, NH, mask);
  CUDA_CHECK_LAUNCH();
}

template <int NW, int MINB, bool KVREG, bool FTZ = false, bool GEN = false, bool PACK = false,
          class E>
static void launch_dkv(const Ctx& c, E* dqkv, const E* dout, const E* qkv, const float* lse,
                       const float* Drow, int64_t B, int64_t T, int64_t NH, AttnMask mask = {}) {
  using namespace tc2;
  constexpr size_t smem = dkv_smem<64, NW, PACK>();
  static const bool once =
      (smem_optin(dkv_kernel<64, NW, MINB, KVREG, FTZ, GEN, PACK, E>, smem), true);
  (void)once;
  dim3 grid((unsigned)(B * NH), (unsigned)ceil_div(T, 16 * NW));
  dkv_kernel<64, NW, MINB, KVREG, FTZ, GEN, PACK, E>
      <<<grid, NW * 32, smem, c.stream>>>(dqkv, dout, qkv, lse, Drow, T, NH, mask);
  CUDA_CHECK_LAUNCH();
}

template <class E>
void attention_backward_tc2(const Ctx& c, E* dqkv, float* Drow, const E* dout, const E* qkv,
                            const E* out, const float* lse, int64_t B, int64_t T, int64_t NH,
                            const AttnMask* mask) {
  const bool ftz = tc2::ex2_ftz();
  if (mask && mask->positions) {  // packed samples, the default variants as below
    if (ftz) {
      launch_dq<8, true, false, true>(c, dqkv, Drow, dout, qkv, out, lse, B, T, NH, *mask);
      launch_dkv<4, 4, false, true, false, true>(c, dqkv, dout, qkv, lse, Drow, B, T, NH, *mask);
    } else {
      launch_dq<8, false, false, true>(c, dqkv, Drow, dout, qkv, out, lse, B, T, NH, *mask);
      launch_dkv<4, 4, false, false, false, true>(c, dqkv, dout, qkv, lse, Drow, B, T, NH, *mask);
    }
    return;
  }
  if (mask) {  // the masked kernels, default variants (dQ 8 warps; dK/dV 4 warps, re-read)
    if (ftz) {
      launch_dq<8, true, true>(c, dqkv, Drow, dout, qkv, out, lse, B, T, NH, *mask);
      launch_dkv<4, 4, false, true, true>(c, dqkv, dout, qkv, lse, Drow, B, T, NH, *mask);
    } else {
      launch_dq<8, false, true>(c, dqkv, Drow, dout, qkv, out, lse, B, T, NH, *mask);
      launch_dkv<4, 4, false, false, true>(c, dqkv, dout, qkv, lse, Drow, B, T, NH, *mask);
    }
    return;
  }
  if (ftz) launch_dq<8, true>(c, dqkv, Drow, dout, qkv, out, lse, B, T, NH);
  else launch_dq<8, false>(c, dqkv, Drow, dout, qkv, out, lse, B, T, NH);
  if (ftz && tc2::dkv_variant() == 2) {
    launch_dkv<4, 4, false, true>(c, dqkv, dout, qkv, lse, Drow, B, T, NH);
    return;
  }
  switch (tc2::dkv_variant()) {
    case 0: launch_dkv<8, 2, false>(c, dqkv, dout, qkv, lse, Drow, B, T, NH); break;
    case 1: launch_dkv<8, 1, true>(c, dqkv, dout, qkv, lse, Drow, B, T, NH); break;
    case 3: launch_dkv<4, 3, true>(c, dqkv, dout, qkv, lse, Drow, B, T, NH); break;
    default: launch_dkv<4, 4, false>(c, dqkv, dout, qkv, lse, Drow, B, T, NH); break;
  }
}

template void attention_forward_tc2<bf16>(const Ctx&, bf16*, float*, const bf16*, int64_t,
                                          int64_t, int64_t, const AttnMask*);
template void attention_forward_tc2<f16>(const Ctx&, f16*, float*, const f16*, int64_t, int64_t,
                                         int64_t, const AttnMask*);
template void attention_backward_tc2<bf16>(const Ctx&, bf16*, float*, const bf16*, const bf16*,
                                           const bf16*, const float*, int64_t, int64_t, int64_t,
                                           const AttnMask*);
template void attention_backward_tc2<f16>(const Ctx&, f16*, float*, const f16*, const f16*,
                                          const f16*, const float*, int64_t, int64_t, int64_t,
                                          const AttnMask*);

}  // namespace ft::cuda
