// Negative sampling by stateless hashing; see negative_sampler.h.
#include "data/negative_sampler.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"

namespace ft {
namespace {

// splitmix64 as a pure function of its input (core/rng.h's advances its argument).
uint64_t mix(uint64_t x) { return splitmix64(x); }

// Uniform in [0, n) from 64 random bits (Lemire's multiply; the bias is below n / 2^64).
uint64_t below(uint64_t bits, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

// Domain tags keep the training and evaluation streams apart for the same seed.
constexpr uint64_t kTrainTag = 0x747261696E000000ull;  // "train"
constexpr uint64_t kEvalTag = 0x6576616C00000000ull;   // "eval"

void check_positives(uint32_t user, std::span<const uint32_t> pos, uint32_t n) {
  FT_CHECK(pos.empty() || (pos.front() >= 1 && pos.back() <= n), "user ", user, ": positives outside 1..", n);
  FT_USER_CHECK(pos.size() < n, "user ", user, " has rated all ", n, " items: no negative item exists for it");
}

}  // namespace

PositiveSets::PositiveSets(const InteractionsView& v) {
  items_.reserve(v.num_interactions());
  offsets_.reserve(size_t{v.num_users()} + 1);
  for (uint32_t u = 0; u < v.num_users(); ++u) {
    const auto h = v.history(u);
    const size_t start = items_.size();
    items_.insert(items_.end(), h.begin(), h.end());
    std::sort(items_.begin() + static_cast<ptrdiff_t>(start), items_.end());
    items_.erase(std::unique(items_.begin() + static_cast<ptrdiff_t>(start), items_.end()), items_.end());
    offsets_.push_back(items_.size());
  }
  items_.shrink_to_fit();
}

bool PositiveSets::contains(uint32_t user, uint32_t item) const {
  const auto s = of(user);
  return std::binary_search(s.begin(), s.end(), item);
}

uint32_t nth_negative(uint64_t r, std::span<const uint32_t> positives) {
  // Start from the r-th item as if nothing were rated; every positive at or below the
  // candidate pushes it one further (positives ascending, so one pass suffices).
  uint64_t v = r + 1;
  for (uint32_t p : positives) {
    if (p > v) break;
    ++v;
  }
  return static_cast<uint32_t>(v);
}

NegativeSampler::NegativeSampler(uint32_t num_items, uint64_t seed) : num_items_(num_items), seed_(seed) {
  FT_CHECK(num_items >= 1, "a negative sampler needs items");
}

uint32_t NegativeSampler::draw(uint64_t& state, std::span<const uint32_t> pos) const {
  const uint64_t n = num_items_;
  // Dense users: rejection would mostly fail, so go straight to the exact rank method.
  if (pos.size() * 2 < n) {
    for (int t = 0; t < kMaxTries; ++t) {
      const auto item = static_cast<uint32_t>(1 + below(splitmix64(state), n));
      if (!std::binary_search(pos.begin(), pos.end(), item)) return item;
    }
  }
  return nth_negative(below(splitmix64(state), n - pos.size()), pos);
}

void NegativeSampler::sample(uint32_t user, uint64_t step, std::span<const uint32_t> pos,
                             std::span<uint32_t> out) const {
  check_positives(user, pos, num_items_);
  const uint64_t base = mix(mix(mix(seed_ ^ kTrainTag) ^ user) ^ step);
  for (size_t j = 0; j < out.size(); ++j) {
    // A stream per negative: negative j does not depend on how many tries j-1 needed.
    uint64_t state = mix(base + j);
    out[j] = draw(state, pos);
  }
}

void NegativeSampler::eval_negatives(uint32_t user, std::span<const uint32_t> pos, std::span<uint32_t> out) const {
  check_positives(user, pos, num_items_);
  const uint64_t free = num_items_ - pos.size();
  FT_USER_CHECK(free >= out.size(), "user ", user, " has rated ", pos.size(), " of ", num_items_,
                " items: fewer than the ", out.size(), " unrated items sampled evaluation needs");
  uint64_t state = mix(mix(seed_ ^ kEvalTag) ^ user);
  if (free <= 4 * out.size()) {
    // Few negatives left: a partial Fisher-Yates over the ranks of all of them.
    std::vector<uint32_t> ranks(free);
    for (uint32_t r = 0; r < free; ++r) ranks[r] = r;
    for (size_t j = 0; j < out.size(); ++j) {
      std::swap(ranks[j], ranks[j + below(splitmix64(state), free - j)]);
      out[j] = nth_negative(ranks[j], pos);
    }
    return;
  }
  // Many negatives: draw and reject repeats (each repeat has probability below 1/4).
  for (size_t j = 0; j < out.size(); ++j) {
    uint32_t item;
    do item = draw(state, pos);
    while (std::find(out.begin(), out.begin() + static_cast<ptrdiff_t>(j), item) != out.begin() + static_cast<ptrdiff_t>(j));
    out[j] = item;
  }
}

}  // namespace ft
