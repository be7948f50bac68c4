// Fused softmax + cross-entropy + gradient over bf16/fp16/fp32 logits, in place, fp32 math.
//
// Two kernels, one result:
//  - staged (default on sm_90 when two rows fit in shared memory, e.g. GPT-2's 50304 bf16
//    columns = 98 KiB a row): a persistent block per SM copies whole rows into shared memory
//    with the Hopper bulk-copy engine (cp.async.bulk + mbarrier), two rows in flight. Each
//    row leaves DRAM once and its gradient goes back once: one read and one write of the
//    logits, the least any in-place classifier can do.
//  - two-pass (fallback; FT_CLASSIFIER=twopass): one block per row; pass 1 reads the row with
//    an online max/sum, pass 2 reads it again and overwrites it with the gradient. Pass 2 is
//    meant to hit L2, but with ~500 rows of 100 KB in flight it mostly misses (H200 B=16:
//    1.8 ms where one read and one write would take ~0.8).
// Both write (softmax - onehot) * dloss for columns < V and 0 for padded columns >= V.
#include <type_traits>

#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

namespace {
// 512 threads: H200, B=8 GPT-2 logits 0.70 ms; 256 gave 0.71, 1024 1.00 (fewer rows in flight)
constexpr int kClsThreads = 512;
}

__device__ __forceinline__ void online_combine(float& m, float& s, float m2, float s2) {
  float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  s = s * exp2f((m - mn) * 1.4426950408889634f) + s2 * exp2f((m2 - mn) * 1.4426950408889634f);
  m = mn;
}

// Block-wide (max, sum of exp) from each thread's partial, through `sh` (2 * warps floats):
// after the barrier every thread folds the same partials in the same order, so all return
// the same values. Reusing `sh` needs another barrier first.
__device__ __forceinline__ void block_online_reduce(float& m, float& s, float* sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    online_combine(m, s, m2, s2);
  }
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) sh[warp] = m, sh[warps + warp] = s;
  __syncthreads();
  m = -INFINITY;
  s = 0.f;
  for (int w = 0; w < warps; ++w) online_combine(m, s, sh[w], sh[warps + w]);
}

// Each thread takes U packs per trip (U independent 16-byte loads in flight before any
// arithmetic); pack u of a trip starting at column c0 is c0 + u * blockDim * P, so a warp's
// loads stay contiguous. Pass 1 folds a trip's values into the running (max, sum) with one
// rescale per trip: the U*P exponentials are independent of each other.
constexpr int kUnroll = 4;

template <class T>
__global__ void __launch_bounds__(kClsThreads)
    classifier_kernel(float* losses, T* logits, const int* targets, int64_t Vp, int64_t V,
                      float dloss) {
  constexpr int P = Pack<T>::N;
  constexpr float kLog2e = 1.4426950408889634f;
  __shared__ float sh[2 * kClsThreads / 32];
  const int64_t row = blockIdx.x;
  T* x = logits + row * Vp;
  const int target = targets[row];
  const int64_t stride = (int64_t)blockDim.x * P;
  // pass 1: online max / sum of exp over columns < V
  float m = -INFINITY, s = 0.f;
  for (int64_t c0 = (int64_t)threadIdx.x * P; c0 < V; c0 += kUnroll * stride) {
    float f[kUnroll][P];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + u * stride;
      Pack<T> v;
      if (c < V) v = load16(x + c);
#pragma unroll
      for (int k = 0; k < P; ++k) f[u][k] = c + k < V ? v.f(k) : -INFINITY;
    }
    float tm = -INFINITY;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int k = 0; k < P; ++k) tm = fmaxf(tm, f[u][k]);
    const float mn = fmaxf(m, tm);  // finite: c0 < V holds at least one real column
    const float mk = mn * kLog2e;
    float ts = 0.f;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int k = 0; k < P; ++k) ts += exp2f(fmaf(f[u][k], kLog2e, -mk));
    s = s * exp2f((m - mn) * kLog2e) + ts;  // m = -inf on the first trip: s is 0 anyway
    m = mn;
  }
  block_online_reduce(m, s, sh);
  const float lse = m + logf(s);
  if (threadIdx.x == 0)
    losses[row] = target >= 0 ? lse - to_f32(x[target]) : 0.f;
  if (dloss == 0.f) return;
  __syncthreads();  // x[target] read before anyone overwrites it
  // pass 2: gradient in place, U packs loaded before any is written
  const float scale = target >= 0 ? dloss : 0.f, lk = lse * kLog2e;
  for (int64_t c0 = (int64_t)threadIdx.x * P; c0 < Vp; c0 += kUnroll * stride) {
    Pack<T> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (c0 + u * stride < Vp) v[u] = load16(x + c0 + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + u * stride;
      if (c >= Vp) break;
      Pack<T> g;
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const int64_t col = c + k;
        const float p = exp2f(fmaf(v[u].f(k), kLog2e, -lk));
        g.set(k, col < V ? (p - (col == target ? 1.f : 0.f)) * scale : 0.f);
      }
      store16(x + c, g);
    }
  }
}

