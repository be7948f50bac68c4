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

TEST(BatchSampler, EpochCoversEverySampleOnce) {
  const uint64_t n = 103, g = 10;  // 10 steps, 3 samples dropped
  BatchSampler s(n, g, 0, 1, 1, true);
  EXPECT_EQ(s.steps_per_epoch(), 10u);
  std::vector<uint64_t> out(g), all;
  for (int step = 0; step < 10; ++step) {
    s.next_batch(out);
    all.insert(all.end(), out.begin(), out.end());
  }
  EXPECT_EQ(s.epoch(), 1u);
  EXPECT_EQ(s.cursor().step_in_epoch, 0u);
  std::sort(all.begin(), all.end());
  EXPECT_TRUE(std::adjacent_find(all.begin(), all.end()) == all.end());
  EXPECT_EQ(all.size(), 100u);
}

TEST(BatchSampler, RanksPartitionGlobalBatch) {
  const uint64_t n = 500, g = 8;
  BatchSampler one(n, g, 0, 1, 99, true);
  std::vector<uint64_t> ref(g);
  for (int world : {2, 4}) {
    std::vector<BatchSampler> ranks;
    for (int r = 0; r < world; ++r) ranks.emplace_back(n, g, r, world, 99, true);
    BatchSampler single(n, g, 0, 1, 99, true);
    for (int step = 0; step < 70; ++step) {  // crosses an epoch boundary (62 steps/epoch)
      single.next_batch(ref);
      std::vector<uint64_t> cat;
      for (auto& s : ranks) {
        std::vector<uint64_t> part(g / world);
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
  EXPECT_EQ(c.step_in_epoch, 5u);
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

TEST(BatchSampler, Errors) {
  expect_user_error([] { BatchSampler s(10, 16, 0, 1, 0, true, "--data-path"); },
                    {"global batch 16", "larger than the 10 samples", "--data-path"});
  expect_user_error([] { BatchSampler s(100, 10, 0, 4, 0, true); },
                    {"--global-batch-size", "divisible", "4"});
  BatchSampler s(100, 10, 0, 1, 0, true);
  expect_user_error([&] { s.set_cursor({0, 10}); }, {"cursor", "10 steps per epoch"});
}

}  // namespace
}  // namespace ft
