#include "backend/cpu/rmsnorm.h"

#include <cmath>

namespace ft {

void rmsnorm_forward_cpu(float* out, float* rstd, const float* inp, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    double s = 0.0;
    for (int64_t c = 0; c < C; ++c) s += static_cast<double>(x[c]) * x[c];
    const float r = static_cast<float>(1.0 / std::sqrt(s / static_cast<double>(C) + static_cast<double>(eps)));
    float* o = out + n * C;
    for (int64_t c = 0; c < C; ++c) o[c] = x[c] * r;
    rstd[n] = r;
  }
}

void rmsnorm_backward_cpu(float* dinp, const float* dout, const float* inp, const float* rstd, int64_t N,
                          int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* d = dout + n * C;
    const float r = rstd[n];
    double dot = 0.0;  // sum_c dout * xhat
    for (int64_t c = 0; c < C; ++c) dot += static_cast<double>(d[c]) * (x[c] * r);
    const float a = static_cast<float>(dot / static_cast<double>(C));
    float* di = dinp + n * C;
    for (int64_t c = 0; c < C; ++c) di[c] += r * (d[c] - x[c] * r * a);
  }
}

}  // namespace ft
