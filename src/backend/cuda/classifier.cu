// Fused softmax + cross-entropy + gradient over bf16/fp32 logits, in place, fp32 math.
// One block per row (token): pass 1 reads the row once with an online max/sum, pass 2
// overwrites it with (softmax - onehot) * dloss (0 for padded columns >= V). Pass 2's reads
// mostly hit L2 (a block's row is 100 KB at GPT-2's vocabulary).
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
  __shared__ float sh_m[kClsThreads / 32], sh_s[kClsThreads / 32];
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
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    online_combine(m, s, m2, s2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sh_m[warp] = m;
    sh_s[warp] = s;
  }
  __syncthreads();
  m = -INFINITY;
  s = 0.f;
  for (int w = 0; w < (int)(blockDim.x / 32); ++w) online_combine(m, s, sh_m[w], sh_s[w]);
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

// ---- kernel launchers -----------------------------------------------------------------------

void classifier_forward_backward(const Ctx& c, DType t, float* losses, void* logits,
                                 const int* targets, int64_t BT, int64_t Vp, int64_t V,
                                 float dloss) {
  FT_CHECK(V <= Vp && V > 0, "classifier: V=", V, " Vp=", Vp);
  FT_CHECK(aligned16(logits), "classifier: logits must be 16-byte aligned");
  dispatch_float(t, [&](auto tag) {
    using E = decltype(tag);
    FT_CHECK(Vp % Pack<E>::N == 0, "classifier: Vp=", Vp, " must be a multiple of ", Pack<E>::N);
    classifier_kernel<E><<<(unsigned)BT, kClsThreads, 0, c.stream>>>(
        losses, static_cast<E*>(logits), targets, Vp, V, dloss);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ft::cuda
