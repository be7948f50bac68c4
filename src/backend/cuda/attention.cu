// Causal multi-head attention, fused flash-attention style (Dao et al.): forward streams key/
// value tiles through shared memory with an online softmax and keeps only the per-row
// log-sum-exp (fp32, base 2) for backward; no T x T matrix ever exists. Backward recomputes
// the probabilities tile by tile: one kernel computes dQ (and D = rowsum(dO * O)), a second
// one dK and dV. Both are deterministic (no atomics).
//
// Thread layout: each query (or key) row is owned by kTpr=4 consecutive lanes, each holding
// HS/4 of the head's dimensions as float4 chunks interleaved so that the 4 lanes read
// consecutive 16-byte words of a shared-memory row (no bank conflicts); dot products finish
// with two shuffles. Math is fp32 on CUDA cores (a tensor-core version is the next step).
#include <cstdlib>

#include "backend/cuda/attention_tc.cuh"

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

// grid (ceil(T/kRows), B*NH), block kRows*kTpr. Query tiles run heaviest (last) first.
template <class T, int HS>
__global__ void __launch_bounds__(kRows* kTpr)
    attention_forward_kernel(T* out, float* lse, const T* qkv, int64_t T_, int64_t NH) {
  constexpr int D = HS / kTpr;
  constexpr int kChunk = 16;
  extern __shared__ float sh[];
  float* Ks = sh;
  float* Vs = sh + kTile * HS;
  const int64_t C = NH * HS;
  const int64_t bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int64_t q0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * kRows;
  const int r = threadIdx.x / kTpr, sub = threadIdx.x % kTpr;
  const int64_t qi = q0 + r;
  const int64_t qc = qi < T_ ? qi : T_ - 1;  // rows past T compute on a valid row, never store
  const float qscale = rsqrtf((float)HS) * kLog2e;

  float q[D], o[D];
  load_row<T, HS>(q, qkv + qkv_index(b, qc, 0, h, T_, C, HS), sub);
#pragma unroll
  for (int k = 0; k < D; ++k) {
    q[k] *= qscale;
    o[k] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int64_t kend = min(T_, q0 + kRows);
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    load_tile<T, HS>(Ks, qkv + qkv_index(b, 0, 1, h, T_, C, HS), k0, T_, 3 * C);
    load_tile<T, HS>(Vs, qkv + qkv_index(b, 0, 2, h, T_, C, HS), k0, T_, 3 * C);
    __syncthreads();
    for (int j0 = 0; j0 < kTile; j0 += kChunk) {
      float s[kChunk];
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        float d = dot_row<HS>(q, Ks + (j0 + j) * HS, sub);
        s[j] = (k0 + j0 + j <= qc) ? d : -INFINITY;
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
    store_row<T, HS>(out + (b * T_ + qi) * C + h * HS, o, sub, 1.f / l);
    if (sub == 0) lse[bh * T_ + qi] = m + log2f(l);
  }
}

// dQ and Drow = rowsum(dO * O). grid (ceil(T/kRows), B*NH), thread group per query row.
template <class T, int HS>
__global__ void __launch_bounds__(kRows* kTpr)
    attention_backward_dq_kernel(T* dqkv, float* Drow, const T* dout, const T* qkv, const T* out,
                                 const float* lse, int64_t T_, int64_t NH) {
  constexpr int D = HS / kTpr;
  extern __shared__ float sh[];
  float* Ks = sh;
  float* Vs = sh + kTile * HS;
  const int64_t C = NH * HS;
  const int64_t bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int64_t q0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * kRows;
  const int r = threadIdx.x / kTpr, sub = threadIdx.x % kTpr;
  const int64_t qi = q0 + r;
  const int64_t qc = qi < T_ ? qi : T_ - 1;
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
  const float Li = lse[bh * T_ + qc];
  if (qi < T_ && sub == 0) Drow[bh * T_ + qi] = Di;

  const int64_t kend = min(T_, q0 + kRows);
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    load_tile<T, HS>(Ks, qkv + qkv_index(b, 0, 1, h, T_, C, HS), k0, T_, 3 * C);
    load_tile<T, HS>(Vs, qkv + qkv_index(b, 0, 2, h, T_, C, HS), k0, T_, 3 * C);
    __syncthreads();
    const int jmax = (int)(qc - k0 + 1 < kTile ? qc - k0 + 1 : kTile);  // keys k0+j <= qc
    for (int j = 0; j < kTile; ++j) {
      float s = dot_row<HS>(q, Ks + j * HS, sub);
      float dp = dot_row<HS>(dO, Vs + j * HS, sub);
      float p = j < jmax ? exp2f(s - Li) : 0.f;
      float ds = p * (dp - Di);
      axpy_row<HS>(dq, ds, Ks + j * HS, sub);
    }
  }
  if (qi < T_) store_row<T, HS>(dqkv + qkv_index(b, qi, 0, h, T_, C, HS), dq, sub, rsqrtf((float)HS));
}

