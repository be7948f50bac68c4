#include "backend/cpu/modulate.h"

namespace ft {

void modulate_forward_cpu(float* out, const float* x, const float* shift, const float* scale,
                          int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* sh = shift + b * C;
      const float* sc = scale + b * C;
      const int64_t r = (b * T + t) * C;
      for (int64_t c = 0; c < C; ++c) out[r + c] = x[r + c] * (1.0f + sc[c]) + sh[c];
    }
}

void modulate_backward_cpu(float* dx, float* dshift, float* dscale, const float* dout,
                           const float* x, const float* scale, int64_t B, int64_t T, int64_t C) {
  // Split by (b, c): each thread owns whole columns, so the sums over t need no scratch and
  // always add in the same order. x and dout are read before dx (which may alias dout) is written.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const float g = 1.0f + scale[b * C + c];
      float s_shift = 0.0f, s_scale = 0.0f;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t i = (b * T + t) * C + c;
        const float d = dout[i];
        s_shift += d;
        s_scale += d * x[i];
        dx[i] = d * g;
      }
      dshift[b * C + c] = s_shift;
      dscale[b * C + c] = s_scale;
    }
}

}  // namespace ft
