// The bias gradient of attention's qkv product without a pass over the whole d(qkv) (DiT and
// CDEIT; their attention has no padding mask and no dropout).
//
// qkv_b = (b_q, b_k, b_v), each [W]; per head, scores s_ij = q_i . k_j / sqrt(d) and
// out_i = sum_j P_ij v_j, where each query's probabilities P_ij (over j) sum to one.
// - b_k: adding a vector to every key adds the same q_i . b_k / sqrt(d) to all of query i's
//   scores, which its softmax ignores: the loss does not depend on b_k, its gradient is zero.
// - b_v: sum_j dV_j = sum_j sum_i P_ij dO_i = sum_i dO_i, the column sums of d(out). out is the
//   projection's input (proj(x) = x W_p^T + b_p), so sum_i dO_i = (sum_i d(proj out)_i) W_p =
//   d(b_p) W_p: one [1, W] x [W, W] product of the projection's bias gradient, which the
//   gated residual's backward has already summed.
// - b_q: the column sums of dQ, the first W columns of d(qkv), read in place.
// Against the product's own bias reduction over d(qkv) [N, 3W] this reads a third of it.
#pragma once
#include "backend/backend.h"

namespace ft {

// dqkv_b [3W] from dqkv [..., 3W] (this micro-batch's), the projection's bias gradient
// dproj_b [W] and weight proj_w [W, W]. dproj_b must already hold its sum for this micro-batch
// (the projection's backward ran first). b_q's and b_k's parts are written (gw overwrite) or
// added to; b_v's part is always written: with GradWrite::add, dproj_b holds the running sum
// over the step's micro-batches, and d(b_p) W_p of that sum is the running sum of b_v's.
void qkv_bias_backward(Backend& be, Tensor dqkv_b, Tensor dqkv, Tensor dproj_b, Tensor proj_w, GradWrite gw);

}  // namespace ft
