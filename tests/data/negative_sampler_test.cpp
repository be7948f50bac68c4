// NegativeSampler (training and evaluation draws) and the `*.rec` file: round trip and refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/crc32c.h"
#include "data/interactions.h"
#include "data/negative_sampler.h"
#include "test_util.h"

namespace ft {
namespace {

using test::expect_user_error;
using test::TempDir;
using V32 = std::vector<uint32_t>;

TEST(NegativeSampler, NthNegativeByHand) {
  const V32 pos = {2, 3, 5};
  EXPECT_EQ(nth_negative(0, pos), 1u);
  EXPECT_EQ(nth_negative(1, pos), 4u);
  EXPECT_EQ(nth_negative(2, pos), 6u);
  EXPECT_EQ(nth_negative(3, pos), 7u);
  EXPECT_EQ(nth_negative(0, V32{1, 2, 3}), 4u);
  EXPECT_EQ(nth_negative(4, V32{}), 5u);
}

TEST(NegativeSampler, NeverReturnsAPositive) {
  constexpr uint32_t N = 500;
  const NegativeSampler s(N, 42);
  // A light user (rejection path) and one who rated all but items 7, 250 and 500 (rank path).
  V32 light;
  for (uint32_t i = 3; i <= N; i += 9) light.push_back(i);
  V32 dense;
  for (uint32_t i = 1; i <= N; ++i)
    if (i != 7 && i != 250 && i != 500) dense.push_back(i);
  std::vector<uint32_t> out(8);
  std::map<uint32_t, int> dense_seen;
  std::set<uint32_t> light_seen;
  for (uint64_t step = 0; step < 5000; ++step) {
    s.sample(1, step, light, out);
    for (uint32_t x : out) {
      ASSERT_GE(x, 1u);
      ASSERT_LE(x, N);
      ASSERT_FALSE(std::binary_search(light.begin(), light.end(), x)) << x;
      light_seen.insert(x);
    }
    s.sample(2, step, dense, out);
    for (uint32_t x : out) {
      ASSERT_TRUE(x == 7 || x == 250 || x == 500) << x;
      ++dense_seen[x];
    }
  }
  EXPECT_EQ(light_seen.size(), N - light.size());  // every negative reachable
  // Uniform over the three: 40000 draws, each about 13333 (5 sigma is about 470).
  for (uint32_t x : {7u, 250u, 500u}) EXPECT_NEAR(dense_seen[x], 40000 / 3, 600) << x;
}

TEST(NegativeSampler, ReproducibleFromSeedUserStep) {
  const V32 pos = {1, 4, 9, 16, 25};
  const NegativeSampler a(100, 7), b(100, 7), c(100, 8);
  V32 x(16), y(16), z(16), w(16), prefix(5);
  a.sample(3, 11, pos, x);
  b.sample(3, 11, pos, y);
  c.sample(3, 11, pos, z);
  EXPECT_EQ(x, y);   // same seed: same draw, from a separate sampler object
  EXPECT_NE(x, z);   // another seed
  a.sample(3, 12, pos, w);
  EXPECT_NE(x, w);   // another step
  a.sample(4, 11, pos, w);
  EXPECT_NE(x, w);   // another user
  a.sample(3, 11, pos, prefix);  // the first k of a longer draw
  EXPECT_EQ(prefix, V32(x.begin(), x.begin() + 5));
}

TEST(NegativeSampler, EvaluationNegatives) {
  constexpr uint32_t N = 1000;
  const NegativeSampler s(N, 3), t(N, 4);
  V32 pos;
  for (uint32_t i = 1; i <= N; i += 3) pos.push_back(i);
  // A dense user with 150 unrated items: the Fisher-Yates path.
  V32 dense;
  for (uint32_t i = 151; i <= N; ++i) dense.push_back(i);
  for (const V32* p : {&pos, &dense}) {
    V32 a(NegativeSampler::kEvalNegatives), b(a.size()), c(a.size());
    s.eval_negatives(9, *p, a);
    s.eval_negatives(9, *p, b);
    t.eval_negatives(9, *p, c);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    EXPECT_EQ(std::set<uint32_t>(a.begin(), a.end()).size(), a.size()) << "repeats";
    for (uint32_t x : a) {
      EXPECT_FALSE(std::binary_search(p->begin(), p->end(), x)) << x;
      EXPECT_TRUE(x >= 1 && x <= N);
    }
  }
  V32 few;
  for (uint32_t i = 51; i <= N; ++i) few.push_back(i);
  V32 out(NegativeSampler::kEvalNegatives);
  expect_user_error([&] { s.eval_negatives(12, few, out); }, {"user 12", "rated 950 of 1000", "fewer than the 100"});
  V32 all;
  for (uint32_t i = 1; i <= N; ++i) all.push_back(i);
  V32 one(1);
  expect_user_error([&] { s.sample(5, 0, all, one); }, {"user 5", "rated all 1000 items"});
}

TEST(NegativeSampler, PositiveSetsCoverTheWholeHistory) {
  std::vector<RawInteraction> raw = {{1, 5, 1}, {1, 3, 2}, {1, 5, 3}, {1, 9, 4}, {2, 3, 1}, {2, 4, 2}, {2, 9, 3}};
  const Interactions x = build_interactions(std::move(raw));
  const PositiveSets p(x.view());
  ASSERT_EQ(p.num_users(), 2u);
  // Items: 3->1, 4->2, 5->3, 9->4. User 1's test item (9) and repeat of 5 are in its set.
  EXPECT_EQ(V32(p.of(0).begin(), p.of(0).end()), (V32{1, 3, 4}));
  EXPECT_EQ(V32(p.of(1).begin(), p.of(1).end()), (V32{1, 2, 4}));
  EXPECT_TRUE(p.contains(0, 4));
  EXPECT_FALSE(p.contains(0, 2));
  const NegativeSampler s(x.view().num_items(), 1);
  V32 out(64);
  s.sample(0, 0, p.of(0), out);
  for (uint32_t v : out) EXPECT_EQ(v, 2u);  // the only item user 0 never rated
}

// ---- the *.rec file ----

Interactions small() {
  std::vector<RawInteraction> raw;
  for (uint32_t u = 0; u < 30; ++u)
    for (uint32_t j = 0; j < 3 + u % 5; ++j) raw.push_back({100 + u, 1 + (u * 7 + j * 13) % 41, int64_t{j}});
  raw.push_back({999, 5, 0});  // dropped
  return build_interactions(std::move(raw));
}

TEST(InteractionsRec, RoundTrip) {
  TempDir dir;
  const Interactions x = small();
  write_rec(dir.file("x.rec"), x);
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.rec.tmp")));
  const RecFile r(dir.file("x.rec"));
  const InteractionsView a = x.view(), b = r.view();
  auto eq = [](auto s, auto t) { return std::equal(s.begin(), s.end(), t.begin(), t.end()); };
  EXPECT_TRUE(eq(a.offsets(), b.offsets()));
  EXPECT_TRUE(eq(a.items(), b.items()));
  EXPECT_TRUE(eq(a.user_ids(), b.user_ids()));
  EXPECT_TRUE(eq(a.item_ids(), b.item_ids()));
  EXPECT_TRUE(eq(a.popularity(), b.popularity()));
  EXPECT_EQ(b.num_users(), 30u);
  EXPECT_EQ(r.report().dropped_users, 1u);
  EXPECT_EQ(r.report().dropped_interactions, 1u);
  EXPECT_EQ(r.report().raw_interactions, x.report.raw_interactions);
  EXPECT_EQ(r.min_interactions(), 3u);
  EXPECT_EQ(b.test_item(4), a.test_item(4));
}

TEST(InteractionsRec, DamagedFilesRefused) {
  TempDir dir;
  write_rec(dir.file("good.rec"), small());
  const std::string good = test::read_bytes(dir.file("good.rec"));
  auto damaged = [&](const std::string& name, std::string bytes, std::initializer_list<std::string> needles) {
    SCOPED_TRACE(name);
    test::write_bytes(dir.file(name), bytes);
    std::vector<std::string> all = {dir.file(name)};
    all.insert(all.end(), needles);
    try {
      RecFile r(dir.file(name));
      ADD_FAILURE() << "expected a UserError";
    } catch (const UserError& e) {
      for (const auto& n : all) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << "\nmissing: " << n;
    }
  };
  damaged("truncated.rec", good.substr(0, good.size() - 8), {"truncated"});
  damaged("trailing.rec", good + std::string(8, '\0'), {"trailing data"});
  damaged("tiny.rec", good.substr(0, 20), {"only 20 bytes", "truncated"});
  damaged("empty.rec", "", {"only 0 bytes"});
  std::string s = good;
  s[0] = 'X';
  damaged("magic.rec", s, {"bad magic"});
  s = good;
  s[20] ^= 1;  // the item count: the header CRC catches it before the size check
  damaged("header.rec", s, {"header CRC"});
  s = good;
  s[good.size() - 100] ^= 0x40;
  damaged("tables.rec", s, {"table CRC"});
  s = good;
  uint32_t v = 2;
  std::memcpy(&s[8], &v, 4);
  damaged("version.rec", s, {"unsupported version 2"});
  // CRC-valid but inconsistent content (a writer bug): item 0 in the items table, CRCs redone.
  s = good;
  const size_t items_at = kRecHeaderBytes + 31 * 8;  // after 30 users' offsets
  std::memset(&s[items_at], 0, 4);
  const uint32_t tables = crc32c(s.data() + kRecHeaderBytes, s.size() - kRecHeaderBytes);
  std::memcpy(&s[56], &tables, 4);
  const uint32_t header = crc32c(s.data(), 60);
  std::memcpy(&s[60], &header, 4);
  damaged("content.rec", s, {"item 0 outside 1..41"});
  expect_user_error([&] { RecFile r(dir.file("missing.rec")); }, {"missing.rec", "cannot open"});
  expect_user_error([&] { RecFile r(dir.str()); }, {"not a regular file"});
}

}  // namespace
}  // namespace ft
