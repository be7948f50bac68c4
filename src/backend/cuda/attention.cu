// Causal multi-head attention, fused flash-attention style (Dao et al.): forward streams key/
// value tiles through shared memory with an online softmax and keeps only the per-row
// log-sum-exp (fp32, base 2) for backward; no T x T matrix ever exists. Backward recomputes
// the probabilities tile by tile: one kernel computes dQ (and D = rowsum(dO * O)), a second
// one dK and dV. Both are deterministic (no atomics).
//
// Thread layout: each query (or key) row is owned by kTpr=4 consecutive lanes, each holding
// HS/4 of the head's dimensions as float4 chunks interleaved so that the 4 lanes read
// consecutive 16-byte words of a shared-memory row (no bank conflicts); dot products finish
// with two shuffles. Math is fp32 on CUDA cores. This path serves fp32 and head sizes 32/128;
// bf16/f16 with head size 64 (GPT-2) goes to the tensor-core kernels in attention_tc2.cu.
//
// Masks (AttentionOptions): each kernel has a GEN instantiation (attention_tc.cuh's AttnMask)
// for non-causal attention and per-sample lengths: keys >= len are masked; query rows >= len
// store output 0 and lse = +inf, so backward's probabilities exp2(s - lse) of those rows are 0
// and their gradients vanish without a branch. GEN = false compiles GPT-2's kernels unchanged.
// PACK instantiations (GEN = false) keep attention inside packed samples (AttnMask::positions):
// a query also hides the keys before its sample's first token, the forward and dQ kernels start
// at the key tile of the block's first query's sample, and dK/dV stops at the first query tile
// whose samples start after the block's last key (sample starts never decrease down a row).

#include "backend/cuda/attention_tc.cuh"  // Ctx, dtype helpers, the tc2 entry points

namespace ft::cuda {

namespace {
constexpr int kTpr = 4;   // lanes per row
constexpr int kRows = 64; // rows (queries or keys) per block
constexpr int kTile = 64; // rows of the streamed tile
constexpr float kLog2e = 1.4426950408889634f;
}

// ---- CUDA kernels ---------------------------------------------------------------------------

// Element (b, t, part, h, d) of qkv[B,T,3C] (part 0 = q, 1 = k, 2 = v).
__device__ __forceinline__ int64_t qkv_index(int64_t b, int64_t t, int part, int64_t h, int64_t T,
                                             int64_t C, int64_t HS) {
  return (b * T + t) * 3 * C + part * C + h * HS;
}

// Loads rows [r0, r0+kTile) of one head's part (q/k/v, or a [B,T,C] tensor when stride == C)
// into fp32 shared memory [kTile][HS]; rows past T become zeros.
template <class T, int HS>
__device__ __forceinline__ void load_tile(float* dst, const T* src, int64_t r0, int64_t T_,
                                          int64_t row_stride) {
  constexpr int P = Pack<T>::N;
  constexpr int packs = HS / P;
  for (int i = threadIdx.x; i < kTile * packs; i += blockDim.x) {
    int r = i / packs, c = (i % packs) * P;
    float* d = dst + r * HS + c;
    if (r0 + r < T_) {
      Pack<T> v = load16(src + (r0 + r) * row_stride + c);
#pragma unroll
      for (int k = 0; k < P; ++k) d[k] = v.f(k);
    } else {
#pragma unroll
      for (int k = 0; k < P; ++k) d[k] = 0.f;
    }
  }
}

// Reads this lane's HS/4 dims of a global row into registers (chunk i = dims 16i+4sub..+3).
template <class T, int HS>
__device__ __forceinline__ void load_row(float (&r)[HS / kTpr], const T* src, int sub) {
#pragma unroll
  for (int i = 0; i < HS / 16; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k) r[4 * i + k] = to_f32(src[16 * i + 4 * sub + k]);
}
template <class T, int HS>
__device__ __forceinline__ void store_row(T* dst, const float (&r)[HS / kTpr], int sub, float scale) {
#pragma unroll
  for (int i = 0; i < HS / 16; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k) dst[16 * i + 4 * sub + k] = from_f32<T>(r[4 * i + k] * scale);
}
// Dot of this lane's dims with shared-memory row `row`, summed over the row's 4 lanes.
template <int HS>
__device__ __forceinline__ float dot_row(const float (&a)[HS / kTpr], const float* row, int sub) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < HS / 16; ++i) {
    float4 v = *reinterpret_cast<const float4*>(row + 16 * i + 4 * sub);
    s += a[4 * i] * v.x + a[4 * i + 1] * v.y + a[4 * i + 2] * v.z + a[4 * i + 3] * v.w;
  }
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  return s;
}
template <int HS>
__device__ __forceinline__ void axpy_row(float (&acc)[HS / kTpr], float p, const float* row, int sub) {
#pragma unroll
  for (int i = 0; i < HS / 16; ++i) {
    float4 v = *reinterpret_cast<const float4*>(row + 16 * i + 4 * sub);
    acc[4 * i] += p * v.x;
    acc[4 * i + 1] += p * v.y;
    acc[4 * i + 2] += p * v.z;
    acc[4 * i + 3] += p * v.w;
  }
}

