// MovieLens parsing, the synthetic generator, Interactions (dense ids, time order, split) and
// the `*.rec` format.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <unordered_map>

#include "data/interactions.h"
#include "data/movielens.h"
#include "test_util.h"

namespace ft {
namespace {

using test::expect_user_error;
using test::TempDir;
using V32 = std::vector<uint32_t>;
using V64 = std::vector<uint64_t>;

template <class T>
std::vector<T> vec(std::span<const T> s) {
  return {s.begin(), s.end()};
}

// The hand example: user 1 rates 30 before 10 and 20, which tie at time 100 (input order
// decides: 10 then 20); user 2 in reverse line order; user 3 has two ratings and is dropped,
// taking movie 40 (only it rated) with it. Raw movies 10, 20, 30 become items 1, 2, 3.
const char* kDat =
    "1::10::5::100\n"
    "2::20::3::50\n"
    "1::30::4::90\n"
    "1::20::4::100\n"
    "3::40::5::1\n"
    "2::10::1::60\n"
    "\n"
    "2::30::2::40\n"
    "3::10::5::2";  // no final newline

const char* kCsv =
    "userId,movieId,rating,timestamp\r\n"
    "1,10,5.0,100\r\n"
    "2,20,3.5,50\r\n"
    "1,30,4.0,90\r\n"
    "1,20,4.5,100\r\n"
    "3,40,5.0,1\r\n"
    "2,10,1.0,60\r\n"
    "2,30,2.0,40\r\n"
    "3,10,5.0,2\r\n";

void expect_hand_example(const InteractionsView& v, const InteractionsReport& rep) {
  EXPECT_EQ(v.num_users(), 2u);
  EXPECT_EQ(v.num_items(), 3u);
  EXPECT_EQ(vec(v.offsets()), (V64{0, 3, 6}));
  EXPECT_EQ(vec(v.items()), (V32{3, 1, 2, 3, 2, 1}));
  EXPECT_EQ(vec(v.user_ids()), (V32{1, 2}));
  EXPECT_EQ(vec(v.item_ids()), (V32{0, 10, 20, 30}));
  EXPECT_EQ(vec(v.popularity()), (V32{0, 0, 0, 2}));  // train parts only: item 3 twice
  EXPECT_EQ(vec(v.train(0)), (V32{3}));
  EXPECT_EQ(v.valid_item(0), 1u);
  EXPECT_EQ(v.test_item(0), 2u);
  EXPECT_EQ(vec(v.train(1)), (V32{3}));
  EXPECT_EQ(v.valid_item(1), 2u);
  EXPECT_EQ(v.test_item(1), 1u);
  EXPECT_EQ(rep.raw_interactions, 8u);
  EXPECT_EQ(rep.raw_users, 3u);
  EXPECT_EQ(rep.dropped_users, 1u);
  EXPECT_EQ(rep.dropped_interactions, 2u);
}

TEST(MovieLensParse, DatHandExample) {
  TempDir dir;
  test::write_bytes(dir.file("ratings.dat"), kDat);
  std::vector<RawInteraction> raw;
  EXPECT_EQ(read_ratings(dir.file("ratings.dat"), RatingsFormat::kAuto, raw), 9u);  // lines, blank included
  ASSERT_EQ(raw.size(), 8u);
  EXPECT_LE(raw.capacity(), 10u);  // reserved by the line count, not grown by doubling
  EXPECT_EQ(raw[2].user, 1u);
  EXPECT_EQ(raw[2].item, 30u);
  EXPECT_EQ(raw[2].time, 90);
  const Interactions x = load_ratings(dir.file("ratings.dat"));
  expect_hand_example(x.view(), x.report);
}

TEST(MovieLensParse, CsvHandExampleAndColumnOrder) {
  TempDir dir;
  test::write_bytes(dir.file("ratings.csv"), kCsv);
  const Interactions x = load_ratings(dir.file("ratings.csv"));
  expect_hand_example(x.view(), x.report);
  // Columns are found by name; an explicit format overrides the extension.
  test::write_bytes(dir.file("r.txt"),
                    "timestamp,movieId,userId\n100,10,1\n50,20,2\n90,30,1\n100,20,1\n1,40,3\n60,10,2\n40,30,2\n2,10,3\n");
  const Interactions y = load_ratings(dir.file("r.txt"), RatingsFormat::kCsv);
  expect_hand_example(y.view(), y.report);
}

TEST(MovieLensParse, MalformedLinesNameFileAndLine) {
  TempDir dir;
  struct Case {
    const char* name;
    std::string text;
    std::vector<std::string> needles;
  };
  const std::string ok = "1::2::3::4\n\n";  // line 3 is the bad one
  const std::string csv = "userId,movieId,rating,timestamp\n1,2,3,4\n";
  const std::vector<Case> cases = {
      {"a.dat", ok + "1::2::3\n", {"a.dat:3:", "expected 4 fields", "got 3"}},
      {"b.dat", ok + "1::x::3::4\n", {"b.dat:3:", "movie id 'x' is not a non-negative integer"}},
      {"c.dat", ok + "-1::2::3::4\n", {"c.dat:3:", "negative user id '-1'"}},
      {"d.dat", ok + "1::2::3::abc\n", {"d.dat:3:", "bad timestamp 'abc'"}},
      {"e.dat", ok + "1::2::3::12.5\n", {"e.dat:3:", "bad timestamp '12.5'"}},
      {"f.dat", ok + "1::2::five::4\n", {"f.dat:3:", "bad rating 'five'"}},
      {"g.dat", ok + "1::99999999999::3::4\n", {"g.dat:3:", "does not fit 32 bits"}},
      {"h.dat", ok + "1::::3::4\n", {"h.dat:3:", "movie id '' is not"}},
      {"i.csv", csv + "1,2,3\n", {"i.csv:3:", "expected 4 comma-separated fields", "got 3"}},
      {"j.csv", csv + "1,2,3,4,5\n", {"j.csv:3:", "got 5"}},
      {"k.csv", "user,item,rating,time\n1,2,3,4\n", {"k.csv:1:", "must name userId, movieId and timestamp"}},
      {"l.csv", "", {"l.csv", "empty CSV file"}},
      {"m.dat", ok + std::string((1 << 20) + 10, '1') + "\n", {"m.dat:3:", "longer than 1 MiB"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    test::write_bytes(dir.file(c.name), c.text);
    std::vector<RawInteraction> raw;
    try {
      read_ratings(dir.file(c.name), RatingsFormat::kAuto, raw);
      ADD_FAILURE() << "expected a UserError";
    } catch (const UserError& e) {
      for (const auto& n : c.needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << "\nmissing: " << n;
    }
  }
  test::write_bytes(dir.file("r.json"), ok);
  std::vector<RawInteraction> raw;
  expect_user_error([&] { read_ratings(dir.file("r.json"), RatingsFormat::kAuto, raw); },
                    {"r.json", "cannot tell the ratings format", ".dat", ".csv"});
  expect_user_error([&] { read_ratings(dir.file("missing.dat"), RatingsFormat::kAuto, raw); },
                    {"missing.dat", "cannot open"});
  expect_user_error([&] { parse_ratings_format("tsv"); }, {"tsv", "auto, dat or csv"});
}

TEST(InteractionsBuild, StableTimeOrderLeaveOneOutAndDrops) {
  // Times far apart (2^40 s) take the stable_sort path; ties must keep the input order there too.
  for (const int64_t scale : {int64_t{1}, int64_t{1} << 40}) {
    SCOPED_TRACE(scale);
    std::vector<RawInteraction> raw = {
        {7, 100, 5 * scale}, {7, 300, 1 * scale}, {9, 100, 1 * scale}, {7, 200, 5 * scale},
        {7, 400, 5 * scale}, {8, 100, 1 * scale}, {9, 500, 0},         {7, 500, 2 * scale},
    };
    const Interactions x = build_interactions(std::move(raw));
    const InteractionsView v = x.view();
    // Users 8 (1 rating) and 9 (2) dropped; item 500 stays (user 7 rated it).
    EXPECT_EQ(vec(v.user_ids()), (V32{7}));
    EXPECT_EQ(vec(v.item_ids()), (V32{0, 100, 200, 300, 400, 500}));
    // 300@1, 500@2, then 100, 200, 400 tied at 5 in input order.
    EXPECT_EQ(vec(v.history(0)), (V32{3, 5, 1, 2, 4}));
    EXPECT_EQ(vec(v.train(0)), (V32{3, 5, 1}));
    EXPECT_EQ(v.valid_item(0), 2u);
    EXPECT_EQ(v.test_item(0), 4u);
    EXPECT_EQ(vec(v.popularity()), (V32{0, 1, 0, 1, 0, 1}));
    EXPECT_EQ(x.report.dropped_users, 2u);
    EXPECT_EQ(x.report.dropped_interactions, 3u);
  }
  // A larger minimum drops more; below 3 is raised to 3 (the split needs three).
  std::vector<RawInteraction> raw = {{1, 1, 0}, {1, 2, 1}, {1, 3, 2}, {2, 1, 0}, {2, 2, 1}, {2, 3, 2}, {2, 4, 3}};
  const Interactions y = build_interactions(std::vector<RawInteraction>(raw), 4);
  EXPECT_EQ(vec(y.view().user_ids()), (V32{2}));
  EXPECT_EQ(y.report.dropped_users, 1u);
  const Interactions z = build_interactions(std::move(raw), 1);
  EXPECT_EQ(z.view().num_users(), 2u);
  EXPECT_EQ(z.min_interactions, 3u);
}

TEST(MovieLensSynthetic, DeterministicAndParsesBack) {
  TempDir dir;
  SyntheticSpec s;
  s.users = 200;
  s.items = 300;
  s.mean_len = 20;
  s.seed = 5;
  EXPECT_EQ(write_synthetic_ratings(dir.file("a.dat"), s), 4000u);
  write_synthetic_ratings(dir.file("b.dat"), s);
  s.seed = 6;
  write_synthetic_ratings(dir.file("c.dat"), s);
  const std::string a = test::read_bytes(dir.file("a.dat"));
  EXPECT_EQ(a, test::read_bytes(dir.file("b.dat")));
  EXPECT_NE(a, test::read_bytes(dir.file("c.dat")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.dat.tmp")));
  // The file parses back to exactly the generated ratings, in file order.
  std::vector<RawInteraction> parsed;
  read_ratings(dir.file("a.dat"), RatingsFormat::kAuto, parsed);
  const std::vector<RawInteraction> gen = synthetic_movielens(200, 300, 20, 5);
  ASSERT_EQ(parsed.size(), gen.size());
  for (size_t i = 0; i < gen.size(); ++i) {
    ASSERT_EQ(parsed[i].user, gen[i].user) << i;
    ASSERT_EQ(parsed[i].item, gen[i].item) << i;
    ASSERT_EQ(parsed[i].time, gen[i].time) << i;
  }
  // Every user has at least min_len ratings, each item at most once.
  const Interactions x = build_interactions(std::vector<RawInteraction>(gen));
  EXPECT_EQ(x.view().num_users(), 200u);
  for (uint32_t u = 0; u < 200; ++u) {
    auto h = vec(x.view().history(u));
    EXPECT_GE(h.size(), 5u);
    std::sort(h.begin(), h.end());
    EXPECT_EQ(std::adjacent_find(h.begin(), h.end()), h.end()) << "user " << u << " rated an item twice";
  }
}

// The ML-1M-shaped preset through the file and the parser, with its shape checked.
TEST(MovieLensSynthetic, MovieLens1MShape) {
  TempDir dir;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const uint64_t n = write_synthetic_ratings(dir.file("ratings.dat"), movielens_1m_spec(0));
  const auto t1 = clock::now();
  const Interactions x = load_ratings(dir.file("ratings.dat"));
  const auto t2 = clock::now();
  write_rec(dir.file("ml1m.rec"), x);
  RecFile rec(dir.file("ml1m.rec"));
  const auto t3 = clock::now();
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  std::printf("[ ML-1M synthetic ] generate+write %.2f s (%.1f MB ratings.dat), parse+build %.2f s, "
              ".rec write+open %.2f s (%.1f MB)\n",
              secs(t1 - t0), std::filesystem::file_size(dir.file("ratings.dat")) / 1e6, secs(t2 - t1), secs(t3 - t2),
              std::filesystem::file_size(dir.file("ml1m.rec")) / 1e6);
  const InteractionsView v = x.view();
  EXPECT_EQ(n, 1000209u);
  EXPECT_EQ(v.num_interactions(), 1000209u);
  EXPECT_EQ(v.num_users(), 6040u);
  EXPECT_EQ(v.num_items(), 3706u);
  EXPECT_EQ(x.report.dropped_users, 0u);
  EXPECT_EQ(rec.view().num_interactions(), 1000209u);

  // Popularity skew: the top 10% of items hold more than 30% of the ratings.
  std::vector<uint64_t> count(v.num_items() + 1, 0);
  for (uint32_t item : v.items()) ++count[item];
  std::sort(count.begin(), count.end(), std::greater<>());
  uint64_t top = 0;
  for (uint32_t i = 0; i < v.num_items() / 10; ++i) top += count[i];
  const double share = double(top) / double(v.num_interactions());
  std::printf("[ ML-1M synthetic ] top 10%% of items hold %.1f%% of ratings\n", 100 * share);
  EXPECT_GT(share, 0.30);

  // Markov signal: consecutive pairs repeat across users far more than chance would have it.
  std::unordered_map<uint64_t, uint32_t> pairs;
  uint64_t transitions = 0;
  for (uint32_t u = 0; u < v.num_users(); ++u) {
    const auto h = v.history(u);
    for (size_t i = 1; i < h.size(); ++i, ++transitions) ++pairs[(uint64_t{h[i - 1]} << 32) | h[i]];
  }
  uint64_t repeated = 0;
  for (const auto& [p, c] : pairs)
    if (c >= 3) repeated += c;
  const double markov = double(repeated) / double(transitions);
  std::printf("[ ML-1M synthetic ] %.1f%% of transitions follow a pair seen 3+ times\n", 100 * markov);
  EXPECT_GT(markov, 0.25);
}

}  // namespace
}  // namespace ft
