#include "backend/cpu/layernorm.h"

#include <cmath>

namespace ft {

void layernorm_forward_cpu(float* out, float* mean, float* rstd, const float* inp, const float* w,
                           const float* b, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    double s = 0.0;
    for (int64_t c = 0; c < C; ++c) s += x[c];
    const double m = s / static_cast<double>(C);
    double v = 0.0;  // two-pass variance: no cancellation for rows with a large mean
    for (int64_t c = 0; c < C; ++c) {
      const double d = x[c] - m;
      v += d * d;
    }
    v /= static_cast<double>(C);
    const float mf = static_cast<float>(m);
    const float r = static_cast<float>(1.0 / std::sqrt(v + static_cast<double>(kLayerNormEps)));
    float* o = out + n * C;
    if (w) {
      for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - mf) * r * w[c] + b[c];
    } else {
      for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - mf) * r;
    }
    mean[n] = mf;
    rstd[n] = r;
  }
}

void layernorm_backward_cpu(float* dinp, float* dw, float* db, const float* dout,
                            const float* inp, const float* w, const float* mean,
                            const float* rstd, int64_t N, int64_t C) {
  // dinp: rows are independent.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* d = dout + n * C;
    const float m = mean[n];
    const float r = rstd[n];
    double dnorm_mean = 0.0, dnorm_norm_mean = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * r;
      const float dnorm = w ? w[c] * d[c] : d[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += static_cast<double>(dnorm) * xhat;
    }
    const float a = static_cast<float>(dnorm_mean / static_cast<double>(C));
    const float bb = static_cast<float>(dnorm_norm_mean / static_cast<double>(C));
    float* di = dinp + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * r;
      const float dnorm = w ? w[c] * d[c] : d[c];
      di[c] += (dnorm - a - xhat * bb) * r;
    }
  }
  if (!dw) return;  // no affine: no parameters
  // dw, db: channel blocks, rows summed in order in double.
  constexpr int64_t kBlock = 32;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t len = c0 + kBlock < C ? kBlock : C - c0;
    double sw[kBlock] = {}, sb[kBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C + c0;
      const float* d = dout + n * C + c0;
      const float m = mean[n];
      const float r = rstd[n];
      for (int64_t j = 0; j < len; ++j) {
        const float xhat = (x[j] - m) * r;
        sw[j] += static_cast<double>(d[j]) * xhat;
        sb[j] += d[j];
      }
    }
    for (int64_t j = 0; j < len; ++j) {
      dw[c0 + j] += static_cast<float>(sw[j]);
      db[c0 + j] += static_cast<float>(sb[j]);
    }
  }
}

}  // namespace ft
