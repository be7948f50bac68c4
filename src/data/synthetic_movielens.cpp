// The synthetic MovieLens-shaped generator; see movielens.h for what it models and why.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/movielens.h"

namespace ft {
namespace {

constexpr int kFactors = 8;
// ML-1M's first rating (2000-04-25) and a span of about three years.
constexpr int64_t kTimeStart = 956703932;
constexpr int64_t kTimeSpan = 90'000'000;

// Lengths: log-normal (sigma 1) above min_len, capped at half the items, then nudged one at a
// time so the total is exact (the ML-1M preset must have exactly 1,000,209 ratings).
std::vector<uint32_t> draw_lengths(const SyntheticSpec& s, Rng& rng) {
  const uint32_t cap = s.items / 2;
  const double extra = std::max(1.0, s.mean_len - s.min_len);
  const double sigma = 1.0, mu = std::log(extra) - 0.5 * sigma * sigma;
  std::vector<uint32_t> len(s.users);
  int64_t total = 0;
  for (auto& l : len) {
    const double x = s.min_len + std::exp(mu + sigma * rng.normal());
    l = static_cast<uint32_t>(std::clamp<double>(std::round(x), s.min_len, cap));
    total += l;
  }
  const auto target = static_cast<int64_t>(std::llround(s.mean_len * s.users));
  FT_CHECK(target >= int64_t{s.min_len} * s.users && target <= int64_t{cap} * s.users,
           "synthetic spec: mean length ", s.mean_len, " outside [", s.min_len, ", ", cap, "]");
  // Walk the users from a seeded start; every user moves at most one step per pass, so the
  // adjustment spreads evenly instead of landing on the first users.
  size_t u = rng.next_u64() % s.users;
  while (total != target) {
    uint32_t& l = len[u];
    if (total < target && l < cap) ++l, ++total;
    else if (total > target && l > s.min_len) --l, --total;
    u = (u + 1) % s.users;
  }
  return len;
}

}  // namespace

SyntheticSpec movielens_1m_spec(uint64_t seed) {
  SyntheticSpec s;
  s.seed = seed;
  return s;
}

std::vector<RawInteraction> synthetic_movielens(uint32_t users, uint32_t items, double mean_len, uint64_t seed) {
  SyntheticSpec s;
  s.users = users;
  s.items = items;
  s.mean_len = mean_len;
  s.seed = seed;
  return synthetic_movielens(s);
}

std::vector<RawInteraction> synthetic_movielens(const SyntheticSpec& s) {
  FT_CHECK(s.users > 0 && s.items >= 2 && s.min_len >= 1 && s.min_len <= s.items / 2,
           "synthetic spec: ", s.users, " users, ", s.items, " items, min length ", s.min_len);
  Rng rng(s.seed ^ 0x6D6F766965ull);  // "movie": a stream of its own for this seed
  const uint32_t N = s.items;

  // Items: factor vectors, a Zipf log-popularity by a random rank, fixed successors.
  std::vector<float> factors(size_t{N} * kFactors);
  for (auto& f : factors) f = static_cast<float>(rng.normal() / std::sqrt(double{kFactors}));
  std::vector<uint32_t> rank(N);
  std::iota(rank.begin(), rank.end(), 0u);
  for (uint32_t i = N - 1; i > 0; --i) std::swap(rank[i], rank[rng.next_u64() % (i + 1)]);
  std::vector<double> log_pop(N);
  for (uint32_t i = 0; i < N; ++i) log_pop[i] = -s.zipf * std::log(rank[i] + 1.0);
  const uint32_t S = std::max(1u, s.successors);
  std::vector<uint32_t> succ(size_t{N} * S);
  for (uint32_t i = 0; i < N; ++i)
    for (uint32_t j = 0; j < S; ++j) {
      uint32_t x;
      do x = static_cast<uint32_t>(rng.next_u64() % N);
      while (x == i);
      succ[size_t{i} * S + j] = x;
    }

  const std::vector<uint32_t> len = draw_lengths(s, rng);
  std::vector<RawInteraction> out;
  out.reserve(std::accumulate(len.begin(), len.end(), size_t{0}));
  std::vector<double> cdf(N);
  std::vector<uint8_t> seen(N, 0);
  std::vector<uint32_t> seq;
  std::vector<RawInteraction> lines;
  for (uint32_t u = 0; u < s.users; ++u) {
    // The user's taste: a weight per factor; the softmax of popularity plus affinity, as a CDF.
    float w[kFactors];
    for (float& x : w) x = static_cast<float>(rng.normal());
    double max_logit = -1e300;
    for (uint32_t i = 0; i < N; ++i) {
      double dot = 0;
      for (int k = 0; k < kFactors; ++k) dot += w[k] * factors[size_t{i} * kFactors + k];
      cdf[i] = log_pop[i] + s.affinity * dot;
      max_logit = std::max(max_logit, cdf[i]);
    }
    double acc = 0;
    for (uint32_t i = 0; i < N; ++i) cdf[i] = acc += std::exp(cdf[i] - max_logit);

    seq.clear();
    uint32_t prev = N;  // none yet
    for (uint32_t t = 0; t < len[u]; ++t) {
      uint32_t item = N;
      if (prev < N && rng.uniform() < s.markov) {
        const uint32_t c = succ[size_t{prev} * S + rng.next_u64() % S];
        if (!seen[c]) item = c;
      }
      // Taste draws, rejecting items already rated; a heavy user who exhausts the tries takes
      // the next unrated item after a random one (rare: lengths are capped at half the items).
      for (int tries = 0; item == N && tries < 64; ++tries) {
        const double x = (rng.next_u64() >> 11) * (1.0 / 9007199254740992.0) * acc;
        const auto c = static_cast<uint32_t>(std::min<size_t>(
            std::upper_bound(cdf.begin(), cdf.end(), x) - cdf.begin(), N - 1));
        if (!seen[c]) item = c;
      }
      if (item == N) {
        uint32_t c = static_cast<uint32_t>(rng.next_u64() % N);
        while (seen[c]) c = (c + 1) % N;
        item = c;
      }
      seen[item] = 1;
      seq.push_back(item);
      prev = item;
    }
    // Strictly increasing times: the sequence order is the time order, whatever the line order.
    int64_t time = kTimeStart + static_cast<int64_t>(rng.next_u64() % (kTimeSpan / 2));
    lines.clear();
    for (uint32_t item : seq) {
      seen[item] = 0;
      time += 1 + static_cast<int64_t>(rng.next_u64() % 3600);
      lines.push_back({u + 1, item + 1, time});
    }
    for (size_t i = lines.size() - 1; i > 0; --i) std::swap(lines[i], lines[rng.next_u64() % (i + 1)]);
    out.insert(out.end(), lines.begin(), lines.end());
  }
  return out;
}

uint64_t write_synthetic_ratings(const std::string& path, const SyntheticSpec& spec) {
  const std::vector<RawInteraction> r = synthetic_movielens(spec);
  std::string text;
  text.reserve(r.size() * 24);
  char line[96];
  for (const RawInteraction& x : r) {
    // A rating of 1..5 hashed from (seed, user, item): present for the format, unused by training.
    uint64_t h = spec.seed ^ (uint64_t{x.user} << 32) ^ x.item;
    const int stars = 1 + static_cast<int>(splitmix64(h) % 5);
    const int n = std::snprintf(line, sizeof line, "%u::%u::%d::%lld\n", x.user, x.item, stars,
                                static_cast<long long>(x.time));
    text.append(line, static_cast<size_t>(n));
  }
  const ByteRange piece{text.data(), text.size()};
  write_file_atomic(path, {&piece, 1});
  return r.size();
}

}  // namespace ft
