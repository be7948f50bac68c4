// Recommender head on the CPU: fused BPR scoring + loss + gradients over a tied item
// embedding table, and candidate scoring for evaluation (see Backend::bpr_forward_backward,
// Backend::item_scores).
//
// Every row n contributes K+1 "slots": slot 0 is its positive item, slot 1+k its k-th
// negative. With g_k = sigmoid(x_k) - 1 and x_k = h_n . (E[pos] - E[neg_k]), the backward is
// one coefficient per slot, coef[n*(K+1) + 0] = dloss * sum_k g_k and
// coef[n*(K+1) + 1 + k] = -dloss * g_k, so that
//   dh[n]        = sum_slots coef * E[item(slot)]
//   dE[item(s)] += coef(s) * h[n]            (for every slot s of every non-padding row)
// The scatter into dE is deterministic: channels are split in column blocks, one thread per
// block, and within a block the slots are added in (row, slot) order: the same order the
// CUDA backend's stable sort gives.
#pragma once
#include <cstdint>

namespace ft {

// Scratch the backward needs: the coefficients, N*(K+1) floats.
inline int64_t bpr_coef_count(int64_t N, int64_t K) { return N * (K + 1); }

// losses[N] (overwritten); when dloss != 0: dh[N,C] (overwritten), dE[Vp,C] (+=), coef
// (scratch of bpr_coef_count floats). pos[N]: < 0 marks a padding row (loss 0, dh 0, no dE);
// otherwise pos and every neg[n, k] must be in [0, Vp) (the caller checks).
void bpr_forward_backward_cpu(float* losses, float* dh, float* dE, float* coef, const float* h,
                              const float* E, const int32_t* pos, const int32_t* neg, int64_t N,
                              int64_t C, int64_t K, float dloss);

// out[n, m] = h[n] . E[items[n, m]]; items in [0, Vp) (the caller checks).
void item_scores_cpu(float* out, const float* h, const float* E, const int32_t* items, int64_t N,
                     int64_t M, int64_t C);

}  // namespace ft
