// Ranking metrics of a recommender (issue 15): HR@10 and NDCG@10 of each user's held-out item
// among candidates, averaged over users, and the popularity baseline's scores.
//
// Rank of the held-out positive among its candidates = the number of candidates scoring
// strictly higher + half the number scoring exactly the same (ties counted half: a model that
// scores everything alike gets the expected rank of a random order, not rank 0). A NaN score
// never helps: a NaN positive ranks below every candidate (rank = candidates), a NaN candidate
// counts as higher than the positive. The rank may thus be fractional (x.5).
//   HR@10   = 1 if rank < 10, else 0
//   NDCG@10 = 1 / log2(rank + 2) if rank < 10, else 0 (one relevant item: IDCG = 1)
// Candidates are SASRec's 100 sampled negatives (NegativeSampler::eval_negatives), or, for
// full ranking, every item 1..N except the user's other positives (whole history).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "data/interactions.h"
#include "data/negative_sampler.h"

namespace ft {

struct RankingMetrics {
  double hr10 = 0, ndcg10 = 0;  // means over users (0 when there are none)
  int64_t users = 0;
};

inline constexpr int kRankingCutoff = 10;

// The rank defined above.
double ranking_rank(float positive, std::span<const float> candidates);
// Full ranking: scores indexed by dense item (size N+1, index 0 padding, ignored); the rank
// of `target` among items 1..N that are neither target nor in `excluded` (sorted, unique; may
// contain target).
double full_ranking_rank(std::span<const float> item_scores, uint32_t target, std::span<const uint32_t> excluded);

// Sums per-user ranks into HR@10 / NDCG@10. add(a) of another accumulator merges it (threads,
// ranks): the sums are exact per user, so the order only changes the last bits.
class RankingAccumulator {
 public:
  // Adds one user with the given rank; returns it.
  double add_rank(double rank);
  // Adds one user: the held-out positive's score and its candidates' scores.
  double add(float positive, std::span<const float> candidates) { return add_rank(ranking_rank(positive, candidates)); }
  void add(const RankingAccumulator& other);
  RankingMetrics result() const;
  // Its sums (hits, NDCG, users), to add over ranks, and an accumulator holding such sums.
  std::array<double, 3> sums() const { return {hits_, ndcg_, static_cast<double>(users_)}; }
  static RankingAccumulator of_sums(std::span<const double, 3> s);

 private:
  double hits_ = 0, ndcg_ = 0;
  int64_t users_ = 0;
};

// Each item's train popularity as a score (size N+1; index 0, the padding item, scores 0).
std::vector<float> popularity_scores(const InteractionsView& v);

enum class HeldOut { kValid, kTest };

// Ranks every user's held-out item (validation or test) with the item scores score_user fills
// (size N+1, indexed by dense item) and accumulates the metrics. sampler: sampled ranking
// against its eval_negatives of the user (the same 100 every call); nullptr: full ranking
// against every item except the user's other positives.
RankingMetrics evaluate_ranking(const InteractionsView& v, const PositiveSets& positives, const NegativeSampler* sampler,
                                HeldOut held_out,
                                const std::function<void(uint32_t user, std::span<float> scores)>& score_user);

}  // namespace ft
