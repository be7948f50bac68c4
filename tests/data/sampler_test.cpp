#include "core/batch.h"
#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "test_util.h"

namespace ft {
namespace {

using test::expect_user_error;

TEST(BatchSampler, PermutationIsBijection) {
  for (uint64_t n : {1ull, 2ull, 3ull, 7ull, 8ull, 1000ull, 4097ull}) {
    BatchSampler s(n, 1, 0, 1, 42, true);
    for (uint64_t epoch : {0ull, 1ull, 5ull}) {
      std::vector<char> seen(n, 0);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t p = s.permute(i, epoch);
        ASSERT_LT(p, n);
        ASSERT_FALSE(seen[p]) << "n=" << n << " duplicate " << p;
        seen[p] = 1;
      }
    }
  }
}

TEST(BatchSampler, DeterministicAndDiffersByEpochAndSeed) {
  const uint64_t n = 1000;
  BatchSampler a(n, 10, 0, 1, 7, true), b(n, 10, 0, 1, 7, true), c(n, 10, 0, 1, 8, true);
  std::vector<uint64_t> a0, b0, a1, c0;
  for (uint64_t i = 0; i < n; ++i) {
    a0.push_back(a.permute(i, 0));
    b0.push_back(b.permute(i, 0));
    a1.push_back(a.permute(i, 1));
    c0.push_back(c.permute(i, 0));
  }
  EXPECT_EQ(a0, b0);
  EXPECT_NE(a0, a1);
  EXPECT_NE(a0, c0);
  // Actually shuffled: few fixed points.
  int fixed = 0;
  for (uint64_t i = 0; i < n; ++i) fixed += a0[i] == i;
  EXPECT_LT(fixed, 20);
}

TEST(BatchSampler, NoShuffleIsIdentity) {
  BatchSampler s(10, 5, 0, 1, 3, false);
  std::vector<uint64_t> out(5);
  s.next_batch(out);
  EXPECT_EQ(out, (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  s.next_batch(out);
  EXPECT_EQ(out, (std::vector<uint64_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(s.epoch(), 1u);
}

// G does not divide N: the epochs' orders make one stream, a batch straddles two epochs, and
// every epoch is every sample once (nothing dropped), whatever the world size.
TEST(BatchSampler, EveryEpochIsEverySampleOnceWhenTheBatchDoesNotDivideTheData) {
  const uint64_t n = 103, g = 10;
  EXPECT_EQ(BatchSampler(n, g, 0, 1, 1, true).steps_for_epochs(3), 31u);  // ceil(309 / 10)
  for (int world : {1, 2, 5}) {
    std::vector<BatchSampler> ranks;
    for (int r = 0; r < world; ++r) ranks.emplace_back(n, g, r, world, 1, true);
    std::vector<std::vector<uint64_t>> by_epoch(4);
    for (int step = 0; step < 31; ++step) {  // 310 positions: epochs 0-2 and 1 sample of 3
      for (auto& s : ranks) {
        std::vector<uint64_t> out(g / world), ep(g / world);
        s.next_batch(out, ep);
        for (size_t j = 0; j < out.size(); ++j) by_epoch[ep[j]].push_back(out[j]);
      }
    }
    for (uint64_t e = 0; e < 3; ++e) {
      auto all = by_epoch[e];
      ASSERT_EQ(all.size(), n) << "world " << world << " epoch " << e;
      std::sort(all.begin(), all.end());
      EXPECT_TRUE(std::adjacent_find(all.begin(), all.end()) == all.end()) << "world " << world << " epoch " << e;
      EXPECT_EQ(all.back(), n - 1);
    }
    ASSERT_EQ(by_epoch[3].size(), 1u);  // 310 - 3 * 103
    EXPECT_EQ(by_epoch[3][0], ranks[0].permute(0, 3));  // the next epoch starts at its first position
    EXPECT_EQ(ranks[0].cursor(), (DataCursor{3, 1}));
    EXPECT_NEAR(ranks[0].epochs_done(), 3 + 1.0 / 103, 1e-12);
  }
}

// A step's samples straddle the epoch boundary: the end of epoch 0's order, then the start of
// epoch 1's, each with its own epoch (the loader reads a visit's negatives/noise by it).
TEST(BatchSampler, ABatchAcrossTheEpochBoundaryTakesEachSampleFromItsOwnEpoch) {
  const uint64_t n = 25, g = 10;
  BatchSampler s(n, g, 0, 1, 4, true);
  std::vector<uint64_t> out(g), ep(g);
  s.next_batch(out, ep);
  s.next_batch(out, ep);
  s.next_batch(out, ep);  // positions 20-29: 20-24 of epoch 0, 0-4 of epoch 1
  for (uint64_t j = 0; j < g; ++j) {
    const uint64_t want_epoch = j < 5 ? 0 : 1, pos = j < 5 ? 20 + j : j - 5;
    EXPECT_EQ(ep[j], want_epoch) << j;
    EXPECT_EQ(out[j], s.permute(pos, want_epoch)) << j;
  }
  EXPECT_EQ(s.cursor(), (DataCursor{1, 5}));
}

TEST(BatchSampler, RanksPartitionGlobalBatch) {
  const uint64_t n = 500, g = 8;
  BatchSampler one(n, g, 0, 1, 99, true);
  std::vector<uint64_t> ref(g);
  for (int world : {2, 3, 4, 5}) {  // 3 and 5 do not divide 8: shares 3 3 2 and 2 2 2 1 1
    std::vector<BatchSampler> ranks;
    for (int r = 0; r < world; ++r) ranks.emplace_back(n, g, r, world, 99, true);
    BatchSampler single(n, g, 0, 1, 99, true);
    for (int step = 0; step < 70; ++step) {  // crosses an epoch boundary (62 steps/epoch)
      single.next_batch(ref);
      std::vector<uint64_t> cat;
      for (auto& s : ranks) {
        std::vector<uint64_t> part(s.local_batch());
        ASSERT_EQ(s.local_batch(), rank_share(g, world, static_cast<int>(&s - ranks.data())));
        s.next_batch(part);
        cat.insert(cat.end(), part.begin(), part.end());
      }
      ASSERT_EQ(cat, ref) << "world " << world << " step " << step;
    }
  }
}

TEST(BatchSampler, CursorResume) {
  const uint64_t n = 300, g = 12;
  BatchSampler a(n, g, 1, 2, 5, true);
  std::vector<uint64_t> out(6);
  for (int i = 0; i < 30; ++i) a.next_batch(out);  // 25 steps/epoch: now in epoch 1
  const DataCursor c = a.cursor();
  EXPECT_EQ(c.epoch, 1u);
  EXPECT_EQ(c.sample_in_epoch, 60u);
  BatchSampler b(n, g, 1, 2, 5, true);
  b.set_cursor(c);
  std::vector<uint64_t> oa(6), ob(6);
  for (int i = 0; i < 40; ++i) {
    a.next_batch(oa);
    b.next_batch(ob);
    ASSERT_EQ(oa, ob);
  }
  EXPECT_EQ(a.cursor(), b.cursor());
}

// The cursor counts samples, so a run resumed with another global batch continues at the very
// sample it stopped at: the stream of samples is the same for any G.
TEST(BatchSampler, AnotherGlobalBatchContinuesTheSameStream) {
  const uint64_t n = 97;
  BatchSampler ref(n, 1, 0, 1, 11, true);
  std::vector<uint64_t> stream;
  for (int i = 0; i < 300; ++i) {
    std::vector<uint64_t> one(1);
    ref.next_batch(one);
    stream.push_back(one[0]);
  }
  BatchSampler a(n, 16, 0, 1, 11, true);
  std::vector<uint64_t> got, out(16);
  for (int i = 0; i < 9; ++i) {  // 144 samples: into epoch 1
    a.next_batch(out);
    got.insert(got.end(), out.begin(), out.end());
  }
  BatchSampler b(n, 12, 0, 1, 11, true);
  b.set_cursor(a.cursor());
  EXPECT_EQ(a.cursor(), (DataCursor{1, 47}));
  std::vector<uint64_t> out12(12);
  for (int i = 0; i < 13; ++i) {
    b.next_batch(out12);
    got.insert(got.end(), out12.begin(), out12.end());
  }
  ASSERT_EQ(got.size(), 300u);
  EXPECT_EQ(got, stream);
}

TEST(BatchSampler, Errors) {
  expect_user_error([] { BatchSampler s(10, 16, 0, 1, 0, true, "--data-path"); },
                    {"global batch 16", "larger than the 10 samples", "--data-path"});
  expect_user_error([] { BatchSampler s(100, 3, 0, 4, 0, true); },
                    {"--global-batch-size", "smaller than the 4 ranks"});
  BatchSampler s(100, 10, 0, 1, 0, true);
  expect_user_error([&] { s.set_cursor({0, 100}); }, {"cursor at sample 100", "100 samples of this data"});
  s.set_cursor({0, 99});  // the last position of an epoch is a valid place to continue
  expect_user_error([&] { (void)s.steps_for_epochs(~0ull / 50); }, {"--epochs", "overflow"});
}

}  // namespace
}  // namespace ft