// dK, dV. grid (ceil(T/kRows), B*NH), thread group per key row; query tiles from the key
// tile's start to T stream through shared memory with their lse and Drow.
template <class T, int HS>
__global__ void __launch_bounds__(kRows* kTpr)
    attention_backward_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                  const float* Drow, int64_t T_, int64_t NH) {
  constexpr int D = HS / kTpr;
  extern __shared__ float sh[];
  float* Qs = sh;
  float* dOs = sh + kTile * HS;
  float* Ls = dOs + kTile * HS;
  float* Ds = Ls + kTile;
  const int64_t C = NH * HS;
  const int64_t bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int64_t j0 = (int64_t)blockIdx.x * kRows;  // light tiles (late keys) last is fine
  const int r = threadIdx.x / kTpr, sub = threadIdx.x % kTpr;
  const int64_t kj = j0 + r;
  const int64_t kc = kj < T_ ? kj : T_ - 1;
  const float qscale = rsqrtf((float)HS) * kLog2e;

  float k[D], v[D], dk[D], dv[D];
  load_row<T, HS>(k, qkv + qkv_index(b, kc, 1, h, T_, C, HS), sub);
  load_row<T, HS>(v, qkv + qkv_index(b, kc, 2, h, T_, C, HS), sub);
#pragma unroll
  for (int i = 0; i < D; ++i) {
    k[i] *= qscale;
    dk[i] = dv[i] = 0.f;
  }
  for (int64_t i0 = (j0 / kTile) * kTile; i0 < T_; i0 += kTile) {
    __syncthreads();
    load_tile<T, HS>(Qs, qkv + qkv_index(b, 0, 0, h, T_, C, HS), i0, T_, 3 * C);
    load_tile<T, HS>(dOs, dout + b * T_ * C + h * HS, i0, T_, C);
    for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
      bool ok = i0 + i < T_;
      Ls[i] = ok ? lse[bh * T_ + i0 + i] : 0.f;
      Ds[i] = ok ? Drow[bh * T_ + i0 + i] : 0.f;
    }
    __syncthreads();
    for (int i = 0; i < kTile; ++i) {
      float s = dot_row<HS>(k, Qs + i * HS, sub);
      float dp = dot_row<HS>(v, dOs + i * HS, sub);
      int64_t qi = i0 + i;
      float p = (qi >= kc && qi < T_) ? exp2f(s - Ls[i]) : 0.f;
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


// ---- tensor-core kernels (bf16, HS = 64) ----------------------------------------------------
// Same algorithm with mma.sync m16n8k16 (bf16 in, fp32 accumulate). A block of 4 warps owns
// 64 rows; each warp 16 of them. Tiles of 64 rows x HS live in shared memory as bf16 with
// rows padded by 16 bytes, so that ldmatrix's 8 row addresses hit distinct banks.
// Accumulator element acc[j][e] of a warp's 16x64 result is row g + 8*(e/2), column
// 8j + 2*t + (e%2), with g = lane/4, t = lane%4.
namespace tc {

constexpr int kThreads = 128;

template <int HS> constexpr int kStride = HS + 8;  // bf16 per shared row

// 64 rows x HS of a [.., row_stride] bf16 matrix into shared memory; rows past T are zeros.
template <int HS>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, int64_t r0, int64_t T_,
                                          int64_t row_stride) {
  constexpr int chunks = HS / 8;
  for (int i = threadIdx.x; i < kTile * chunks; i += blockDim.x) {
    int r = i / chunks, c = (i % chunks) * 8;
    int4 v = make_int4(0, 0, 0, 0);
    if (r0 + r < T_) v = *reinterpret_cast<const int4*>(src + (r0 + r) * row_stride + c);
    *reinterpret_cast<int4*>(dst + r * kStride<HS> + c) = v;
  }
}


// Register staging of a 64 x HS tile: the next tile's global loads are issued before the
// current tile's math, so their latency hides behind it (software pipelining through
// registers; blockDim must be kThreads).
template <int HS> struct TileRegs {
  static constexpr int kN = kTile * HS / 8 / kThreads;
  int4 v[kN];
};
template <int HS>
__device__ __forceinline__ void tile_fetch(TileRegs<HS>& t, const bf16* src, int64_t r0,
                                           int64_t T_, int64_t row_stride) {
  constexpr int chunks = HS / 8;
#pragma unroll
  for (int k = 0; k < TileRegs<HS>::kN; ++k) {
    int i = threadIdx.x + k * kThreads, r = i / chunks, c = (i % chunks) * 8;
    t.v[k] = r0 + r < T_ ? *reinterpret_cast<const int4*>(src + (r0 + r) * row_stride + c)
                         : make_int4(0, 0, 0, 0);
  }
}
template <int HS>
__device__ __forceinline__ void tile_store(bf16* dst, const TileRegs<HS>& t) {
  constexpr int chunks = HS / 8;
#pragma unroll
  for (int k = 0; k < TileRegs<HS>::kN; ++k) {
    int i = threadIdx.x + k * kThreads, r = i / chunks, c = (i % chunks) * 8;
    *reinterpret_cast<int4*>(dst + r * kStride<HS> + c) = t.v[k];
  }
}

// A fragments (16 rows x HS, all k-steps) of the warp's rows starting at `rows`.
template <int HS>
__device__ __forceinline__ void load_a(uint32_t (&a)[HS / 16][4], const bf16* rows, int lane) {
#pragma unroll
  for (int ks = 0; ks < HS / 16; ++ks)
    ldsm_x4(a[ks], rows + (lane % 8 + 8 * ((lane / 8) % 2)) * kStride<HS> + ks * 16 + 8 * (lane / 16));
}

// acc[16 x 64] += A[16 x HS] @ B^T, B = 64 shared rows x HS (row n of B is column n of acc).
template <int HS>
__device__ __forceinline__ void mma_abt(float (&acc)[8][4], const uint32_t (&a)[HS / 16][4],
                                        const bf16* B, int lane) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int kp = 0; kp < HS / 32; ++kp) {
      uint32_t b[4];
      ldsm_x4(b, B + (8 * j + lane % 8) * kStride<HS> + kp * 32 + 8 * (lane / 8));
      mma(acc[j], a[2 * kp], b[0], b[1]);
      mma(acc[j], a[2 * kp + 1], b[2], b[3]);
    }
}

