#include "models/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace ft {

int32_t argmax_token(std::span<const float> logits) {
  float best = -INFINITY;
  int64_t idx = -1;
  for (size_t v = 0; v < logits.size(); ++v)  // as argmax_rows: first of equals, never NaN
    if (logits[v] > best || (idx < 0 && logits[v] == best)) best = logits[v], idx = static_cast<int64_t>(v);
  return static_cast<int32_t>(idx < 0 ? 0 : idx);
}

void check_generate_options(const GenerateOptions& opt) {
  FT_USER_CHECK(opt.max_new_tokens >= 0, "--max-new-tokens ", opt.max_new_tokens, " must be >= 0");
  FT_USER_CHECK(opt.temperature >= 0 && std::isfinite(opt.temperature), "--temperature ", opt.temperature,
                " must be >= 0 (0: greedy)");
  FT_USER_CHECK(opt.top_k >= 0, "--top-k ", opt.top_k, " must be >= 0 (0: all tokens)");
  FT_USER_CHECK(opt.top_p > 0 && opt.top_p <= 1, "--top-p ", opt.top_p, " must be in (0, 1]");
}

SamplingSet sampling_set(std::span<const float> logits, const GenerateOptions& opt) {
  const int64_t V = static_cast<int64_t>(logits.size());
  FT_CHECK(V >= 1 && opt.temperature > 0, "sampling over ", V, " logits at temperature ", opt.temperature);
  // most likely first, ties to the smaller id: the order top-k and top-p cut
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  SamplingSet s;
  s.ids.resize(static_cast<size_t>(V));
  std::iota(s.ids.begin(), s.ids.end(), 0);
  const int64_t K = opt.top_k > 0 ? std::min<int64_t>(opt.top_k, V) : V;
  if (K < V) {
    std::nth_element(s.ids.begin(), s.ids.begin() + K, s.ids.end(), before);
    s.ids.resize(static_cast<size_t>(K));
  }
  float top = -INFINITY;
  for (int32_t i : s.ids) top = std::max(top, logits[i]);
  auto weight = [&](int32_t i) { return std::exp((static_cast<double>(logits[i]) - top) / opt.temperature); };
  double z = 0;
  for (int32_t i : s.ids) z += weight(i);
  if (opt.top_p < 1) {
    // Sort only as much of the list as the nucleus needs (it is usually short): the m most
    // likely, doubling m until their mass reaches top_p.
    for (int64_t m = std::min<int64_t>(64, K);; m = std::min<int64_t>(2 * m, K)) {
      std::partial_sort(s.ids.begin(), s.ids.begin() + m, s.ids.end(), before);
      double cum = 0;
      int64_t n = -1;
      for (int64_t j = 0; j < m && n < 0; ++j)
        if ((cum += weight(s.ids[j])) >= opt.top_p * z) n = j + 1;
      if (n < 0 && m == K) n = K;  // rounding: the whole list
      if (n > 0) {
        s.ids.resize(static_cast<size_t>(n));
        break;
      }
    }
  }
  s.weights.reserve(s.ids.size());
  for (int32_t i : s.ids) s.total += s.weights.emplace_back(weight(i));
  return s;
}

std::vector<double> sampling_distribution(std::span<const float> logits, const GenerateOptions& opt) {
  std::vector<double> p(logits.size(), 0.0);
  if (opt.temperature == 0) {
    p[static_cast<size_t>(argmax_token(logits))] = 1;
    return p;
  }
  const SamplingSet s = sampling_set(logits, opt);
  for (size_t j = 0; j < s.ids.size(); ++j) p[static_cast<size_t>(s.ids[j])] = s.weights[j] / s.total;
  return p;
}

int32_t sample_token(std::span<const float> logits, const GenerateOptions& opt, double u) {
  if (opt.temperature == 0) return argmax_token(logits);
  const SamplingSet s = sampling_set(logits, opt);
  const double target = u * s.total;
  double acc = 0;
  for (size_t j = 0; j < s.ids.size(); ++j)
    if (target < (acc += s.weights[j])) return s.ids[j];
  return s.ids.back();  // u * total rounded up to the sum
}

double sample_uniform(uint64_t seed, uint64_t prompt, uint64_t step) {
  uint64_t x = seed ^ 0x6a09e667f3bcc908ull;
  x = splitmix64(x) ^ prompt;
  x = splitmix64(x) ^ step;
  return static_cast<double>(splitmix64(x) >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace ft
