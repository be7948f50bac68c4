// The recommender task's samples (train/rec_task.h): a training sample is the user's most
// recent train items shifted by one, right-padded, with negatives that are never the user's
// items, the same for the same epoch and fresh in the next; an evaluation sample holds the
// history before the held-out item with that item as its only target; ranking with a model
// that scores by popularity reproduces the popularity baseline.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "data/interactions.h"
#include "data/negative_sampler.h"
#include "train/rec_task.h"

namespace ft {
namespace {

// user u rates 3 + 2u items (times increasing); two more users (the last two dense ids)
// rate items 1..150 and 151..300, so 300 items exist and every user has 100 unrated ones.
Interactions make_interactions(uint32_t users) {
  std::vector<RawInteraction> raw;
  for (uint32_t u = 0; u < users; ++u)
    for (uint32_t k = 0; k < 3 + 2 * u; ++k) raw.push_back(RawInteraction{u + 1, 1 + (k * 7 + u) % 300, int64_t(k)});
  for (uint32_t i = 1; i <= 300; ++i) raw.push_back(RawInteraction{i <= 150 ? 10001u : 10002u, i, int64_t(i)});
  return build_interactions(std::move(raw));
}

struct Sample {
  std::vector<int32_t> tok, tgt, neg;
  explicit Sample(int T, int K) : tok(T), tgt(T), neg(static_cast<size_t>(T) * K) {}
  std::vector<void*> dst() { return {tok.data(), tgt.data(), neg.data()}; }
};

TEST(RecTrainSource, SamplesAreShiftedHistoriesWithFreshNegativesThatAreNeverPositives) {
  const Interactions x = make_interactions(12);
  const InteractionsView v = x.view();
  const PositiveSets pos(v);
  const NegativeSampler sampler(v.num_items(), 5);
  const int T = 6, K = 3;
  RecTrainSource src(v, pos, sampler, T, K);
  // user 0 has 1 train item (3 ratings): no sample; every other user has one
  EXPECT_EQ(src.num_samples(), 11u + 2);
  for (uint64_t i = 0; i < 11; ++i) {
    const uint32_t u = static_cast<uint32_t>(i + 1);
    Sample s(T, K), again(T, K), next(T, K);
    auto d = s.dst();
    src.read_visit(i, 3, d);
    auto train = v.train(u);
    const size_t n = std::min<size_t>(train.size(), T + 1) - 1;  // positions with a target
    auto recent = train.last(n + 1);
    for (size_t t = 0; t < static_cast<size_t>(T); ++t) {
      EXPECT_EQ(s.tok[t], t < n ? static_cast<int32_t>(recent[t]) : 0) << u << " " << t;
      EXPECT_EQ(s.tgt[t], t < n ? static_cast<int32_t>(recent[t + 1]) : -1) << u << " " << t;
    }
    for (int32_t g : s.neg) {
      EXPECT_GE(g, 1);
      EXPECT_FALSE(pos.contains(u, static_cast<uint32_t>(g))) << "negative " << g << " is a positive of " << u;
    }
    auto d2 = again.dst();
    src.read_visit(i, 3, d2);
    EXPECT_EQ(again.neg, s.neg) << "the same epoch draws the same negatives";
    auto d3 = next.dst();
    src.read_visit(i, 4, d3);
    EXPECT_EQ(next.tok, s.tok);
    EXPECT_NE(next.neg, s.neg) << "the next epoch draws fresh negatives";
    const uint64_t one[1] = {i};
    EXPECT_EQ(src.positions(one), n);
  }
}

TEST(RecEvalSource, TheHeldOutItemIsTheOnlyTargetAfterItsHistory) {
  const Interactions x = make_interactions(6);
  const InteractionsView v = x.view();
  const PositiveSets pos(v);
  const NegativeSampler sampler(v.num_items(), 5);
  const int T = 4, K = 2;
  for (HeldOut held : {HeldOut::kValid, HeldOut::kTest}) {
    RecEvalSource src(v, pos, sampler, T, K, held);
    EXPECT_EQ(src.num_samples(), 6u + 2);
    for (uint32_t u = 0; u < 6; ++u) {
      Sample s(T, K);
      auto d = s.dst();
      src.read(u, d);
      auto h = v.history(u);
      auto ctx = h.first(h.size() - (held == HeldOut::kValid ? 2 : 1));
      if (ctx.size() > static_cast<size_t>(T)) ctx = ctx.last(T);
      const uint32_t target = held == HeldOut::kValid ? v.valid_item(u) : v.test_item(u);
      EXPECT_EQ(src.target(u), target);
      for (size_t t = 0; t < static_cast<size_t>(T); ++t) {
        EXPECT_EQ(s.tok[t], t < ctx.size() ? static_cast<int32_t>(ctx[t]) : 0);
        EXPECT_EQ(s.tgt[t], t + 1 == ctx.size() ? static_cast<int32_t>(target) : -1);
      }
      // its negatives are the first K of the evaluation's 100 candidates
      uint32_t all[NegativeSampler::kEvalNegatives];
      sampler.eval_negatives(u, pos.of(u), all);
      for (int k = 0; k < K; ++k) EXPECT_EQ(s.neg[(ctx.size() - 1) * K + k], static_cast<int32_t>(all[k]));
    }
  }
}

// A ranker whose scores are the items' train popularity: the model's numbers must be the
// popularity baseline's, through the same candidates and the same rank code.
class PopularityRanker final : public Ranker {
 public:
  explicit PopularityRanker(const InteractionsView& v) : v_(v), pop_(popularity_scores(v)) {}
  int64_t num_items() const override { return v_.num_items(); }
  int64_t max_history() const override { return 8; }
  int64_t max_rank_batch() const override { return 3; }
  void score_next(std::span<const std::span<const uint32_t>> h, float* out) override {
    for (size_t i = 0; i < h.size(); ++i) std::copy(pop_.begin(), pop_.end(), out + i * pop_.size());
  }

