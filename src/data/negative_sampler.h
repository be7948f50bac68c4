// Negative items for BPR training and for sampled evaluation.
//
// A negative of a user is an item in 1..N that is not in the user's whole history (train,
// validation and test items alike: a held-out positive must not be taught as a negative).
//
// Training draws are stateless: negative j of (user, step) is a function of (seed, user, step,
// j) and the user's positives only, computed by hashing (splitmix64), so any thread, rank or
// resumed run gets the same negatives without sharing a generator, and the first k of a draw
// of k+1 are the draw of k. Draws are uniform over the user's negatives and independent (a
// negative may repeat within one draw, as in BPR). Rejection sampling with at most kMaxTries
// tries per negative; a user whose positives cover half the items or more, or who exhausts
// the tries, takes the r-th negative for a uniform r instead (exact, O(|positives|)).
//
// Evaluation (SASRec's protocol): kEvalNegatives = 100 distinct negatives per user, fixed by
// the seed alone (not by the step), so every evaluation of a run ranks the same candidates.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "data/interactions.h"

namespace ft {

// Every user's whole history, sorted and deduplicated (4 bytes per interaction): the sets a
// negative must avoid.
class PositiveSets {
 public:
  explicit PositiveSets(const InteractionsView& v);
  std::span<const uint32_t> of(uint32_t user) const {
    return std::span<const uint32_t>(items_).subspan(offsets_[user], offsets_[user + 1] - offsets_[user]);
  }
  bool contains(uint32_t user, uint32_t item) const;
  uint32_t num_users() const { return static_cast<uint32_t>(offsets_.size() - 1); }

 private:
  std::vector<uint64_t> offsets_{0};
  std::vector<uint32_t> items_;
};

class NegativeSampler {
 public:
  static constexpr int kMaxTries = 32;
  static constexpr size_t kEvalNegatives = 100;

  // FT_CHECKs num_items >= 1.
  NegativeSampler(uint32_t num_items, uint64_t seed);

  uint32_t num_items() const { return num_items_; }
  uint64_t seed() const { return seed_; }

  // Fills out with out.size() negatives of (user, step). positives: the user's items, sorted,
  // unique, each in 1..N (PositiveSets::of). UserError when the user has rated every item.
  void sample(uint32_t user, uint64_t step, std::span<const uint32_t> positives, std::span<uint32_t> out) const;

  // Fills out with out.size() (normally kEvalNegatives) distinct negatives of the user, the
  // same for every call with this seed. UserError naming the user when fewer than out.size()
  // items are left unrated.
  void eval_negatives(uint32_t user, std::span<const uint32_t> positives, std::span<uint32_t> out) const;

 private:
  uint32_t draw(uint64_t& state, std::span<const uint32_t> positives) const;

  uint32_t num_items_;
  uint64_t seed_;
};

// The r-th (0-based) item of 1..N that is not in the sorted, unique positives; r must be below
// N - |positives|. Exposed for the tests.
uint32_t nth_negative(uint64_t r, std::span<const uint32_t> positives);

}  // namespace ft
