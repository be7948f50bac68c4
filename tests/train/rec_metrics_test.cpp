// Ranking metrics (train/rec_metrics.h): ranks, HR@10 and NDCG@10 computed by hand, ties,
// and the popularity baseline on ML-1M-shaped synthetic data against random scores.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "data/interactions.h"
#include "data/movielens.h"
#include "data/negative_sampler.h"
#include "train/rec_metrics.h"

namespace ft {
namespace {

using F = std::vector<float>;

TEST(RecMetrics, RanksByHand) {
  // 0.9 and 0.7 above, one tie (half): 2.5
  EXPECT_EQ(ranking_rank(0.5f, F{0.9f, 0.1f, 0.5f, 0.7f}), 2.5);
  EXPECT_EQ(ranking_rank(1.0f, F{0.9f, 0.1f, 0.5f, 0.7f}), 0.0);
  EXPECT_EQ(ranking_rank(0.0f, F{0.9f, 0.1f, 0.5f, 0.7f}), 4.0);
  EXPECT_EQ(ranking_rank(0.3f, F{}), 0.0);
  // every score alike: the middle of the list, not the top
  EXPECT_EQ(ranking_rank(2.0f, F(100, 2.0f)), 50.0);
  // NaN never helps: a NaN candidate is above, a NaN positive is last
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(ranking_rank(0.5f, F{nan, 0.1f}), 1.0);
  EXPECT_EQ(ranking_rank(nan, F{0.1f, 0.2f, 0.3f}), 3.0);
}

TEST(RecMetrics, HitRateAndNdcgByHand) {
  RankingAccumulator a;
  a.add_rank(0);   // hit, NDCG 1
  a.add_rank(1);   // hit, 1/log2(3)
  a.add_rank(12);  // miss
  RankingMetrics m = a.result();
  EXPECT_EQ(m.users, 3);
  EXPECT_NEAR(m.hr10, 2.0 / 3.0, 1e-15);
  EXPECT_NEAR(m.ndcg10, 0.5436432511904858, 1e-15);

  // the cutoff: rank 9 is the last hit, rank 10 the first miss; 9.5 (a tie) still a hit
  RankingAccumulator b;
  b.add_rank(9);
  EXPECT_NEAR(b.result().ndcg10, 0.2890648263178879, 1e-15);
  EXPECT_EQ(b.result().hr10, 1.0);
  RankingAccumulator c;
  c.add_rank(10);
  EXPECT_EQ(c.result().hr10, 0.0);
  EXPECT_EQ(c.result().ndcg10, 0.0);
  RankingAccumulator d;
  d.add_rank(9.5);
  EXPECT_EQ(d.result().hr10, 1.0);
  EXPECT_NEAR(d.result().ndcg10, 0.28380372261682446, 1e-15);

  // from scores, and merging another accumulator
  RankingAccumulator e;
  EXPECT_EQ(e.add(0.5f, F{0.9f, 0.5f, 0.1f, 0.5f}), 2.0);  // 1 above + 2 ties / 2
  EXPECT_NEAR(e.result().ndcg10, 0.5, 1e-15);              // 1/log2(4)
  e.add(a);
  EXPECT_EQ(e.result().users, 4);
  EXPECT_NEAR(e.result().hr10, 0.75, 1e-15);
  EXPECT_NEAR(e.result().ndcg10, (0.5 + 1 + 0.6309297535714575) / 4, 1e-15);
  EXPECT_EQ(RankingAccumulator().result().users, 0);
  EXPECT_EQ(RankingAccumulator().result().hr10, 0.0);
}

TEST(RecMetrics, FullRankingSkipsOtherPositivesAndPadding) {
  // items 1..5; index 0 is padding (its high score must not count)
  const F s{100.0f, 0.1f, 0.9f, 0.5f, 0.8f, 0.5f};
  // target 3 (0.5); 2 is another positive: candidates 1 (0.1), 4 (0.8), 5 (0.5 tie) -> 1.5
  EXPECT_EQ(full_ranking_rank(s, 3, std::vector<uint32_t>{2, 3}), 1.5);
  // nothing excluded: 2 and 4 above, 5 tied -> 2.5
  EXPECT_EQ(full_ranking_rank(s, 3, std::vector<uint32_t>{}), 2.5);
  EXPECT_EQ(full_ranking_rank(s, 2, std::vector<uint32_t>{1, 2, 3, 4, 5}), 0.0);
}

TEST(RecMetrics, PopularityScoresAreTrainCounts) {
  // popularity counts the train parts only (never a validation or test item)
  std::vector<RawInteraction> raw = {
      {1, 10, 1}, {1, 20, 2}, {1, 30, 3}, {1, 40, 4},  // train 10, 20; valid 30; test 40
      {2, 10, 1}, {2, 30, 2}, {2, 20, 3},              // train 10; valid 30; test 20
  };
  const Interactions x = build_interactions(std::move(raw));
  const std::vector<float> p = popularity_scores(x.view());
  // dense items: 10 -> 1, 20 -> 2, 30 -> 3, 40 -> 4
  EXPECT_EQ(p, (F{0, 2, 1, 0, 0}));
}

// ML-1M's shape at a sixth of the users (speed): popularity far above random on sampled
// ranking, random scores near 10/101, constant scores never a hit (ties count half: rank 50).
TEST(RecMetrics, PopularityBeatsRandomOnSyntheticMovieLens) {
  SyntheticSpec spec = movielens_1m_spec(3);
  spec.users = 1000;
  const Interactions x = build_interactions(synthetic_movielens(spec));
  const InteractionsView v = x.view();
  ASSERT_GT(v.num_users(), 900u);
  const PositiveSets pos(v);
  const NegativeSampler sampler(v.num_items(), 7);
  const std::vector<float> pop = popularity_scores(v);
  const auto popularity = [&pop](uint32_t, std::span<float> s) { std::copy(pop.begin(), pop.end(), s.begin()); };
  const RankingMetrics m = evaluate_ranking(v, pos, &sampler, HeldOut::kTest, popularity);
  EXPECT_EQ(m.users, v.num_users());
  const double random_hr = 10.0 / 101.0;
  EXPECT_GT(m.hr10, 3 * random_hr) << m.hr10;
  RecordProperty("popularity_sampled_hr10", std::to_string(m.hr10));
  EXPECT_GT(m.ndcg10, m.hr10 * 0.3);
  EXPECT_LE(m.ndcg10, m.hr10);

  // scores from a hash of (user, item): a random ranking
  const auto random = [](uint32_t u, std::span<float> s) {
    for (size_t i = 0; i < s.size(); ++i) {
      uint64_t h = (static_cast<uint64_t>(u) << 32 | i) * 0x9E3779B97F4A7C15ull;
      h ^= h >> 29;
      h *= 0xBF58476D1CE4E5B9ull;
      h ^= h >> 32;
      s[i] = static_cast<float>(h >> 40);
    }
  };
  const RankingMetrics r = evaluate_ranking(v, pos, &sampler, HeldOut::kTest, random);
  EXPECT_NEAR(r.hr10, random_hr, 0.04) << r.hr10;
  EXPECT_GT(m.hr10, r.hr10 + 0.15);

  const auto constant = [](uint32_t, std::span<float> s) { std::fill(s.begin(), s.end(), 1.0f); };
  const RankingMetrics c = evaluate_ranking(v, pos, &sampler, HeldOut::kValid, constant);
  EXPECT_EQ(c.hr10, 0.0);
  EXPECT_EQ(c.ndcg10, 0.0);

  // full ranking is harder than 100 negatives, and still beats random's 10/N by far
  const RankingMetrics f = evaluate_ranking(v, pos, nullptr, HeldOut::kTest, popularity);
  EXPECT_LT(f.hr10, m.hr10);
  EXPECT_GT(f.hr10, 5 * 10.0 / v.num_items()) << f.hr10;
}

}  // namespace
}  // namespace ft
