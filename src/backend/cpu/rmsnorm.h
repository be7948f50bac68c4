// RMSNorm without affine on the CPU (CDEIT's; see Backend::rmsnorm_forward): out = x * rstd,
// rstd = 1/sqrt(mean(x^2) + eps) saved per row. Backward adds into dinp (the residual
// stream's gradient, like layernorm_backward). Rows are independent, one per OpenMP
// iteration; sums over a row in double in channel order.
#pragma once
#include <cstdint>

namespace ft {

// out[N,C] = inp * rstd; rstd[N] written
void rmsnorm_forward_cpu(float* out, float* rstd, const float* inp, int64_t N, int64_t C, float eps);
// dinp[N,C] += rstd * (dout - xhat * mean_c(dout * xhat)), xhat = inp * rstd
void rmsnorm_backward_cpu(float* dinp, const float* dout, const float* inp, const float* rstd, int64_t N,
                          int64_t C);

}  // namespace ft
