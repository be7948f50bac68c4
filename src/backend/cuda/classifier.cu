// Fused softmax + cross-entropy + gradient over bf16/fp32 logits, in place, fp32 math.
// One block per row (token): pass 1 reads the row once with an online max/sum, pass 2
// overwrites it with (softmax - onehot) * dloss (0 for padded columns >= V).
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
