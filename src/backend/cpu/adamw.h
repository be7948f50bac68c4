// The optimizer step's ops on the CPU: AdamW with decoupled weight decay, and the gradient's
// sum of squares for norm clipping.
//
// AdamW is elementwise, so any split over threads gives the same bits. sum_squares is a
// reduction: it sums a fixed number of equal chunks (independent of the thread count) in
// double and then adds the chunk sums in order, so the result is bit-reproducible across
// runs and thread counts without any workspace.
#pragma once
#include <cstdint>

namespace ft {

// One AdamW step over n elements (one slice). g = grads * grad_scale;
// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  mhat = m / (1 - b1^t);  vhat = v / (1 - b2^t);
// p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p),  wd = decay ? weight_decay : 0.
void adamw_update_cpu(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, bool decay,
                      float grad_scale, int64_t t);

// sum_i x[i]^2, accumulated in double
double sum_squares_cpu(const float* x, int64_t n);
// out = out - (out - src) * (1 - decay); decay 0: out = src (out not read). Elementwise.
void ema_update_cpu(float* out, const float* src, int64_t n, float decay);

}  // namespace ft
