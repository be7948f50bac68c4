// ParamTable::init_params: drawn in parallel blocks, yet the same values for any thread count,
// each entry's first block the entry's own stream, and normal with the entry's deviation; any
// range of the layout drawn alone (init_range) holds the whole layout's values.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "models/param_table.h"

namespace ft {
namespace {

ParamTable two_block_table() {
  ParamTable t;
  t.add("small", {3, 5}, false, false, ParamInit::ones);
  // Two and a half blocks: a ragged last block, drawn by several threads.
  t.add("big", {5, ParamTable::kInitBlock / 2}, true, false, ParamInit::normal, 0.02f);
  t.add("bias", {7}, false, false, ParamInit::zeros);
  t.add("last", {9}, true, false, ParamInit::normal, 0.5f);
  return t;
}

std::vector<float> init_with_threads(const ParamTable& t, int threads, uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(t.total()), -1.f);
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  t.init_params(seed, host.data());
  omp_set_num_threads(before);
  return host;
}

TEST(ParamTable, InitIsTheSameForAnyThreadCount) {
  const ParamTable t = two_block_table();
  const std::vector<float> one = init_with_threads(t, 1, 7);
  EXPECT_EQ(init_with_threads(t, 4, 7), one);
  EXPECT_NE(init_with_threads(t, 4, 8), one);  // the seed matters
}

TEST(ParamTable, InitDrawsEachBlockFromItsOwnStreamTheFirstBeingTheEntrys) {
  const ParamTable t = two_block_table();
  const std::vector<float> host = init_with_threads(t, 3, 11);
  const ParamEntry& big = t.at("big");
  const float* p = host.data() + big.offset;
  // Block 0 is the entry's stream (seed * 1000003 + index), as when one stream drew each entry.
  Rng entry(11 * 1000003ull + 1);
  for (int64_t k = 0; k < ParamTable::kInitBlock; ++k)
    ASSERT_EQ(p[k], static_cast<float>(entry.normal()) * 0.02f) << k;
  // Block 1 starts a stream of its own, not the continuation of block 0's.
  EXPECT_NE(p[ParamTable::kInitBlock], static_cast<float>(entry.normal()) * 0.02f);
  // Every element written, normal with the entry's deviation over the blocks.
  double sum = 0, sq = 0;
  for (int64_t k = 0; k < big.count; ++k) sum += p[k], sq += double(p[k]) * p[k];
  const double mean = sum / big.count, sd = std::sqrt(sq / big.count - mean * mean);
  EXPECT_NEAR(mean, 0.0, 1e-4);
  EXPECT_NEAR(sd, 0.02, 1e-4);
  for (float v : std::vector<float>(host.begin() + t.at("small").offset, host.begin() + t.at("small").offset + 15))
    EXPECT_EQ(v, 1.f);
  for (int64_t k = 0; k < 7; ++k) EXPECT_EQ(host[t.at("bias").offset + k], 0.f);
  for (int64_t k = 0; k < 9; ++k) EXPECT_NE(host[t.at("last").offset + k], -1.f);
}


// A rank draws its weights a block at a time (ModelRuntime::init_params): every range must
// hold exactly the whole layout's values, also one that starts or ends inside a block of a
// normal entry (its stream skips the draws before it) or inside a filled entry.
TEST(ParamTable, AnyRangeHoldsTheWholeLayoutsValues) {
  const ParamTable t = two_block_table();
  const std::vector<float> whole = init_with_threads(t, 2, 5);
  const int64_t B = ParamTable::kInitBlock, big = t.at("big").offset;
  const std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, t.total()}, {0, 1}, {3, 20}, {big + 17, 5}, {big + B - 2, 7}, {big + 2 * B + 123, B / 2 - 123},
      {big + B, B}, {t.at("bias").offset + 2, 12}, {t.total() - 1, 1}, {t.total() - 20, 20}};
  for (auto [begin, count] : ranges) {
    std::vector<float> part(static_cast<size_t>(count), -1.f);
    t.init_range(5, begin, count, part.data());
    ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + begin, part.size() * 4)) << begin << " +" << count;
  }
  // Blocks of an awkward size laid end to end are the whole layout.
  std::vector<float> tiled(whole.size(), -1.f);
  for (int64_t b = 0; b < t.total(); b += 999983) t.init_range(5, b, std::min<int64_t>(999983, t.total() - b), tiled.data() + b);
  EXPECT_EQ(tiled, whole);
  std::vector<float> out(2);
  EXPECT_THROW(t.init_range(5, t.total() - 1, 2, out.data()), InternalError);  // past the end
}

}  // namespace
}  // namespace ft