// Where a thread of the three kernels stands. Grid (ceil(T/kRows), B*NH), block kRows*kTpr:
// block y is one (batch b, head h), bh = b*NH + h; block x owns kRows rows (queries or keys)
// from r0, kTpr lanes a row; the thread's row is `row`, its lane `sub`. Rows past T compute on
// the valid row rc and never store. C = NH*HS. Fields in the order the kernels bind them.
struct RowThread {
  int64_t C, bh, b, h, r0, row, rc;
  int sub;
};
// last_first: block x = 0 takes the last rows (the heaviest query tiles, which see most keys).
template <int HS>
__device__ __forceinline__ RowThread row_thread(int64_t T_, int64_t NH, bool last_first) {
  RowThread p;
  p.C = NH * HS;
  p.bh = blockIdx.y;
  p.b = p.bh / NH;
  p.h = p.bh % NH;
  p.r0 = (int64_t)(last_first ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * kRows;
  const int r = threadIdx.x / kTpr;
  p.sub = threadIdx.x % kTpr;
  p.row = p.r0 + r;
  p.rc = p.row < T_ ? p.row : T_ - 1;
  return p;
}

// Key and value rows [k0, k0 + kTile) of head h into Ks and Vs. The barrier before keeps the
// previous tile until every row is done with it, the one after completes the new one.
template <class T, int HS>
__device__ __forceinline__ void stream_kv_tile(float* Ks, float* Vs, const T* qkv, int64_t b,
                                               int64_t h, int64_t k0, int64_t T_, int64_t C) {
  __syncthreads();
  load_tile<T, HS>(Ks, qkv + qkv_index(b, 0, 1, h, T_, C, HS), k0, T_, 3 * C);
  load_tile<T, HS>(Vs, qkv + qkv_index(b, 0, 2, h, T_, C, HS), k0, T_, 3 * C);
  __syncthreads();
}

// Grid and block as RowThread says; query tiles run heaviest (last) first.
template <class T, int HS, bool GEN, bool PACK>
__global__ void __launch_bounds__(kRows* kTpr)
    attention_forward_kernel(T* out, float* lse, const T* qkv, int64_t T_, int64_t NH,
                             AttnMask mask) {
  static_assert(!(GEN && PACK), "packed samples take the causal, full-length kernel");
  constexpr int D = HS / kTpr;
  constexpr int kChunk = 16;
  extern __shared__ float sh[];
  float* Ks = sh;
  float* Vs = sh + kTile * HS;
  const auto [C, bh, b, h, q0, qi, qc, sub] = row_thread<HS>(T_, NH, true);
  const float qscale = rsqrtf((float)HS) * kLog2e;
  const bool causal = attn_causal<GEN>(mask);
  const int64_t kvlen = attn_len<GEN>(mask, b, T_);

  float q[D], o[D];
  load_row<T, HS>(q, qkv + qkv_index(b, qc, 0, h, T_, C, HS), sub);
#pragma unroll
  for (int k = 0; k < D; ++k) {
    q[k] *= qscale;
    o[k] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int64_t kend = causal ? min(kvlen, q0 + kRows) : kvlen;
  // PACK: this row's first visible key, and the block's first key tile (its first row's)
  const int64_t kmin = PACK ? attn_first_key(mask, b, qc, T_) : 0;
  const int64_t kfirst = PACK ? attn_first_key(mask, b, q0, T_) / kTile * kTile : 0;
  for (int64_t k0 = kfirst; k0 < kend; k0 += kTile) {
    stream_kv_tile<T, HS>(Ks, Vs, qkv, b, h, k0, T_, C);
    for (int j0 = 0; j0 < kTile; j0 += kChunk) {
      float s[kChunk];
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        float d = dot_row<HS>(q, Ks + (j0 + j) * HS, sub);
        const int64_t key = k0 + j0 + j;
        s[j] = (GEN ? (!causal || key <= qc) && key < kvlen : key <= qc) ? d : -INFINITY;
        if (PACK && key < kmin) s[j] = -INFINITY;  // before the row's sample
        mx = fmaxf(mx, s[j]);
      }
      float mn = fmaxf(m, mx);
      if (mn == -INFINITY) continue;  // whole chunk masked and nothing seen yet
      float corr = exp2f(m - mn);
      l *= corr;
#pragma unroll
      for (int k = 0; k < D; ++k) o[k] *= corr;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        float p = exp2f(s[j] - mn);
        l += p;
        axpy_row<HS>(o, p, Vs + (j0 + j) * HS, sub);
      }
      m = mn;
    }
  }
  if (qi < T_) {
    const bool pad = GEN && qi >= kvlen;  // a padded query row: output 0, lse +inf
    if (pad)
#pragma unroll
      for (int k = 0; k < D; ++k) o[k] = 0.f;
    store_row<T, HS>(out + (b * T_ + qi) * C + h * HS, o, sub, pad ? 1.f : 1.f / l);
    if (sub == 0) lse[bh * T_ + qi] = pad ? INFINITY : m + log2f(l);
  }
}

