#include "backend/cpu/diffusion.h"

#include <cmath>

#include "backend/diffusion_rng.h"

namespace ft {

void diffusion_mix_cpu(float* out, float* noise_out, const float* x, const float* y, const float* coef,
                       const int32_t* keys, uint64_t seed, int64_t B, int64_t n) {
  const int64_t groups = (n + 3) / 4;  // one Philox block gives elements 4j .. 4j+3
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < groups; ++j) {
      float z[4];
      diffusion_normal4(seed, static_cast<uint32_t>(keys[b]), static_cast<uint64_t>(j), z);
      const float c0 = coef[b * 3], c1 = coef[b * 3 + 1], c2 = coef[b * 3 + 2];
      for (int64_t k = 0; k < 4 && 4 * j + k < n; ++k) {
        const int64_t e = b * n + 4 * j + k;
        float v = c0 * x[e];
        if (y) v += c1 * y[e];
        out[e] = v + c2 * z[k];
        if (noise_out) noise_out[e] = z[k];
      }
    }
}

void mse_loss_cpu(float* losses, float* dpred, const float* pred, const float* target, int64_t B, int64_t n,
                  float dloss) {
  const float g = 2.0f * dloss / static_cast<float>(n);  // the CUDA kernels take the same g
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    double s = 0.0;
    for (int64_t i = b * n; i < (b + 1) * n; ++i) {
      const float d = pred[i] - target[i];
      s += static_cast<double>(d) * d;
      if (dpred) dpred[i] = g * d;
    }
    losses[b] = static_cast<float>(s / static_cast<double>(n));
  }
}

void timestep_embedding_cpu(float* out, const float* t, int64_t B, int64_t D, float max_period) {
  const int64_t half = D / 2;
  const double lmp = std::log(static_cast<double>(max_period));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    float* o = out + b * D;
    for (int64_t i = 0; i < half; ++i) {
      // the frequency in double rounded once, the argument in f32 (as torch's float32 math);
      // cos and sin of that f32 argument in double, rounded once: what the CUDA kernel does
      const float f = static_cast<float>(std::exp(-lmp * static_cast<double>(i) / static_cast<double>(half)));
      const float a = t[b] * f;
      o[i] = static_cast<float>(std::cos(static_cast<double>(a)));
      o[half + i] = static_cast<float>(std::sin(static_cast<double>(a)));
    }
    if (D % 2) o[D - 1] = 0.0f;
  }
}

}  // namespace ft