// ---- staged kernel (sm_90: bulk copies into shared memory) ----------------------------------

namespace {
constexpr int kStagedThreads = 1024;  // one block per SM: its shared memory holds two rows
constexpr int kStagedRows = 2;        // rows in flight per block (copy of k+1 overlaps row k)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
}  // namespace

// Row `row` (bytes, a multiple of 16) from global into shared memory; `bar` completes when
// all bytes have landed. Issued by one thread.
__device__ __forceinline__ void bulk_load_row(void* dst, const void* src, uint32_t bytes,
                                              uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
#endif
}

__device__ __forceinline__ void wait_phase(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

// exp2 on the special-function unit, denormal results flushed to 0 (probabilities below
// 2^-126 are 0 in bf16 gradients anyway); exp2f adds range-fixing instructions around it.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A 16-byte pack to P floats and back, two elements per conversion instruction.
template <class T>
__device__ __forceinline__ void unpack(const Pack<T>& v, float* f) {
  if constexpr (std::is_same_v<T, bf16>) {
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(v.v);
#pragma unroll
    for (int j = 0; j < Pack<T>::N / 2; ++j) {
      const float2 t = __bfloat1622float2(h[j]);
      f[2 * j] = t.x, f[2 * j + 1] = t.y;
    }
  } else if constexpr (std::is_same_v<T, f16>) {
    const auto* h = reinterpret_cast<const __half2*>(v.v);
#pragma unroll
    for (int j = 0; j < Pack<T>::N / 2; ++j) {
      const float2 t = __half22float2(h[j]);
      f[2 * j] = t.x, f[2 * j + 1] = t.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) f[j] = v.v[j];
  }
}
template <class T>
__device__ __forceinline__ Pack<T> pack(const float* f) {
  Pack<T> v;
  if constexpr (std::is_same_v<T, bf16>) {
    auto* h = reinterpret_cast<__nv_bfloat162*>(v.v);
#pragma unroll
    for (int j = 0; j < Pack<T>::N / 2; ++j) h[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
  } else if constexpr (std::is_same_v<T, f16>) {
    auto* h = reinterpret_cast<__half2*>(v.v);
#pragma unroll
    for (int j = 0; j < Pack<T>::N / 2; ++j) h[j] = __floats2half2_rn(f[2 * j], f[2 * j + 1]);
  } else {
#pragma unroll
    for (int j = 0; j < Pack<T>::N; ++j) v.v[j] = f[j];
  }
  return v;
}

// Rows blockIdx.x, +gridDim.x, ...; row k of this block sits in buffer k % 2, which the copy
// of row k+2 refills once every thread is done with row k.
//
// The arithmetic is kept lean because one block per SM must finish a row's math (two
// exponentials per element) while the next row's copy and this row's stores are in flight
// (H200, B=16: the first version, with per-element column tests, ran at 2.2 TB/s): packs
// wholly below V take no masks, the target's -1 is applied afterwards by one thread, and
// exponentials go straight to the special-function unit.
template <class T>
__global__ void __launch_bounds__(kStagedThreads, 1)
    classifier_staged_kernel(float* losses, T* logits, const int* targets, int64_t BT,
                             int64_t Vp, int64_t V, float dloss) {
  constexpr int P = Pack<T>::N;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bar[kStagedRows];
  __shared__ float sh[2 * kStagedThreads / 32];
  const uint32_t row_bytes = static_cast<uint32_t>(Vp * sizeof(T));
  // packs [0, full) hold only real columns; pack `full` may straddle V; the rest are padding
  const int packs = (int)(Vp / P), full = (int)(V / P), vi = (int)V;
  auto buffer = [&](int i) { return reinterpret_cast<T*>(smem_raw + (size_t)i * row_bytes); };
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStagedRows; ++i)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[i])) : "memory");
    // the barriers' initialisation must be visible to the bulk-copy (async) proxy
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    for (int i = 0; i < kStagedRows; ++i) {
      const int64_t r = blockIdx.x + (int64_t)i * gridDim.x;
      if (r < BT) bulk_load_row(buffer(i), logits + r * Vp, row_bytes, &bar[i]);
    }
  }
  __syncthreads();
  int k = 0;
  for (int64_t row = blockIdx.x; row < BT; row += gridDim.x, ++k) {
    const int b = k % kStagedRows;
    const T* xs = buffer(b);
    const int target = targets[row];  // in flight while the copy finishes
    wait_phase(&bar[b], (k / kStagedRows) & 1);
    // max and sum of exp over the real columns (< V), from shared memory, online per pack
    float m = -INFINITY, s = 0.f;
    for (int i = threadIdx.x; i <= full && i < packs; i += kStagedThreads) {
      float f[P];
      unpack(*reinterpret_cast<const Pack<T>*>(xs + i * P), f);
      if (i == full) {  // the straddling pack: its columns >= V take no part
#pragma unroll
        for (int j = 0; j < P; ++j) f[j] = i * P + j < vi ? f[j] : -INFINITY;
      }
      float tm = f[0];
#pragma unroll
      for (int j = 1; j < P; ++j) tm = fmaxf(tm, f[j]);
      if (tm == -INFINITY) continue;  // V a multiple of P: pack `full` is all padding
      const float mn = fmaxf(m, tm), mk = mn * kLog2e;
      float ts = 0.f;
#pragma unroll
      for (int j = 0; j < P; ++j) ts += fast_exp2(fmaf(f[j], kLog2e, -mk));
      s = s * fast_exp2((m - mn) * kLog2e) + ts;  // m = -inf on the first pack: s is 0 anyway
      m = mn;
    }
    block_online_reduce(m, s, sh);
    const float lse = m + logf(s);
    const float x_target = target >= 0 ? to_f32(xs[target]) : 0.f;
    if (threadIdx.x == 0) losses[row] = target >= 0 ? lse - x_target : 0.f;
    T* x = logits + row * Vp;
    if (dloss != 0.f) {
      // gradient softmax * dloss from shared memory straight to the row in global memory
      const float scale = target >= 0 ? dloss : 0.f, lk = lse * kLog2e;
      for (int i = threadIdx.x; i < packs; i += kStagedThreads) {
        float f[P];
        unpack(*reinterpret_cast<const Pack<T>*>(xs + i * P), f);
#pragma unroll
        for (int j = 0; j < P; ++j) f[j] = fast_exp2(fmaf(f[j], kLog2e, -lk)) * scale;
        if (i >= full) {  // padding columns get 0
#pragma unroll
          for (int j = 0; j < P; ++j) f[j] = i * P + j < vi ? f[j] : 0.f;
        }
        store16(x + (int64_t)i * P, pack<T>(f));
      }
    }
    __syncthreads();  // buffer b and sh are free again; this block's row stores are ordered
    if (threadIdx.x == 0) {
      // the target's -1: after the barrier, so it lands after the pack store it amends
      if (dloss != 0.f && target >= 0)
        x[target] = from_f32<T>((fast_exp2(fmaf(x_target, kLog2e, -lse * kLog2e)) - 1.f) * dloss);
      const int64_t next = row + (int64_t)kStagedRows * gridDim.x;
      if (next < BT) {
        // order this block's reads of the buffer before the copy engine's writes into it
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        bulk_load_row(buffer(b), logits + next * Vp, row_bytes, &bar[b]);
      }
    }
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

bool classifier_staged_fits(const Ctx& c, DType t, int64_t Vp) {
  const size_t row = (size_t)Vp * dtype_size(t);
  // static shared memory of the kernel (barriers, the reduction's partials: 384 bytes as
  // compiled for sm_90) with room to spare
  const size_t fixed = 1024;
  return c.cc_major >= 9 && row % 16 == 0 && kStagedRows * row + fixed <= c.max_smem_optin &&
         row < (1u << 20);  // an mbarrier counts at most 2^20 - 1 bytes per phase
}

void classifier_forward_backward(const Ctx& c, DType t, float* losses, void* logits,
                                 const int* targets, int64_t BT, int64_t Vp, int64_t V,
                                 float dloss, bool staged) {
  FT_CHECK(V <= Vp && V > 0, "classifier: V=", V, " Vp=", Vp);
  FT_CHECK(aligned16(logits), "classifier: logits must be 16-byte aligned");
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    FT_CHECK(Vp % Pack<E>::N == 0, "classifier: Vp=", Vp, " must be a multiple of ", Pack<E>::N);
    if (staged && classifier_staged_fits(c, t, Vp)) {
      const size_t smem = kStagedRows * (size_t)Vp * sizeof(E);
      // the opt-in above 48 KiB; set per launch (a host call of ~1 us, once per step) since
      // the attribute belongs to the current device
      CUDA_CHECK(cudaFuncSetAttribute(classifier_staged_kernel<E>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      const unsigned grid = (unsigned)std::min<int64_t>(BT, c.num_sms);
      classifier_staged_kernel<E><<<grid, kStagedThreads, smem, c.stream>>>(
          losses, static_cast<E*>(logits), targets, BT, Vp, V, dloss);
    } else {
      classifier_kernel<E><<<(unsigned)BT, kClsThreads, 0, c.stream>>>(
          losses, static_cast<E*>(logits), targets, Vp, V, dloss);
    }
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ft::cuda