// dQ and Drow = rowsum(dO * O). grid (ceil(T/kRows), B*NH), thread group per query row.
template <class T, int HS, bool GEN, bool PACK>
__global__ void __launch_bounds__(kRows* kTpr)
    attention_backward_dq_kernel(T* dqkv, float* Drow, const T* dout, const T* qkv, const T* out,
                                 const float* lse, int64_t T_, int64_t NH, AttnMask mask) {
  static_assert(!(GEN && PACK), "packed samples take the causal, full-length kernel");
  constexpr int D = HS / kTpr;
  extern __shared__ float sh[];
  float* Ks = sh;
  float* Vs = sh + kTile * HS;
  const auto [C, bh, b, h, q0, qi, qc, sub] = row_thread<HS>(T_, NH, true);
  const float qscale = rsqrtf((float)HS) * kLog2e;

  float q[D], dO[D], tmp[D], dq[D];
  load_row<T, HS>(q, qkv + qkv_index(b, qc, 0, h, T_, C, HS), sub);
  load_row<T, HS>(dO, dout + (b * T_ + qc) * C + h * HS, sub);
  load_row<T, HS>(tmp, out + (b * T_ + qc) * C + h * HS, sub);
  float Di = 0.f;
#pragma unroll
  for (int k = 0; k < D; ++k) {
    Di += dO[k] * tmp[k];
    q[k] *= qscale;
    dq[k] = 0.f;
  }
  Di += __shfl_xor_sync(0xffffffffu, Di, 1);
  Di += __shfl_xor_sync(0xffffffffu, Di, 2);
  const float Li = lse[bh * T_ + qc];  // +inf on padded rows: their p, and so dq, are 0
  if (qi < T_ && sub == 0) Drow[bh * T_ + qi] = Di;

  const bool causal = attn_causal<GEN>(mask);
  const int64_t kvlen = attn_len<GEN>(mask, b, T_);
  const int64_t kend = causal ? min(kvlen, q0 + kRows) : kvlen;
  // PACK: this row's first visible key, and the block's first key tile (its first row's)
  const int64_t kmin = PACK ? attn_first_key(mask, b, qc, T_) : 0;
  const int64_t kfirst = PACK ? attn_first_key(mask, b, q0, T_) / kTile * kTile : 0;
  for (int64_t k0 = kfirst; k0 < kend; k0 += kTile) {
    stream_kv_tile<T, HS>(Ks, Vs, qkv, b, h, k0, T_, C);
    // visible keys k0 + j, j < jmax: k0+j <= qc if causal, and k0+j < kvlen (PACK: j >= jmin,
    // k0+j >= kmin)
    int jmax;
    if constexpr (GEN) {
      const int64_t lim = causal ? min(kvlen, qc + 1) : kvlen;
      jmax = (int)(lim - k0 < kTile ? (lim - k0 > 0 ? lim - k0 : 0) : kTile);
    } else {
      jmax = (int)(qc - k0 + 1 < kTile ? qc - k0 + 1 : kTile);  // keys k0+j <= qc
    }
    const int jmin = PACK ? (int)max(min(kmin - k0, (int64_t)kTile), (int64_t)0) : 0;
    for (int j = 0; j < kTile; ++j) {
      float s = dot_row<HS>(q, Ks + j * HS, sub);
      float dp = dot_row<HS>(dO, Vs + j * HS, sub);
      float p = j < jmax && (!PACK || j >= jmin) ? exp2f(s - Li) : 0.f;
      float ds = p * (dp - Di);
      axpy_row<HS>(dq, ds, Ks + j * HS, sub);
    }
  }
  if (qi < T_) store_row<T, HS>(dqkv + qkv_index(b, qi, 0, h, T_, C, HS), dq, sub, rsqrtf((float)HS));
}

