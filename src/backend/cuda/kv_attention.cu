// Generation with a KV cache: storing keys and values into the cache, decode attention (one
// query per row over its cached keys) and the greedy argmax of logits rows.
//
// Decode attention reads every cached key and value of every row once per step and layer:
// it is bound by memory, not arithmetic. One block per (row, head); its warps take tiles of
// 32 keys in turn, a lane per key for the scores (each lane reads its key's HS elements in
// 16-byte loads, so a warp reads whole 32-byte sectors) and a lane per output dimension for
// the values (a warp reads one value row per key, coalesced). Each warp keeps an online
// softmax (running max, sum and output in fp32, log2 domain); the warps are merged through
// shared memory at the end. No split over blocks: GPT-2 124M's G=32 rows x 12 heads already
// give 384 blocks of 8 warps, and a split would need planned scratch for its partial sums.
#include <cfloat>

#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

namespace {

constexpr int kDecodeWarps = 8;

// One thread per 16-byte pack of one (row, position) of k and v.
template <class T>
__global__ void kv_store_kernel(T* kc, T* vc, const T* qkv, const int* start, int64_t b,
                                int64_t t, int64_t C, int64_t Tmax) {
  constexpr int N = Pack<T>::N;
  const int64_t packs = C / N;
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= b * t * packs) return;
  const int64_t bt = idx / packs, c = (idx % packs) * N;
  const int64_t i = bt / t, s = bt % t;
  const int64_t p = (start ? start[i] : 0) + s;
  if (p < 0 || p >= Tmax) return;  // a bad position must not write outside the cache
  const T* src = qkv + bt * 3 * C + c;
  store16(kc + (i * Tmax + p) * C + c, load16(src + C));
  store16(vc + (i * Tmax + p) * C + c, load16(src + 2 * C));
}

template <class T, int HS>
__global__ void __launch_bounds__(kDecodeWarps * 32)
attention_decode_kernel(T* out, const T* qkv, const T* kc, const T* vc, const int* lens, int NH,
                        int64_t C, int64_t Tmax, float scale_log2) {
  constexpr int DPL = HS / 32;  // output dimensions per lane
  constexpr int N = Pack<T>::N;
  __shared__ float q_s[HS];
  __shared__ float m_s[kDecodeWarps], l_s[kDecodeWarps];
  __shared__ float acc_s[kDecodeWarps][HS];
  const int g = blockIdx.x / NH, h = blockIdx.x % NH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // lengths are device data: clamp so a bad one cannot read outside the row
  const int len = max(1, min(lens[g], (int)Tmax));
  for (int i = threadIdx.x; i < HS; i += blockDim.x)
    q_s[i] = to_f32(qkv[(int64_t)g * 3 * C + h * HS + i]) * scale_log2;
  __syncthreads();
  const T* kb = kc + (int64_t)g * Tmax * C + h * HS;
  const T* vb = vc + (int64_t)g * Tmax * C + h * HS;
  float m = -INFINITY, l = 0.f, acc[DPL];
#pragma unroll
  for (int i = 0; i < DPL; ++i) acc[i] = 0.f;
  for (int j0 = warp * 32; j0 < len; j0 += kDecodeWarps * 32) {
    const int j = j0 + lane;
    float s = -INFINITY;
    if (j < len) {
      const T* k = kb + (int64_t)j * C;
      float dot = 0.f;
#pragma unroll
      for (int d = 0; d < HS; d += N) {
        const Pack<T> p = load16(k + d);
#pragma unroll
        for (int i = 0; i < N; ++i) dot += q_s[d + i] * p.f(i);
      }
      s = dot;
    }
    // lane 0's key j0 < len is real, so the tile's max is finite
    const float m_new = fmaxf(m, warp_max(s));
    const float corr = exp2f(m - m_new);  // 0 on the first tile (m = -inf)
    const float p = j < len ? exp2f(s - m_new) : 0.f;
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[i] *= corr;
    const int n = min(32, len - j0);  // the same in every lane: the shuffles stay converged
    for (int jj = 0; jj < n; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      const T* v = vb + (int64_t)(j0 + jj) * C + lane * DPL;
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[i] += pj * to_f32(v[i]);
    }
    m = m_new;
  }
  // merge the warps' partial softmaxes (a warp that saw no key has m = -inf, l = 0)
  if (lane == 0) m_s[warp] = m, l_s[warp] = l;
#pragma unroll
  for (int i = 0; i < DPL; ++i) acc_s[warp][lane * DPL + i] = acc[i];
  __syncthreads();
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) M = fmaxf(M, m_s[w]);
  float L = 0.f;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) L += l_s[w] * exp2f(m_s[w] - M);
  for (int d = threadIdx.x; d < HS; d += blockDim.x) {
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) o += acc_s[w][d] * exp2f(m_s[w] - M);
    out[(int64_t)g * C + h * HS + d] = from_f32<T>(o / L);
  }
}

