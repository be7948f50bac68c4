#include "backend/cpu/adamw.h"

#include <algorithm>
#include <cmath>

namespace ft {

void adamw_update_cpu(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, bool decay,
                      float grad_scale, int64_t t) {
  // bias corrections in double: beta2^t for large t loses digits in float
  const double td = static_cast<double>(t);
  const float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), td));
  const float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), td));
  const float wd = decay ? weight_decay : 0.0f;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / c1;
    const float vhat = vi / c2;
    params[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * params[i]);
  }
}

double sum_squares_cpu(const float* x, int64_t n) {
  constexpr int64_t kChunks = 256;
  double part[kChunks];
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < kChunks; ++c) {
    const int64_t i0 = n * c / kChunks;
    const int64_t i1 = n * (c + 1) / kChunks;
    double s = 0.0;
    for (int64_t i = i0; i < i1; ++i) s += static_cast<double>(x[i]) * x[i];
    part[c] = s;
  }
  double total = 0.0;
  for (int64_t c = 0; c < kChunks; ++c) total += part[c];
  return total;
}

void ema_update_cpu(float* out, const float* src, int64_t n, float decay) {
  if (decay == 0.f) {
    std::copy_n(src, n, out);
    return;
  }
  const float w = 1.f - decay;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = out[i] - (out[i] - src[i]) * w;
}

}  // namespace ft