// acc[16 x HS] += A[16 x 64] @ B, B = 64 shared rows (k) x HS (n); A from registers.
template <int HS>
__device__ __forceinline__ void mma_ab(float (&acc)[HS / 8][4], const uint32_t (&a)[4][4],
                                       const bf16* B, int lane) {
#pragma unroll
  for (int t = 0; t < 4; ++t)
#pragma unroll
    for (int np = 0; np < HS / 16; ++np) {
      uint32_t b[4];
      ldsm_x4_t(b, B + (16 * t + lane % 8 + 8 * ((lane / 8) % 2)) * kStride<HS> + 16 * np + 8 * (lane / 16));
      mma(acc[2 * np], a[t], b[0], b[1]);
      mma(acc[2 * np + 1], a[t], b[2], b[3]);
    }
}

// A fragments (16 x 64, bf16) from a 16 x 64 fp32 accumulator.
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4][4], const float (&s)[8][4]) {
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    a[t][0] = pack2(s[2 * t][0], s[2 * t][1]);
    a[t][1] = pack2(s[2 * t][2], s[2 * t][3]);
    a[t][2] = pack2(s[2 * t + 1][0], s[2 * t + 1][1]);
    a[t][3] = pack2(s[2 * t + 1][2], s[2 * t + 1][3]);
  }
}

template <int HS>
__device__ __forceinline__ void store_acc(bf16* dst, int64_t row_stride, int64_t r0, int64_t T_,
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
          pack2(acc[j][2 * h] * sc, acc[j][2 * h + 1] * sc);
  }
}