 private:
  const InteractionsView& v_;
  std::vector<float> pop_;
};

TEST(RecRanking, APopularityModelScoresExactlyThePopularityBaseline) {
  const Interactions x = make_interactions(30);
  const InteractionsView v = x.view();
  const PositiveSets pos(v);
  const NegativeSampler sampler(v.num_items(), 11);
  RecEvalSource src(v, pos, sampler, 8, 1, HeldOut::kValid);
  PopularityRanker r(v);
  const RankingResult m = rank_users(r, src, pos, sampler, 0);
  const RankingResult p = rank_by_popularity(v, src, pos, sampler, 0);
  EXPECT_EQ(m.sampled.users, 32);
  EXPECT_DOUBLE_EQ(m.sampled.hr10, p.sampled.hr10);
  EXPECT_DOUBLE_EQ(m.sampled.ndcg10, p.sampled.ndcg10);
  EXPECT_DOUBLE_EQ(m.full.hr10, p.full.hr10);
  EXPECT_DOUBLE_EQ(m.full.ndcg10, p.full.ndcg10);
  // the full ranking is harder than 100 sampled candidates
  EXPECT_LE(p.full.hr10, p.sampled.hr10);
  const RankingResult first10 = rank_users(r, src, pos, sampler, 10);
  EXPECT_EQ(first10.full.users, 10);
}

// Scores that vary with the item and the history's length and last item: about one user in
// ten finds its target in the top 10 of 101, so the metrics are not all 0.
class HashRanker final : public Ranker {
 public:
  explicit HashRanker(int64_t items) : items_(items) {}
  int64_t num_items() const override { return items_; }
  int64_t max_history() const override { return 8; }
  int64_t max_rank_batch() const override { return 3; }
  void score_next(std::span<const std::span<const uint32_t>> h, float* out) override {
    for (size_t i = 0; i < h.size(); ++i)
      for (int64_t j = 0; j <= items_; ++j)
        out[i * (items_ + 1) + j] = float((j * 2654435761u + h[i].size() * 97u + h[i].back() * 13u) % 1009u);
  }

 private:
  int64_t items_;
};

// An evaluation split over two ranks (EvalShard, here without a communicator, so each part
// keeps its own metrics): the parts' users (chunks of 8 x max_rank_batch = 24: 24 and 8 of
// 32) are every user once, and their means weighted by their users are the whole's, which is
// what the sum over ranks computes.
TEST(RecRanking, TwoRanksPartsAddUpToTheWhole) {
  const Interactions x = make_interactions(30);
  const InteractionsView v = x.view();
  const PositiveSets pos(v);
  const NegativeSampler sampler(v.num_items(), 11);
  RecEvalSource src(v, pos, sampler, 8, 1, HeldOut::kValid);
  HashRanker r(v.num_items());
  const RankingResult whole = rank_users(r, src, pos, sampler, 0);
  const RankingResult a = rank_users(r, src, pos, sampler, 0, EvalShard{0, 2, nullptr, {}});
  const RankingResult b = rank_users(r, src, pos, sampler, 0, EvalShard{1, 2, nullptr, {}});
  EXPECT_EQ(a.sampled.users, 24);
  EXPECT_EQ(b.sampled.users, 8);
  EXPECT_GT(whole.sampled.hr10, 0.0);
  EXPECT_GT(whole.sampled.ndcg10, 0.0);
  for (auto m : {&RankingResult::sampled, &RankingResult::full}) {
    const RankingMetrics &wa = a.*m, &wb = b.*m, &w = whole.*m;
    EXPECT_EQ(wa.users + wb.users, w.users);
    EXPECT_NEAR((wa.hr10 * wa.users + wb.hr10 * wb.users) / w.users, w.hr10, 1e-12);
    EXPECT_NEAR((wa.ndcg10 * wa.users + wb.ndcg10 * wb.users) / w.users, w.ndcg10, 1e-12);
  }
}

}  // namespace
}  // namespace ft
