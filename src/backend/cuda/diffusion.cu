// Diffusion ops (see backend.h's diffusion section): the noising / sampling mix with
// counter-based noise (backend/diffusion_rng.h, the CPU backend's generator compiled for the
// device), the per-sample MSE loss and its gradient, DiT's sinusoidal timestep embedding.
// Operands may each be f32 or the activation dtype (any_dtype.cuh); math is fp32, the noise
// transform and the embedding's cos/sin double then rounded once (so they match the CPU).
#include "backend/cuda/any_dtype.cuh"
#include "backend/cuda/cuda_ops.cuh"
#include "backend/diffusion_rng.h"

namespace ft::cuda {

namespace {
constexpr int kMseThreads = 256;  // one block a sample; 8 warps summed in warp order
}

// ---- CUDA kernels ---------------------------------------------------------------------------

// Thread item g = (sample b, noise block j) over B * ceil(n/4) items: one Philox block gives
// elements 4j .. 4j+3 of b; each is read (x, y) before it is written (out), so out may alias
// x or y. Same arithmetic and order as diffusion_mix_cpu.
__global__ void diffusion_mix_kernel(AnyPtr out, AnyPtr noise_out, AnyCPtr x, AnyCPtr y, const float* coef,
                                     const int* keys, uint64_t seed, int64_t B, int64_t n) {
  const int64_t groups = (n + 3) / 4, items = B * groups;
  for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < items; g += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = g / groups, j = g % groups;
    float z[4];
    diffusion_normal4(seed, static_cast<uint32_t>(keys[b]), static_cast<uint64_t>(j), z);
    const float c0 = coef[b * 3], c1 = coef[b * 3 + 1], c2 = coef[b * 3 + 2];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (4 * j + k >= n) break;
      const int64_t e = b * n + 4 * j + k;
      float v = c0 * load_any(x, e);
      if (y.p) v += c1 * load_any(y, e);
      store_any(out, e, v + c2 * z[k]);
      if (noise_out.p) store_any(noise_out, e, z[k]);
    }
  }
}

// Block b sums sample b: thread k takes elements k, k + 256, ... in order, then the warps'
// butterfly sums and the 8 warp sums in warp order: a fixed order, no atomics. dpred (may
// alias pred) gets g * (pred - target), g = 2 dloss / n, when not null.
__global__ void __launch_bounds__(kMseThreads)
    mse_loss_kernel(float* losses, AnyPtr dpred, AnyCPtr pred, AnyCPtr target, int64_t n, float g) {
  wait_for_prior_kernel();
  __shared__ float warp_sums[kMseThreads / 32];
  const int64_t base = (int64_t)blockIdx.x * n;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += kMseThreads) {
    const float d = load_any(pred, base + i) - load_any(target, base + i);
    s += d * d;
    if (dpred.p) store_any(dpred, base + i, g * d);
  }
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kMseThreads / 32; ++w) t += warp_sums[w];
    losses[blockIdx.x] = t / static_cast<float>(n);
  }
}

// One thread an output element (b, i) of [B, D]: cos for i < half, sin for half <= i < 2 half,
// 0 for an odd D's last column. The frequency in double rounded once, the argument in f32,
// cos/sin in double rounded once: as timestep_embedding_cpu.
__global__ void timestep_embedding_kernel(AnyPtr out, const float* t, int64_t B, int64_t D, double lmp) {
  wait_for_prior_kernel();
  const int64_t half = D / 2;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < B * D; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = e / D, col = e % D, i = col < half ? col : col - half;
    float v = 0.f;
    if (col < 2 * half) {
      const float f = static_cast<float>(exp(-lmp * static_cast<double>(i) / static_cast<double>(half)));
      const double a = static_cast<double>(t[b] * f);
      v = static_cast<float>(col < half ? cos(a) : sin(a));
    }
    store_any(out, e, v);
  }
}

// ---- kernel launchers -----------------------------------------------------------------------

void diffusion_mix(const Ctx& c, AnyPtr out, AnyPtr noise_out, AnyCPtr x, AnyCPtr y, const float* coef,
                   const int* keys, uint64_t seed, int64_t B, int64_t n) {
  const int64_t items = B * ((n + 3) / 4);
  if (items == 0) return;
  diffusion_mix_kernel<<<grid_stride_blocks(items, c.num_sms), kPackBlock, 0, c.stream>>>(out, noise_out, x, y,
                                                                                          coef, keys, seed, B, n);
  CUDA_CHECK_LAUNCH();
}

void mse_loss(const Ctx& c, float* losses, AnyPtr dpred, AnyCPtr pred, AnyCPtr target, int64_t B, int64_t n,
              float dloss) {
  if (B == 0) return;
  FT_CHECK(B <= 0x7fffffff, "mse_loss: B=", B, " exceeds the grid");
  const float g = 2.0f * dloss / static_cast<float>(n);  // as mse_loss_cpu
  if (dloss == 0.0f) dpred.p = nullptr;
  launch(c, mse_loss_kernel, dim3((unsigned)B), dim3(kMseThreads), 0, losses, dpred, pred, target, n, g);
}

void timestep_embedding(const Ctx& c, AnyPtr out, const float* t, int64_t B, int64_t D, float max_period) {
  if (B * D == 0) return;
  launch(c, timestep_embedding_kernel, dim3(grid_stride_blocks(B * D, c.num_sms)), dim3(kPackBlock), 0, out, t,
         B, D, log(static_cast<double>(max_period)));
}

}  // namespace ft::cuda