template <int HS, bool kPrefetch>
__global__ void __launch_bounds__(kThreads)
    attention_forward_tc_kernel(bf16* out, float* lse, const bf16* qkv, int64_t T_, int64_t NH) {
  __shared__ alignas(16) bf16 Qs[kTile * kStride<HS>], Ks[kTile * kStride<HS>],
      Vs[kTile * kStride<HS>];
  const int64_t C = NH * HS;
  const int64_t bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int64_t q0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t row0 = q0 + warp * 16 + g;  // this thread's rows: row0, row0 + 8
  const float qscale = rsqrtf((float)HS) * kLog2e;
  const bf16* base = qkv + b * T_ * 3 * C + h * HS;

  load_tile<HS>(Qs, base, q0, T_, 3 * C);
  __syncthreads();
  uint32_t qa[HS / 16][4];
  load_a<HS>(qa, Qs + warp * 16 * kStride<HS>, lane);
  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int64_t kend = min(T_, q0 + kRows);
  TileRegs<HS> kr, vr;
  if constexpr (kPrefetch) {
    tile_fetch<HS>(kr, base + C, 0, T_, 3 * C);
    tile_fetch<HS>(vr, base + 2 * C, 0, T_, 3 * C);
  }
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    if constexpr (kPrefetch) {
      tile_store<HS>(Ks, kr);
      tile_store<HS>(Vs, vr);
    } else {
      load_tile<HS>(Ks, base + C, k0, T_, 3 * C);
      load_tile<HS>(Vs, base + 2 * C, k0, T_, 3 * C);
    }
    __syncthreads();
    if (kPrefetch && k0 + kTile < kend) {
      tile_fetch<HS>(kr, base + C, k0 + kTile, T_, 3 * C);
      tile_fetch<HS>(vr, base + 2 * C, k0 + kTile, T_, 3 * C);
    }
    float s[8][4] = {};
    mma_abt<HS>(s, qa, Ks, lane);
    const bool diag = k0 + kTile > q0 + warp * 16;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[j][e] * qscale;
        if (diag && k0 + 8 * j + 2 * t + (e % 2) > row0 + 8 * (e / 2)) v = -INFINITY;
        s[j][e] = v;
        mx[e / 2] = fmaxf(mx[e / 2], v);
      }
    float corr[2], mn[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      mn[r] = fmaxf(m[r], mx[r]);
      corr[r] = exp2f(m[r] - mn[r]);
      l[r] *= corr[r];
      m[r] = mn[r];
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = exp2f(s[j][e] - mn[e / 2]);
        s[j][e] = p;
        l[e / 2] += p;
      }
#pragma unroll
    for (int j = 0; j < HS / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[j][e] *= corr[e / 2];
    uint32_t pa[4][4];
    acc_to_a(pa, s);
    mma_ab<HS>(o, pa, Vs, lane);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  store_acc<HS>(out + b * T_ * C + h * HS, C, q0 + warp * 16, T_, o, 1.f / l[0], 1.f / l[1], lane);
  if (t == 0) {
    if (row0 < T_) lse[bh * T_ + row0] = m[0] + log2f(l[0]);
    if (row0 + 8 < T_) lse[bh * T_ + row0 + 8] = m[1] + log2f(l[1]);
  }
}