// Keeps (value, index) with the larger value, the smaller index among equals; NaN never wins.
__device__ __forceinline__ void better(float& bv, int& bi, float v, int i) {
  if (v > bv || (v == bv && i < bi)) bv = v, bi = i;
}

template <class T>
__global__ void argmax_rows_kernel(int* out, const T* logits, int64_t V, int64_t Vp) {
  __shared__ float vs[32];
  __shared__ int is[32];
  const T* row = logits + (int64_t)blockIdx.x * Vp;
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) better(bv, bi, to_f32(row[v]), (int)v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    better(bv, bi, __shfl_xor_sync(0xffffffffu, bv, o), __shfl_xor_sync(0xffffffffu, bi, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  if (lane == 0) vs[warp] = bv, is[warp] = bi;
  __syncthreads();
  if (warp == 0) {
    bv = lane < nw ? vs[lane] : -INFINITY;
    bi = lane < nw ? is[lane] : INT_MAX;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      better(bv, bi, __shfl_xor_sync(0xffffffffu, bv, o), __shfl_xor_sync(0xffffffffu, bi, o));
    if (lane == 0) out[blockIdx.x] = bi == INT_MAX ? 0 : bi;  // a row of NaN gives 0, as on the CPU
  }
}

}  // namespace

void kv_cache_store(const Ctx& c, DType t, void* kcache, void* vcache, const void* qkv,
                    const int* start, int64_t b, int64_t T, int64_t C, int64_t Tmax) {
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    FT_CHECK(C % Pack<E>::N == 0 && aligned16(kcache) && aligned16(vcache) && aligned16(qkv),
             "kv_cache_store: C=", C, " must be a multiple of ", Pack<E>::N, " and buffers 16-byte aligned");
    const int64_t n = b * T * (C / Pack<E>::N);
    if (n == 0) return;
    const int threads = 256;
    kv_store_kernel<E><<<ceil_div(n, threads), threads, 0, c.stream>>>(
        static_cast<E*>(kcache), static_cast<E*>(vcache), static_cast<const E*>(qkv), start, b, T, C, Tmax);
    CUDA_CHECK_LAUNCH();
  });
}

void attention_decode(const Ctx& c, DType t, void* out, const void* qkv, const void* kcache,
                      const void* vcache, const int* lens, int64_t G, int64_t C, int64_t Tmax,
                      int n_head) {
  const int64_t HS = C / n_head;
  FT_CHECK(HS == 32 || HS == 64 || HS == 128, "attention_decode: head size ", HS, " (supported: 32, 64, 128)");
  FT_CHECK(aligned16(kcache) && aligned16(vcache) && (C * dtype_size(t)) % 16 == 0,
           "attention_decode: caches must be 16-byte aligned rows");
  // scores in the log2 domain: exp(x) = exp2(x * log2(e)), folded into q's scale
  const float scale_log2 = 1.4426950408889634f / sqrtf(static_cast<float>(HS));
  const dim3 grid(static_cast<unsigned>(G * n_head));
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    auto launch = [&](auto kernel) {
      kernel<<<grid, kDecodeWarps * 32, 0, c.stream>>>(static_cast<E*>(out), static_cast<const E*>(qkv),
                                                       static_cast<const E*>(kcache), static_cast<const E*>(vcache),
                                                       lens, n_head, C, Tmax, scale_log2);
    };
    if (HS == 32) launch(attention_decode_kernel<E, 32>);
    else if (HS == 64) launch(attention_decode_kernel<E, 64>);
    else launch(attention_decode_kernel<E, 128>);
    CUDA_CHECK_LAUNCH();
  });
}

void argmax_rows(const Ctx& c, DType t, int* out, const void* logits, int64_t G, int64_t V,
                 int64_t Vp) {
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    argmax_rows_kernel<E><<<static_cast<unsigned>(G), 1024, 0, c.stream>>>(out, static_cast<const E*>(logits), V, Vp);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ft::cuda
