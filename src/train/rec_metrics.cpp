#include "train/rec_metrics.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ft {

double ranking_rank(float positive, std::span<const float> candidates) {
  if (std::isnan(positive)) return static_cast<double>(candidates.size());
  uint64_t higher = 0, ties = 0;
  for (float c : candidates) {
    if (std::isnan(c) || c > positive) ++higher;
    else if (c == positive) ++ties;
  }
  return static_cast<double>(higher) + 0.5 * static_cast<double>(ties);
}

double full_ranking_rank(std::span<const float> item_scores, uint32_t target, std::span<const uint32_t> excluded) {
  FT_CHECK(target >= 1 && target < item_scores.size(), "full_ranking_rank: target ", target, " outside 1..",
           item_scores.size() - 1);
  const float positive = item_scores[target];
  uint64_t higher = 0, ties = 0, candidates = 0;
  size_t e = 0;
  for (uint32_t i = 1; i < item_scores.size(); ++i) {
    while (e < excluded.size() && excluded[e] < i) ++e;
    if (i == target || (e < excluded.size() && excluded[e] == i)) continue;
    ++candidates;
    const float c = item_scores[i];
    if (std::isnan(c) || c > positive) ++higher;
    else if (c == positive) ++ties;
  }
  if (std::isnan(positive)) return static_cast<double>(candidates);
  return static_cast<double>(higher) + 0.5 * static_cast<double>(ties);
}

double RankingAccumulator::add_rank(double rank) {
  FT_CHECK(rank >= 0, "RankingAccumulator: negative rank ", rank);
  ++users_;
  if (rank < kRankingCutoff) {
    hits_ += 1;
    ndcg_ += 1.0 / std::log2(rank + 2.0);
  }
  return rank;
}

void RankingAccumulator::add(const RankingAccumulator& other) {
  hits_ += other.hits_;
  ndcg_ += other.ndcg_;
  users_ += other.users_;
}

RankingAccumulator RankingAccumulator::of_sums(std::span<const double, 3> s) {
  RankingAccumulator a;
  a.hits_ = s[0];
  a.ndcg_ = s[1];
  a.users_ = std::llround(s[2]);
  return a;
}

RankingMetrics RankingAccumulator::result() const {
  RankingMetrics m;
  m.users = users_;
  if (users_ > 0) {
    m.hr10 = hits_ / static_cast<double>(users_);
    m.ndcg10 = ndcg_ / static_cast<double>(users_);
  }
  return m;
}

std::vector<float> popularity_scores(const InteractionsView& v) {
  std::vector<float> s(static_cast<size_t>(v.num_items()) + 1, 0.0f);
  for (uint32_t i = 1; i <= v.num_items(); ++i) s[i] = static_cast<float>(v.popularity(i));
  return s;
}

RankingMetrics evaluate_ranking(const InteractionsView& v, const PositiveSets& positives, const NegativeSampler* sampler,
                                HeldOut held_out,
                                const std::function<void(uint32_t user, std::span<float> scores)>& score_user) {
  FT_CHECK(positives.num_users() == v.num_users(), "evaluate_ranking: positive sets of ", positives.num_users(),
           " users for ", v.num_users());
  FT_CHECK(!sampler || sampler->num_items() == v.num_items(), "evaluate_ranking: sampler over ",
           sampler ? sampler->num_items() : 0, " items for ", v.num_items());
  RankingAccumulator acc;
  std::vector<float> scores(static_cast<size_t>(v.num_items()) + 1);
  std::vector<uint32_t> negatives(sampler ? NegativeSampler::kEvalNegatives : 0);
  std::vector<float> candidates(negatives.size());
  for (uint32_t u = 0; u < v.num_users(); ++u) {
    std::fill(scores.begin(), scores.end(), 0.0f);
    score_user(u, scores);
    const uint32_t target = held_out == HeldOut::kTest ? v.test_item(u) : v.valid_item(u);
    if (sampler) {
      sampler->eval_negatives(u, positives.of(u), negatives);
      for (size_t j = 0; j < negatives.size(); ++j) candidates[j] = scores[negatives[j]];
      acc.add(scores[target], candidates);
    } else {
      acc.add_rank(full_ranking_rank(scores, target, positives.of(u)));
    }
  }
  return acc.result();
}

}  // namespace ft