// dQ, and Drow = rowsum(dO * O) for the dK/dV kernel.
template <int HS, bool kPrefetch>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_tc_kernel(bf16* dqkv, float* Drow, const bf16* dout, const bf16* qkv,
                                    const bf16* out, const float* lse, int64_t T_, int64_t NH) {
  __shared__ alignas(16) bf16 Qs[kTile * kStride<HS>], dOs[kTile * kStride<HS>],
      Ks[kTile * kStride<HS>], Vs[kTile * kStride<HS>];
  __shared__ float Ls[kRows], Ds[kRows];
  const int64_t C = NH * HS;
  const int64_t bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int64_t q0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t row0 = q0 + warp * 16 + g;
  const float qscale = rsqrtf((float)HS) * kLog2e;
  const bf16* base = qkv + b * T_ * 3 * C + h * HS;
  const bf16* dobase = dout + b * T_ * C + h * HS;

  load_tile<HS>(Qs, base, q0, T_, 3 * C);
  load_tile<HS>(dOs, dobase, q0, T_, C);
  if (threadIdx.x < kRows) {  // D and lse of the tile's rows
    int64_t r = q0 + threadIdx.x;
    float d = 0.f, L = 0.f;
    if (r < T_) {
      const bf16* o = out + (b * T_ + r) * C + h * HS;
      const bf16* dO = dobase + r * C;
      for (int k = 0; k < HS; k += 8) {
        Pack<bf16> x = load16(o + k), y = load16(dO + k);
#pragma unroll
        for (int i = 0; i < 8; ++i) d += x.f(i) * y.f(i);
      }
      L = lse[bh * T_ + r];
      Drow[bh * T_ + r] = d;
    }
    Ds[threadIdx.x] = d;
    Ls[threadIdx.x] = L;
  }
  __syncthreads();
  uint32_t qa[HS / 16][4], da[HS / 16][4];
  load_a<HS>(qa, Qs + warp * 16 * kStride<HS>, lane);
  load_a<HS>(da, dOs + warp * 16 * kStride<HS>, lane);
  const float Lr[2] = {Ls[warp * 16 + g], Ls[warp * 16 + g + 8]};
  const float Dr[2] = {Ds[warp * 16 + g], Ds[warp * 16 + g + 8]};
  float dq[HS / 8][4] = {};
  const int64_t kend = min(T_, q0 + kRows);
  TileRegs<HS> kr, vr;
  if constexpr (kPrefetch) {
    tile_fetch<HS>(kr, base + C, 0, T_, 3 * C);
    tile_fetch<HS>(vr, base + 2 * C, 0, T_, 3 * C);
  }
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    if constexpr (kPrefetch) {
      tile_store<HS>(Ks, kr);
      tile_store<HS>(Vs, vr);
    } else {
      load_tile<HS>(Ks, base + C, k0, T_, 3 * C);
      load_tile<HS>(Vs, base + 2 * C, k0, T_, 3 * C);
    }
    __syncthreads();
    if (kPrefetch && k0 + kTile < kend) {
      tile_fetch<HS>(kr, base + C, k0 + kTile, T_, 3 * C);
      tile_fetch<HS>(vr, base + 2 * C, k0 + kTile, T_, 3 * C);
    }
    float s[8][4] = {}, dp[8][4] = {};
    mma_abt<HS>(s, qa, Ks, lane);
    mma_abt<HS>(dp, da, Vs, lane);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        bool ok = k0 + 8 * j + 2 * t + (e % 2) <= row0 + 8 * r;
        float p = ok ? exp2f(s[j][e] * qscale - Lr[r]) : 0.f;
        s[j][e] = p * (dp[j][e] - Dr[r]);
      }
    uint32_t sa[4][4];
    acc_to_a(sa, s);
    mma_ab<HS>(dq, sa, Ks, lane);
  }
  const float sc = rsqrtf((float)HS);
  store_acc<HS>(dqkv + b * T_ * 3 * C + h * HS, 3 * C, q0 + warp * 16, T_, dq, sc, sc, lane);
}

