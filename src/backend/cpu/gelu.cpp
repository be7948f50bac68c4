#include "backend/cpu/gelu.h"

#include <cmath>

namespace ft {
namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCube = 0.044715f;
}  // namespace

void gelu_forward_cpu(float* out, const float* inp, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCube * x * x * x);
    out[i] = 0.5f * x * (1.0f + std::tanh(u));
  }
}

void gelu_backward_cpu(float* dinp, const float* inp, const float* dout, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCube * x * x * x);
    const float th = std::tanh(u);
    const float sech2 = 1.0f - th * th;
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
    dinp[i] = grad * dout[i];
  }
}

}  // namespace ft
