// The patch embedding on the CPU (see Backend::patch_embed_forward/backward): a product with a
// narrow inner dimension from one or two inputs, plus bias and a table by position. fp32, sums
// in a fixed order (row-major over n), so the results are deterministic.
#pragma once
#include <cstdint>

namespace ft {

// out[n,o] = bias[o] + table[n % T, o] + sum_k x[n,k] wx[o,k] + sum_k c[n,k] wc[o,k]
// (c, wc null when Kc == 0; bias, table null when absent).
void patch_embed_forward_cpu(float* out, const float* x, const float* wx, const float* c, const float* wc,
                             const float* bias, const float* table, int64_t N, int64_t O, int64_t Kx, int64_t Kc,
                             int64_t T);
// dwx[o,k] (+)= sum_n dout[n,o] x[n,k]; dwc likewise from c; dbias[o] (+)= sum_n dout[n,o]
// (dwc, dbias null to skip). accumulate: += instead of =.
void patch_embed_backward_cpu(float* dwx, float* dwc, float* dbias, const float* dout, const float* x, const float* c,
                              int64_t N, int64_t O, int64_t Kx, int64_t Kc, bool accumulate);

}  // namespace ft