// dK, dV: a warp owns 16 keys; query tiles from the key tile on stream through shared memory.
template <int HS, bool kPrefetch>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkv_tc_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv,
                                     const float* lse, const float* Drow, int64_t T_, int64_t NH) {
  __shared__ alignas(16) bf16 Qs[kTile * kStride<HS>], dOs[kTile * kStride<HS>],
      Ks[kTile * kStride<HS>], Vs[kTile * kStride<HS>];
  __shared__ float Ls[kTile], Ds[kTile];
  const int64_t C = NH * HS;
  const int64_t bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int64_t j0 = (int64_t)blockIdx.x * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t key0 = j0 + warp * 16 + g;  // this thread's keys: key0, key0 + 8
  const float qscale = rsqrtf((float)HS) * kLog2e;
  const bf16* base = qkv + b * T_ * 3 * C + h * HS;
  const bf16* dobase = dout + b * T_ * C + h * HS;

  load_tile<HS>(Ks, base + C, j0, T_, 3 * C);
  load_tile<HS>(Vs, base + 2 * C, j0, T_, 3 * C);
  __syncthreads();
  uint32_t ka[HS / 16][4], va[HS / 16][4];
  load_a<HS>(ka, Ks + warp * 16 * kStride<HS>, lane);
  load_a<HS>(va, Vs + warp * 16 * kStride<HS>, lane);
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  TileRegs<HS> qr, dr;
  float lr = 0.f, drow = 0.f;  // lse / D of query row threadIdx.x (threads < kTile)
  auto fetch_stats = [&](int64_t i0) {
    if (threadIdx.x < kTile && i0 + threadIdx.x < T_) {
      lr = lse[bh * T_ + i0 + threadIdx.x];
      drow = Drow[bh * T_ + i0 + threadIdx.x];
    } else {
      lr = drow = 0.f;
    }
  };
  auto fetch = [&](int64_t i0) {
    tile_fetch<HS>(qr, base, i0, T_, 3 * C);
    tile_fetch<HS>(dr, dobase, i0, T_, C);
    fetch_stats(i0);
  };
  if constexpr (kPrefetch) fetch(j0);
  for (int64_t i0 = j0; i0 < T_; i0 += kTile) {
    __syncthreads();
    if constexpr (kPrefetch) {
      tile_store<HS>(Qs, qr);
      tile_store<HS>(dOs, dr);
    } else {
      load_tile<HS>(Qs, base, i0, T_, 3 * C);
      load_tile<HS>(dOs, dobase, i0, T_, C);
      fetch_stats(i0);
    }
    if (threadIdx.x < kTile) {
      Ls[threadIdx.x] = lr;
      Ds[threadIdx.x] = drow;
    }
    __syncthreads();
    if (kPrefetch && i0 + kTile < T_) fetch(i0 + kTile);
    float s[8][4] = {}, dp[8][4] = {};
    mma_abt<HS>(s, ka, Qs, lane);   // S^T: rows = keys, columns = queries
    mma_abt<HS>(dp, va, dOs, lane); // dP^T
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * j + 2 * t + (e % 2);
        const int64_t q = i0 + col;
        bool ok = q >= key0 + 8 * (e / 2) && q < T_;
        float p = ok ? exp2f(s[j][e] * qscale - Ls[col]) : 0.f;
        s[j][e] = p;
        dp[j][e] = p * (dp[j][e] - Ds[col]);
      }
    uint32_t pa[4][4], sa[4][4];
    acc_to_a(pa, s);
    acc_to_a(sa, dp);
    mma_ab<HS>(dv, pa, dOs, lane);
    mma_ab<HS>(dk, sa, Qs, lane);
  }
  bf16* dbase = dqkv + b * T_ * 3 * C + h * HS;
  const float sc = rsqrtf((float)HS);
  store_acc<HS>(dbase + C, 3 * C, j0 + warp * 16, T_, dk, sc, sc, lane);
  store_acc<HS>(dbase + 2 * C, 3 * C, j0 + warp * 16, T_, dv, 1.f, 1.f, lane);
}

}  // namespace tc

// ---- kernel launchers -----------------------------------------------------------------------

template <class F> static void dispatch_hs(int64_t HS, F&& f) {
  if (HS == 64) f(std::integral_constant<int, 64>{});
  else if (HS == 32) f(std::integral_constant<int, 32>{});
  else if (HS == 128) f(std::integral_constant<int, 128>{});
  else FT_CHECK(false, "attention: head size ", HS, " not supported (32, 64, 128)");
}

// Tensor-core kernels come in two variants: the next tile prefetched through registers (the
// default: H200, GPT-2 124M B=8 T=1024: forward 0.105 ms, backward 0.328 ms) or tiles loaded
// synchronously (fewer registers, more blocks per SM, but 0.247 / 0.610 ms); env
// FT_ATTN_PREFETCH=0 selects the second (Ctx::attn_prefetch).
template <class F> static void with_prefetch(const Ctx& c, F&& f) {
  if (c.attn_prefetch) f(std::true_type{});
  else f(std::false_type{});
}

template <class K> static void set_smem(K kernel, size_t smem) {
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

// FT_ATTN_V1=1 selects the first-generation tensor-core kernels (this file) instead of
// attention_tc2.cu's (for comparisons).
static bool use_v1() {
  static const bool v = [] {
    const char* e = std::getenv("FT_ATTN_V1");
    return e && e[0] == '1';
  }();
  return v;
}

void attention_forward(const Ctx& c, DType t, void* out, float* lse, const void* qkv, int64_t B,
                       int64_t T, int64_t NH, int64_t HS) {
  // Tensor-core path: bf16 or f16, head size 64. f16 has only the second-generation kernels
  // (FT_ATTN_V1 applies to bf16).
  if ((t == DType::bf16 || t == DType::f16) && HS == 64 && c.cc_major >= 8) {
    FT_CHECK(aligned16(qkv) && aligned16(out), "attention: pointers must be 16-byte aligned");
    if (t == DType::f16) {
      attention_forward_tc2(c, static_cast<f16*>(out), lse, static_cast<const f16*>(qkv), B, T, NH);
      return;
    }
    if (!use_v1()) {
      attention_forward_tc2(c, static_cast<bf16*>(out), lse, static_cast<const bf16*>(qkv), B, T, NH);
      return;
    }
    dim3 grid((unsigned)ceil_div(T, kRows), (unsigned)(B * NH));
    with_prefetch(c, [&](auto pf) {
      constexpr bool P = decltype(pf)::value;
      tc::attention_forward_tc_kernel<64, P><<<grid, tc::kThreads, 0, c.stream>>>(
          static_cast<bf16*>(out), lse, static_cast<const bf16*>(qkv), T, NH);
    });
    CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    dispatch_hs(HS, [&](auto hs) {
      constexpr int H = decltype(hs)::value;
      size_t smem = 2 * kTile * H * sizeof(float);
      auto kernel = attention_forward_kernel<E, H>;
      set_smem(kernel, smem);
      dim3 grid((unsigned)ceil_div(T, kRows), (unsigned)(B * NH));
      kernel<<<grid, kRows * kTpr, smem, c.stream>>>(static_cast<E*>(out), lse,
                                                      static_cast<const E*>(qkv), T, NH);
      CUDA_CHECK_LAUNCH();
    });
  });
}