// dK, dV. grid (ceil(T/kRows), B*NH), thread group per key row; query tiles from the key
// tile's start to T stream through shared memory with their lse and Drow.
template <class T, int HS, bool GEN, bool PACK>
__global__ void __launch_bounds__(kRows* kTpr)
    attention_backward_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                  const float* Drow, int64_t T_, int64_t NH, AttnMask mask) {
  static_assert(!(GEN && PACK), "packed samples take the causal, full-length kernel");
  constexpr int D = HS / kTpr;
  extern __shared__ float sh[];
  float* Qs = sh;
  float* dOs = sh + kTile * HS;
  float* Ls = dOs + kTile * HS;
  float* Ds = Ls + kTile;
  int* Ss = reinterpret_cast<int*>(Ds + kTile);  // PACK: the tile's queries' first keys
  // Key tiles in order: the light ones (late keys) last is fine.
  const auto [C, bh, b, h, j0, kj, kc, sub] = row_thread<HS>(T_, NH, false);
  const float qscale = rsqrtf((float)HS) * kLog2e;

  float k[D], v[D], dk[D], dv[D];
  load_row<T, HS>(k, qkv + qkv_index(b, kc, 1, h, T_, C, HS), sub);
  load_row<T, HS>(v, qkv + qkv_index(b, kc, 2, h, T_, C, HS), sub);
#pragma unroll
  for (int i = 0; i < D; ++i) {
    k[i] *= qscale;
    dk[i] = dv[i] = 0.f;
  }
  const bool causal = attn_causal<GEN>(mask);
  const int64_t qlen = attn_len<GEN>(mask, b, T_);  // the sample's queries (and keys)
  for (int64_t i0 = causal ? (j0 / kTile) * kTile : 0; i0 < qlen; i0 += kTile) {
    // PACK, block-uniform: this tile's queries (and all later ones) are in samples that
    // start after the block's last key
    if constexpr (PACK)
      if (attn_first_key(mask, b, i0, T_) > min(j0 + kRows, T_) - 1) break;
    __syncthreads();
    load_tile<T, HS>(Qs, qkv + qkv_index(b, 0, 0, h, T_, C, HS), i0, T_, 3 * C);
    load_tile<T, HS>(dOs, dout + b * T_ * C + h * HS, i0, T_, C);
    for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
      bool ok = i0 + i < T_;
      Ls[i] = ok ? lse[bh * T_ + i0 + i] : 0.f;
      Ds[i] = ok ? Drow[bh * T_ + i0 + i] : 0.f;
      if (PACK) Ss[i] = ok ? (int)attn_first_key(mask, b, i0 + i, T_) : (int)T_;
    }
    __syncthreads();
    for (int i = 0; i < kTile; ++i) {
      float s = dot_row<HS>(k, Qs + i * HS, sub);
      float dp = dot_row<HS>(v, dOs + i * HS, sub);
      int64_t qi = i0 + i;
      // PACK: and the query's sample starts at or before this key
      const bool vis = (GEN ? (!causal || qi >= kc) && qi < qlen && kc < qlen : qi >= kc && qi < T_) &&
                       (!PACK || Ss[i] <= kc);
      float p = vis ? exp2f(s - Ls[i]) : 0.f;
      float ds = p * (dp - Ds[i]);
      axpy_row<HS>(dv, p, dOs + i * HS, sub);
      axpy_row<HS>(dk, ds, Qs + i * HS, sub);
    }
  }
  if (kj < T_) {
    store_row<T, HS>(dqkv + qkv_index(b, kj, 1, h, T_, C, HS), dk, sub, rsqrtf((float)HS));
    store_row<T, HS>(dqkv + qkv_index(b, kj, 2, h, T_, C, HS), dv, sub, 1.f);
  }
}



