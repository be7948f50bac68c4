// LayerNorm on the CPU (fp32 storage, double accumulation for the row statistics).
//
// Forward saves mean and rstd per row so backward does not recompute them. Backward adds into
// dinp (the residual stream's gradient, see backend.h) and into dw/db. The dw/db reduction
// over rows is split by channel blocks, each summed over rows in a fixed order in double:
// deterministic for any thread count, no atomics, no scratch.
#pragma once
#include <cstdint>

namespace ft {

constexpr float kLayerNormEps = 1e-5f;

// out[N,C] = (inp - mean) * rstd * w + b;  mean[N], rstd[N] written; w[C], b[C], or both
// nullptr: no affine, out = (inp - mean) * rstd
void layernorm_forward_cpu(float* out, float* mean, float* rstd, const float* inp, const float* w,
                           const float* b, int64_t N, int64_t C);

// dinp[N,C] += ...; dw[C] += sum_n dout*xhat; db[C] += sum_n dout. No affine: w, dw and db
// nullptr (dinp only).
void layernorm_backward_cpu(float* dinp, float* dw, float* db, const float* dout,
                            const float* inp, const float* w, const float* mean,
                            const float* rstd, int64_t N, int64_t C);

}  // namespace ft
