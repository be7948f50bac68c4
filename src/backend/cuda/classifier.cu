// Fused softmax + cross-entropy + gradient over bf16/fp32 logits, in place, fp32 math.
// One block per row (token). Where the row fits in the registers of a 1024-thread block
// (Vp <= 8 packs per thread: GPT-2's 50304 bf16 columns take 7), classifier_regs_kernel reads
// it from memory once, takes max and sum of exp in registers and writes (softmax - onehot) *
// dloss back (0 for padded columns >= V): one read and one write of the logits, the floor.
// Otherwise classifier_kernel reads the row twice (online max/sum, then the gradient).
#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

// ---- CUDA kernels ---------------------------------------------------------------------------

namespace {
constexpr int kClsThreads = 512;
}

__device__ __forceinline__ void online_combine(float& m, float& s, float m2, float s2) {
  float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  s = s * exp2f((m - mn) * 1.4426950408889634f) + s2 * exp2f((m2 - mn) * 1.4426950408889634f);
  m = mn;
}

template <class T>
__global__ void __launch_bounds__(kClsThreads)
    classifier_kernel(float* losses, T* logits, const int* targets, int64_t Vp, int64_t V,
                      float dloss) {
  constexpr int P = Pack<T>::N;
  __shared__ float sh_m[kClsThreads / 32], sh_s[kClsThreads / 32];
  const int64_t row = blockIdx.x;
  T* x = logits + row * Vp;
  const int target = targets[row];
  // pass 1: online max / sum of exp over columns < V
  float m = -INFINITY, s = 0.f;
  for (int64_t c = (int64_t)threadIdx.x * P; c < V; c += (int64_t)blockDim.x * P) {
    Pack<T> v = load16(x + c);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      if (c + k < V) {
        float f = v.f(k);
        if (f > m) {
          s = s * __expf(m - f) + 1.f;
          m = f;
        } else {
          s += __expf(f - m);
        }
      }
    }
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
  // pass 2: gradient in place
  const float scale = target >= 0 ? dloss : 0.f;
  for (int64_t c = (int64_t)threadIdx.x * P; c < Vp; c += (int64_t)blockDim.x * P) {
    Pack<T> v = load16(x + c), g;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      int64_t col = c + k;
      float p = col < V ? __expf(v.f(k) - lse) : 0.f;
      float gk = (p - (col == target ? 1.f : 0.f)) * scale;
      g.set(k, col < V ? gk : 0.f);
    }
    store16(x + c, g);
  }
}

__device__ __forceinline__ float block_reduce_max(float v, float* sh) {
  v = warp_max(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -INFINITY;
  v = warp_max(v);
  __syncthreads();  // sh is reused by the next reduction
  return v;
}
__device__ __forceinline__ float block_reduce_sum(float v, float* sh) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.f;
  v = warp_sum(v);  // every warp sums the same 32 partials in the same order: deterministic
  __syncthreads();
  return v;
}

constexpr int kRegThreads = 1024;

// K packs of 16 bytes per thread hold the whole row: pack k of thread t is columns
// (k * 1024 + t) * P .. + P - 1.
template <class T, int K>
__global__ void __launch_bounds__(kRegThreads)
    classifier_regs_kernel(float* losses, T* logits, const int* targets, int64_t Vp, int64_t V,
                           float dloss) {
  constexpr int P = Pack<T>::N;
  constexpr float kLog2e = 1.4426950408889634f;
  __shared__ float sh[32];
  T* x = logits + (int64_t)blockIdx.x * Vp;
  const int target = targets[blockIdx.x];
  const float xt = target >= 0 ? to_f32(x[target]) : 0.f;  // read before any write below
  Pack<T> v[K];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t c = ((int64_t)k * kRegThreads + threadIdx.x) * P;
    if (c < Vp) {
      v[k] = load16_cs(x + c);  // read exactly once
#pragma unroll
      for (int j = 0; j < P; ++j)
        if (c + j < V) m = fmaxf(m, v[k].f(j));
    }
  }
  m = block_reduce_max(m, sh);
  const float mk = m * kLog2e;
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t c = ((int64_t)k * kRegThreads + threadIdx.x) * P;
    if (c < Vp) {
#pragma unroll
      for (int j = 0; j < P; ++j)
        if (c + j < V) s += exp2f(fmaf(v[k].f(j), kLog2e, -mk));
    }
  }
  s = block_reduce_sum(s, sh);
  const float lse = m + logf(s);
  if (threadIdx.x == 0) losses[blockIdx.x] = target >= 0 ? lse - xt : 0.f;
  if (dloss == 0.f) return;
  const float scale = target >= 0 ? dloss : 0.f, lk = lse * kLog2e;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t c = ((int64_t)k * kRegThreads + threadIdx.x) * P;
    if (c < Vp) {
      Pack<T> g;
#pragma unroll
      for (int j = 0; j < P; ++j) {
        const int64_t col = c + j;
        const float p = exp2f(fmaf(v[k].f(j), kLog2e, -lk));
        g.set(j, col < V ? (p - (col == target ? 1.f : 0.f)) * scale : 0.f);
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
    constexpr int P = Pack<E>::N;
    FT_CHECK(Vp % P == 0, "classifier: Vp=", Vp, " must be a multiple of ", P);
    const int64_t packs = ceil_div(Vp, (int64_t)P * kRegThreads);  // per thread
    auto regs = [&](auto kernel) {
      kernel<<<(unsigned)BT, kRegThreads, 0, c.stream>>>(losses, static_cast<E*>(logits),
                                                        targets, Vp, V, dloss);
      CUDA_CHECK_LAUNCH();
    };
    if (packs <= 1) return regs(classifier_regs_kernel<E, 1>);
    if (packs <= 2) return regs(classifier_regs_kernel<E, 2>);
    if (packs <= 4) return regs(classifier_regs_kernel<E, 4>);
    if (packs <= 8) return regs(classifier_regs_kernel<E, 8>);
    classifier_kernel<E><<<(unsigned)BT, kClsThreads, 0, c.stream>>>(
        losses, static_cast<E*>(logits), targets, Vp, V, dloss);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ft::cuda