// ---- kernel launchers -----------------------------------------------------------------------

template <class F> static void dispatch_hs(int64_t HS, F&& f) {
  if (HS == 64) f(std::integral_constant<int, 64>{});
  else if (HS == 32) f(std::integral_constant<int, 32>{});
  else if (HS == 128) f(std::integral_constant<int, 128>{});
  else FT_CHECK(false, "attention: head size ", HS, " not supported (32, 64, 128)");
}

template <class K> static void set_smem(K kernel, size_t smem) {
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

// GPT-2's causal, unpadded attention takes the GEN = false kernels, packed samples the PACK
// ones; anything else GEN = true. f gets (GEN, PACK) as integral constants.
template <class F> static void dispatch_gen(bool gen, bool pack, F&& f) {
  if (pack) f(std::false_type{}, std::true_type{});
  else if (gen) f(std::true_type{}, std::false_type{});
  else f(std::false_type{}, std::false_type{});
}

void attention_forward(const Ctx& c, DType t, void* out, float* lse, const void* qkv, int64_t B,
                       int64_t T, int64_t NH, int64_t HS, bool causal, const int* seq_lens,
                       const int* positions) {
  FT_CHECK(!positions || (causal && !seq_lens), "attention: positions need causal attention "
           "without seq_lens");
  const AttnMask mask{causal, seq_lens, positions};
  const bool pack = positions != nullptr, gen = !causal || seq_lens != nullptr;
  // Tensor-core path (attention_tc2.cu): bf16 or f16, head size 64.
  if ((t == DType::bf16 || t == DType::f16) && HS == 64 && c.cc_major >= 8) {
    FT_CHECK(aligned16(qkv) && aligned16(out), "attention: pointers must be 16-byte aligned");
    const AttnMask* m = gen || pack ? &mask : nullptr;
    if (t == DType::f16)
      attention_forward_tc2(c, static_cast<f16*>(out), lse, static_cast<const f16*>(qkv), B, T, NH, m);
    else
      attention_forward_tc2(c, static_cast<bf16*>(out), lse, static_cast<const bf16*>(qkv), B, T, NH, m);
    return;
  }
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    dispatch_hs(HS, [&](auto hs) {
      constexpr int H = decltype(hs)::value;
      dispatch_gen(gen, pack, [&](auto g, auto pk) {
        constexpr bool G = decltype(g)::value, P = decltype(pk)::value;
        size_t smem = 2 * kTile * H * sizeof(float);
        auto kernel = attention_forward_kernel<E, H, G, P>;
        set_smem(kernel, smem);
        dim3 grid((unsigned)ceil_div(T, kRows), (unsigned)(B * NH));
        kernel<<<grid, kRows * kTpr, smem, c.stream>>>(static_cast<E*>(out), lse,
                                                        static_cast<const E*>(qkv), T, NH, mask);
        CUDA_CHECK_LAUNCH();
      });
    });
  });
}

