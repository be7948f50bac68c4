#include "backend/cpu/attention.h"

#include <omp.h>

#include <cmath>
#include <cstring>

namespace ft {

size_t attention_backward_workspace_bytes(int64_t T, int nthreads) {
  return static_cast<size_t>(T) * static_cast<size_t>(nthreads) * sizeof(float);
}

namespace {
// Keys a query row t of a sample of length len sees: [0, key_end). 0 for padded rows.
inline int64_t key_end(int64_t t, int64_t len, bool causal) {
  if (t >= len) return 0;
  return causal ? t + 1 : len;
}
// The first key query row t of batch row b sees: its sample's first token with packed
// samples (t - positions[b,t]), else 0.
inline int64_t key_begin(const int32_t* positions, int64_t b, int64_t t, int64_t T) {
  return positions ? t - positions[b * T + t] : 0;
}
}  // namespace

void attention_forward_cpu(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                           int64_t C, int64_t NH, bool causal, const int32_t* seq_lens,
                           const int32_t* positions) {
  const int64_t hs = C / NH;
  const int64_t C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const float* q = qkv + (b * T + t) * C3 + h * hs;
        float* p = att + ((b * NH + h) * T + t) * T;
        float* o = out + (b * T + t) * C + h * hs;
        const int64_t kend = key_end(t, seq_lens ? seq_lens[b] : T, causal);
        const int64_t kbeg = key_begin(positions, b, t, T);  // keys before it: p = 0
        if (kend == 0) {  // a padded query row: no probabilities, output 0
          for (int64_t t2 = 0; t2 < T; ++t2) p[t2] = 0.0f;
          for (int64_t i = 0; i < hs; ++i) o[i] = 0.0f;
          continue;
        }
        // scores and their max over the visible keys kbeg <= t2 < kend
        float maxv = -INFINITY;
        for (int64_t t2 = 0; t2 < kbeg; ++t2) p[t2] = 0.0f;
        for (int64_t t2 = kbeg; t2 < kend; ++t2) {
          const float* k = qkv + (b * T + t2) * C3 + C + h * hs;
          float s = 0.0f;
          for (int64_t i = 0; i < hs; ++i) s += q[i] * k[i];
          s *= scale;
          p[t2] = s;
          if (s > maxv) maxv = s;
        }
        double sum = 0.0;
        for (int64_t t2 = kbeg; t2 < kend; ++t2) {
          const float e = std::exp(p[t2] - maxv);
          p[t2] = e;
          sum += e;
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t t2 = kbeg; t2 < kend; ++t2) p[t2] *= inv;
        for (int64_t t2 = kend; t2 < T; ++t2) p[t2] = 0.0f;
        // out = sum_t2 p[t2] * v[t2]
        for (int64_t i = 0; i < hs; ++i) o[i] = 0.0f;
        for (int64_t t2 = kbeg; t2 < kend; ++t2) {
          const float* v = qkv + (b * T + t2) * C3 + 2 * C + h * hs;
          const float pv = p[t2];
          for (int64_t i = 0; i < hs; ++i) o[i] += pv * v[i];
        }
      }
    }
  }
}

void attention_backward_cpu(float* dqkv, const float* dout, const float* qkv, const float* att,
                            float* scratch, int nthreads, int64_t B, int64_t T, int64_t C,
                            int64_t NH, bool causal, const int32_t* seq_lens,
                            const int32_t* positions) {
  const int64_t hs = C / NH;
  const int64_t C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel num_threads(nthreads)
  {
    float* dp = scratch + static_cast<int64_t>(omp_get_thread_num()) * T;  // dL/dp, one row
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < NH; ++h) {
        // This (b,h) owns the head's q/k/v gradient columns of batch row b: clear them first.
        for (int64_t t = 0; t < T; ++t) {
          float* d = dqkv + (b * T + t) * C3 + h * hs;
          std::memset(d, 0, hs * sizeof(float));
          std::memset(d + C, 0, hs * sizeof(float));
          std::memset(d + 2 * C, 0, hs * sizeof(float));
        }
        const int64_t len = seq_lens ? seq_lens[b] : T;
        for (int64_t t = 0; t < T; ++t) {
          const int64_t kend = key_end(t, len, causal);  // p is 0 past it
          const int64_t kbeg = key_begin(positions, b, t, T);  // and before this
          // (so a key receives gradient only from the queries of its own sample)
          const float* p = att + ((b * NH + h) * T + t) * T;
          const float* q = qkv + (b * T + t) * C3 + h * hs;
          const float* dO = dout + (b * T + t) * C + h * hs;
          float* dq = dqkv + (b * T + t) * C3 + h * hs;
          // dp[t2] = dO . v[t2];  dv[t2] += p[t2] * dO
          double pdp = 0.0;  // sum_t2 p[t2] * dp[t2], the softmax backward's row term
          for (int64_t t2 = kbeg; t2 < kend; ++t2) {
            const float* v = qkv + (b * T + t2) * C3 + 2 * C + h * hs;
            float* dv = dqkv + (b * T + t2) * C3 + 2 * C + h * hs;
            const float pv = p[t2];
            float s = 0.0f;
            for (int64_t i = 0; i < hs; ++i) {
              s += dO[i] * v[i];
              dv[i] += pv * dO[i];
            }
            dp[t2] = s;
            pdp += static_cast<double>(pv) * s;
          }
          const float pdpf = static_cast<float>(pdp);
          // dscore[t2] = p[t2] * (dp[t2] - pdp) * scale;  dq += dscore k;  dk[t2] += dscore q
          for (int64_t t2 = kbeg; t2 < kend; ++t2) {
            const float ds = p[t2] * (dp[t2] - pdpf) * scale;
            const float* k = qkv + (b * T + t2) * C3 + C + h * hs;
            float* dk = dqkv + (b * T + t2) * C3 + C + h * hs;
            for (int64_t i = 0; i < hs; ++i) {
              dq[i] += ds * k[i];
              dk[i] += ds * q[i];
            }
          }
        }
      }
    }
  }
}

}  // namespace ft