size_t attention_backward_scratch(int64_t B, int64_t T, int64_t NH) {
  return (size_t)(B * NH * T) * sizeof(float);
}

void attention_backward(const Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv,
                        const void* out, const float* lse, int64_t B, int64_t T, int64_t NH,
                        int64_t HS) {
  FT_CHECK(attention_backward_scratch(B, T, NH) <= c.scratch_bytes, "attention: workspace too small");
  float* Drow = static_cast<float*>(c.scratch);
  if ((t == DType::bf16 || t == DType::f16) && HS == 64 && c.cc_major >= 8) {  // tensor cores
    FT_CHECK(aligned16(qkv) && aligned16(dqkv) && aligned16(dout) && aligned16(out),
             "attention: pointers must be 16-byte aligned");
    if (t == DType::f16) {
      attention_backward_tc2(c, static_cast<f16*>(dqkv), Drow, static_cast<const f16*>(dout),
                             static_cast<const f16*>(qkv), static_cast<const f16*>(out), lse, B,
                             T, NH);
      return;
    }
    if (!use_v1()) {
      attention_backward_tc2(c, static_cast<bf16*>(dqkv), Drow, static_cast<const bf16*>(dout),
                             static_cast<const bf16*>(qkv), static_cast<const bf16*>(out), lse, B,
                             T, NH);
      return;
    }
    dim3 grid((unsigned)ceil_div(T, kRows), (unsigned)(B * NH));
    with_prefetch(c, [&](auto pf) {
      constexpr bool P = decltype(pf)::value;
      tc::attention_backward_dq_tc_kernel<64, P><<<grid, tc::kThreads, 0, c.stream>>>(
          static_cast<bf16*>(dqkv), Drow, static_cast<const bf16*>(dout),
          static_cast<const bf16*>(qkv), static_cast<const bf16*>(out), lse, T, NH);
      CUDA_CHECK_LAUNCH();
      tc::attention_backward_dkv_tc_kernel<64, P><<<grid, tc::kThreads, 0, c.stream>>>(
          static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout),
          static_cast<const bf16*>(qkv), lse, Drow, T, NH);
    });
    CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    dispatch_hs(HS, [&](auto hs) {
      constexpr int H = decltype(hs)::value;
      dim3 grid((unsigned)ceil_div(T, kRows), (unsigned)(B * NH));
      size_t smem_dq = 2 * kTile * H * sizeof(float);
      auto kdq = attention_backward_dq_kernel<E, H>;
      set_smem(kdq, smem_dq);
      kdq<<<grid, kRows * kTpr, smem_dq, c.stream>>>(
          static_cast<E*>(dqkv), Drow, static_cast<const E*>(dout), static_cast<const E*>(qkv),
          static_cast<const E*>(out), lse, T, NH);
      CUDA_CHECK_LAUNCH();
      size_t smem_kv = (2 * kTile * H + 2 * kTile) * sizeof(float);
      auto kkv = attention_backward_dkv_kernel<E, H>;
      set_smem(kkv, smem_kv);
      kkv<<<grid, kRows * kTpr, smem_kv, c.stream>>>(static_cast<E*>(dqkv),
                                                      static_cast<const E*>(dout),
                                                      static_cast<const E*>(qkv), lse, Drow, T, NH);
      CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace ft::cuda
