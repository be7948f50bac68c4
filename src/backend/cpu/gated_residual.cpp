#include "backend/cpu/gated_residual.h"

namespace ft {

void gated_residual_forward_cpu(float* out, const float* res, const float* y, const float* gate,
                                int64_t B, int64_t T, int64_t C, const window::Geom* win) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* g = gate + b * C;
      const int64_t r = (b * T + t) * C, ry = (win ? window::reverse_src(*win, b * T + t) : b * T + t) * C;
      for (int64_t c = 0; c < C; ++c) out[r + c] = res[r + c] + g[c] * y[ry + c];
    }
}

void gated_residual_backward_cpu(float* dy, float* dgate, const float* dout, const float* y,
                                 const float* gate, int64_t B, int64_t T, int64_t C, const window::Geom* win) {
  // Whole (b, c) columns per thread, as in modulate_backward_cpu, over the tokens in order; y
  // is read before dy (which may alias it; the same element, whatever the order) is written.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const float g = gate[b * C + c];
      float s = 0.0f;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t i = (b * T + t) * C + c;
        const int64_t j = (win ? window::reverse_src(*win, b * T + t) : b * T + t) * C + c;
        const float d = dout[i];
        s += d * y[j];
        dy[j] = g * d;
      }
      dgate[b * C + c] = s;
    }
}

}  // namespace ft
