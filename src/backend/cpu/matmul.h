// Fully connected layer on the CPU: the three products go through OpenBLAS sgemm, which
// splits work over output tiles (never over the reduction), so its results are reproducible
// for a fixed thread count. The bias add and the bias-gradient reduction are ours, with the
// reduction split by output column and summed over rows in order (deterministic, no scratch).
#pragma once
#include <cstdint>

namespace ft {

// out[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC]   (bias may be null)
void matmul_forward_cpu(float* out, const float* inp, const float* w, const float* bias,
                        int64_t N, int64_t C, int64_t OC);

// dinp[N,C] = dout[N,OC] @ w[OC,C]        (overwrite; skipped if dinp is null)
// dw[OC,C] += dout^T @ inp[N,C]            (skipped with dbias if dw is null)
// dbias[OC] += sum_n dout[n,:]            (skipped if dbias is null)
// (= instead of += for dw and dbias when accumulate is false)
void matmul_backward_cpu(float* dinp, float* dw, float* dbias, const float* dout,
                         const float* inp, const float* w, int64_t N, int64_t C, int64_t OC,
                         bool accumulate = true);
// dbias[OC] (+)= sum_n dout[n,:], in row order per column (double sums): also the fused bias
// gradients of the element-wise backward ops (silu_backward_recompute, gated_residual_backward).
// Row n of dout starts at dout + n * ld (ld = 0: OC), so a block of a wider row's columns works too
// (Backend::column_sums).
void bias_backward_cpu(float* dbias, const float* dout, int64_t N, int64_t OC, bool accumulate, int64_t ld = 0);

}  // namespace ft
