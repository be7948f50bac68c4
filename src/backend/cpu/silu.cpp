#include "backend/cpu/silu.h"

#include <cmath>

namespace ft {

void silu_forward_cpu(float* out, const float* inp, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float x = inp[i];
    out[i] = x / (1.0f + std::exp(-x));
  }
}

void silu_backward_cpu(float* dinp, const float* inp, const float* dout, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float x = inp[i];
    const float s = 1.0f / (1.0f + std::exp(-x));
    dinp[i] = s * (1.0f + x * (1.0f - s)) * dout[i];
  }
}

}  // namespace ft
