#include "backend/cpu/bpr.h"

#include <cmath>

namespace ft {

namespace {

// -log sigmoid(x) = softplus(-x), without overflow for either sign of x.
double neg_log_sigmoid(double x) { return std::fmax(-x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }
double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

}  // namespace

void bpr_forward_backward_cpu(float* losses, float* dh, float* dE, float* coef, const float* h,
                              const float* E, const int32_t* pos, const int32_t* neg, int64_t N,
                              int64_t C, int64_t K, float dloss) {
  const bool grad = dloss != 0.0f;
  const int64_t S = K + 1;
  // Per row: loss, coefficients, dh (rows are independent).
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* hn = h + n * C;
    float* cf = grad ? coef + n * S : nullptr;
    if (pos[n] < 0) {
      losses[n] = 0.0f;
      if (grad) {
        for (int64_t s = 0; s < S; ++s) cf[s] = 0.0f;
        for (int64_t c = 0; c < C; ++c) dh[n * C + c] = 0.0f;
      }
      continue;
    }
    const float* ep = E + static_cast<int64_t>(pos[n]) * C;
    double loss = 0.0, gsum = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      const float* en = E + static_cast<int64_t>(neg[n * K + k]) * C;
      double x = 0.0;
      for (int64_t c = 0; c < C; ++c) x += static_cast<double>(hn[c]) * (ep[c] - en[c]);
      loss += neg_log_sigmoid(x);
      if (grad) {
        const double g = sigmoid(x) - 1.0;
        gsum += g;
        cf[1 + k] = static_cast<float>(-static_cast<double>(dloss) * g);
      }
    }
    losses[n] = static_cast<float>(loss);
    if (!grad) continue;
    cf[0] = static_cast<float>(static_cast<double>(dloss) * gsum);
    for (int64_t c = 0; c < C; ++c) {
      double acc = static_cast<double>(cf[0]) * ep[c];
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(cf[1 + k]) * E[static_cast<int64_t>(neg[n * K + k]) * C + c];
      dh[n * C + c] = static_cast<float>(acc);
    }
  }
  if (!grad) return;
  // dE by column blocks (as embedding_backward_cpu): no two threads write the same float, and
  // each float receives its contributions in (row, slot) order.
  constexpr int64_t kBlock = 32;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (int64_t n = 0; n < N; ++n) {
      if (pos[n] < 0) continue;
      const float* hn = h + n * C;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t item = s == 0 ? pos[n] : neg[n * K + s - 1];
        const float a = coef[n * S + s];
        float* d = dE + item * C;
        for (int64_t c = c0; c < c1; ++c) d[c] += a * hn[c];
      }
    }
  }
}

void item_scores_cpu(float* out, const float* h, const float* E, const int32_t* items, int64_t N,
                     int64_t M, int64_t C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      const float* hn = h + n * C;
      const float* e = E + static_cast<int64_t>(items[n * M + m]) * C;
      double acc = 0.0;
      for (int64_t c = 0; c < C; ++c) acc += static_cast<double>(hn[c]) * e[c];
      out[n * M + m] = static_cast<float>(acc);
    }
}

}  // namespace ft
