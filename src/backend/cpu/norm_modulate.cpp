#include "backend/cpu/norm_modulate.h"

#include <cmath>
#include <vector>

namespace ft {

void norm_modulate_forward_cpu(float* out, float* mean, float* rstd, const float* inp, const float* shift,
                               const float* scale, const NormModCpu& d) {
  const int64_t N = d.B * d.T, C = d.C;
  // Statistics per input row, as layernorm_forward_cpu / rmsnorm_forward_cpu compute them.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    if (d.rms) {
      double s = 0.0;
      for (int64_t c = 0; c < C; ++c) s += static_cast<double>(x[c]) * x[c];
      rstd[n] = static_cast<float>(1.0 / std::sqrt(s / static_cast<double>(C) + static_cast<double>(d.eps)));
    } else {
      double s = 0.0;
      for (int64_t c = 0; c < C; ++c) s += x[c];
      const double m = s / static_cast<double>(C);
      double v = 0.0;  // two-pass variance, as layernorm.cpp
      for (int64_t c = 0; c < C; ++c) {
        const double dd = x[c] - m;
        v += dd * dd;
      }
      v /= static_cast<double>(C);
      mean[n] = static_cast<float>(m);
      rstd[n] = static_cast<float>(1.0 / std::sqrt(v + static_cast<double>(d.eps)));
    }
  }
  // Output rows in out's order; xhat in f32 exactly as the norm writes it, then modulate's
  // x * (1 + scale) + shift.
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const int64_t n = d.src(r), b = r / d.T;
    const float* x = inp + n * C;
    const float* sh = shift + b * C;
    const float* sc = scale + b * C;
    const float m = d.rms ? 0.f : mean[n], s = rstd[n];
    float* o = out + r * C;
    for (int64_t c = 0; c < C; ++c) {
      const float xh = d.rms ? x[c] * s : (x[c] - m) * s;
      o[c] = xh * (1.0f + sc[c]) + sh[c];
    }
  }
}

void norm_modulate_backward_cpu(float* dinp, float* dshift, float* dscale, const float* dout, const float* inp,
                                const float* mean, const float* rstd, const float* scale, const NormModCpu& d) {
  const int64_t N = d.B * d.T, C = d.C;
  // dinp: one output row at a time (src is a permutation: no two rows write the same dinp row).
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const int64_t n = d.src(r), b = r / d.T;
    const float* x = inp + n * C;
    const float* dy = dout + r * C;
    const float* sc = scale + b * C;
    const float m = d.rms ? 0.f : mean[n], s = rstd[n];
    float* di = dinp + n * C;
    // g = dout * (1 + scale): modulate_backward's dx, the norm's dout
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const float g = dy[c] * (1.0f + sc[c]);
      const float xh = d.rms ? x[c] * s : (x[c] - m) * s;
      sum_g += g;
      sum_gx += static_cast<double>(g) * xh;
    }
    // overwrite: the old dinp is never read (it may hold anything, NaN included)
    auto put = [&](int64_t c, float v) { di[c] = d.overwrite ? v : di[c] + v; };
    if (d.rms) {  // rmsnorm_backward_cpu: dinp += r * (g - x r a), a = mean(g * xhat)
      const float a = static_cast<float>(sum_gx / static_cast<double>(C));
      for (int64_t c = 0; c < C; ++c) put(c, s * (dy[c] * (1.0f + sc[c]) - x[c] * s * a));
    } else {  // layernorm_backward_cpu without affine: dinp += (g - mean(g) - xhat mean(g xhat)) r
      const float a = static_cast<float>(sum_g / static_cast<double>(C));
      const float bb = static_cast<float>(sum_gx / static_cast<double>(C));
      for (int64_t c = 0; c < C; ++c) {
        const float xh = (x[c] - m) * s;
        put(c, (dy[c] * (1.0f + sc[c]) - a - xh * bb) * s);
      }
    }
  }
  // dshift, dscale: per sample, its output rows in order, in double (one sample a thread).
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < d.B; ++b) {
    std::vector<double> s1(static_cast<size_t>(C), 0.0), s2(static_cast<size_t>(C), 0.0);
    for (int64_t t = 0; t < d.T; ++t) {
      const int64_t r = b * d.T + t, n = d.src(r);
      const float* x = inp + n * C;
      const float* dy = dout + r * C;
      const float m = d.rms ? 0.f : mean[n], s = rstd[n];
      for (int64_t c = 0; c < C; ++c) {
        const float xh = d.rms ? x[c] * s : (x[c] - m) * s;
        s1[c] += dy[c];
        s2[c] += static_cast<double>(dy[c]) * xh;
      }
    }
    for (int64_t c = 0; c < C; ++c) {
      dshift[b * C + c] = static_cast<float>(s1[c]);
      dscale[b * C + c] = static_cast<float>(s2[c]);
    }
  }
}

}  // namespace ft
