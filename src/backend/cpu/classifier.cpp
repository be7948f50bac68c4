#include "backend/cpu/classifier.h"

#include <cmath>

namespace ft {

void classifier_forward_backward_cpu(float* losses, float* logits, const int32_t* targets,
                                     int64_t N, int64_t V, int64_t Vp, float dloss) {
  const bool grad = dloss != 0.0f;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* x = logits + n * Vp;
    const int32_t tgt = targets[n];
    if (tgt < 0) {
      losses[n] = 0.0f;
      if (grad)
        for (int64_t v = 0; v < Vp; ++v) x[v] = 0.0f;
      continue;
    }
    float maxv = -INFINITY;
    for (int64_t v = 0; v < V; ++v) maxv = x[v] > maxv ? x[v] : maxv;
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(x[v] - maxv));
    const double logz = std::log(sum);
    losses[n] = static_cast<float>(logz - static_cast<double>(x[tgt] - maxv));
    if (!grad) continue;
    const double inv = 1.0 / sum;
    for (int64_t v = 0; v < V; ++v) {
      const double p = std::exp(static_cast<double>(x[v] - maxv)) * inv;
      x[v] = static_cast<float>((p - (v == tgt ? 1.0 : 0.0)) * dloss);
    }
    for (int64_t v = V; v < Vp; ++v) x[v] = 0.0f;
  }
}

}  // namespace ft