size_t attention_backward_scratch(int64_t B, int64_t T, int64_t NH) {
  return (size_t)(B * NH * T) * sizeof(float);
}

void attention_backward(const Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv,
                        const void* out, const float* lse, int64_t B, int64_t T, int64_t NH,
                        int64_t HS, bool causal, const int* seq_lens, const int* positions) {
  FT_CHECK(attention_backward_scratch(B, T, NH) <= c.scratch_bytes, "attention: workspace too small");
  FT_CHECK(!positions || (causal && !seq_lens), "attention: positions need causal attention "
           "without seq_lens");
  float* Drow = static_cast<float*>(c.scratch);
  const AttnMask mask{causal, seq_lens, positions};
  const bool pack = positions != nullptr, gen = !causal || seq_lens != nullptr;
  if ((t == DType::bf16 || t == DType::f16) && HS == 64 && c.cc_major >= 8) {  // tensor cores
    FT_CHECK(aligned16(qkv) && aligned16(dqkv) && aligned16(dout) && aligned16(out),
             "attention: pointers must be 16-byte aligned");
    const AttnMask* m = gen || pack ? &mask : nullptr;
    if (t == DType::f16)
      attention_backward_tc2(c, static_cast<f16*>(dqkv), Drow, static_cast<const f16*>(dout),
                             static_cast<const f16*>(qkv), static_cast<const f16*>(out), lse, B,
                             T, NH, m);
    else
      attention_backward_tc2(c, static_cast<bf16*>(dqkv), Drow, static_cast<const bf16*>(dout),
                             static_cast<const bf16*>(qkv), static_cast<const bf16*>(out), lse, B,
                             T, NH, m);
    return;
  }
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    dispatch_hs(HS, [&](auto hs) {
      constexpr int H = decltype(hs)::value;
      dispatch_gen(gen, pack, [&](auto g, auto pk) {
        constexpr bool G = decltype(g)::value, P = decltype(pk)::value;
        dim3 grid((unsigned)ceil_div(T, kRows), (unsigned)(B * NH));
        size_t smem_dq = 2 * kTile * H * sizeof(float);
        auto kdq = attention_backward_dq_kernel<E, H, G, P>;
        set_smem(kdq, smem_dq);
        kdq<<<grid, kRows * kTpr, smem_dq, c.stream>>>(
            static_cast<E*>(dqkv), Drow, static_cast<const E*>(dout), static_cast<const E*>(qkv),
            static_cast<const E*>(out), lse, T, NH, mask);
        CUDA_CHECK_LAUNCH();
        // PACK: one int a query row more, its first key
        size_t smem_kv = (2 * kTile * H + 2 * kTile) * sizeof(float) + (P ? kTile * sizeof(int) : 0);
        auto kkv = attention_backward_dkv_kernel<E, H, G, P>;
        set_smem(kkv, smem_kv);
        kkv<<<grid, kRows * kTpr, smem_kv, c.stream>>>(
            static_cast<E*>(dqkv), static_cast<const E*>(dout), static_cast<const E*>(qkv), lse,
            Drow, T, NH, mask);
        CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace ft::cuda
