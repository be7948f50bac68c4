// prepare_pairs and PackedDataset: packing, loss mask, positions, formats, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/packed_dataset.h"
#include "data/prepare_pairs.h"
#include "parquet_test_writer.h"
#include "test_util.h"
#include "train/config.h"
#include "train/trainer.h"

namespace ft {
namespace {

using test::expect_user_error;
using test::TempDir;
using Pairs = std::vector<std::pair<std::string, std::string>>;
constexpr int32_t E = static_cast<int32_t>(ByteTokenizer::kEndOfText);

std::string jsonl(const Pairs& pairs) {
  std::string s;
  for (const auto& [p, r] : pairs) s += nlohmann::json{{"prompt", p}, {"response", r}, {"id", 7}}.dump() + "\n";
  return s;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\t') o += "\\t";
    else if (c == '\n') o += "\\n";
    else if (c == '\r') o += "\\r";
    else if (c == '\\') o += "\\\\";
    else o += c;
  }
  return o;
}

std::string text(const Pairs& pairs) {
  std::string s;
  for (const auto& [p, r] : pairs) s += escape(p) + "\t" + escape(r) + "\n";
  return s;
}

PreparePairsOptions options(const std::string& in, const std::string& out, int T) {
  PreparePairsOptions o;
  o.inputs = {in};
  o.out_dir = out;
  o.seq_len = T;
  o.val_fraction = 0;
  return o;
}

struct Row {
  std::vector<int32_t> tokens, targets, positions;
};

Row row(const PackedDataset& ds, uint64_t r) {
  const size_t T = static_cast<size_t>(ds.seq_len());
  Row x{std::vector<int32_t>(T), std::vector<int32_t>(T), std::vector<int32_t>(T)};
  void* dst[3] = {x.tokens.data(), x.targets.data(), x.positions.data()};
  ds.read(r, dst);
  return x;
}

std::vector<int32_t> ids(const std::string& s) {
  std::vector<int32_t> v;
  for (unsigned char c : s) v.push_back(c);
  return v;
}

// The layout example of packed_dataset.h, and a second row, written out by hand.
TEST(PairsPack, HandComputedRows) {
  TempDir dir;
  test::write_bytes(dir.file("in.jsonl"), jsonl({{"ab", "c"}, {"d", "e"}, {"fgh", "ijk"}}));
  const PreparePairsReport rep = prepare_pairs(options(dir.file("in.jsonl"), dir.file("out"), 8));
  EXPECT_EQ(rep.train.samples, 3u);
  EXPECT_EQ(rep.train.rows, 2u);
  EXPECT_EQ(rep.train.positions, 11u);
  EXPECT_EQ(rep.truncated, 0u);
  ASSERT_EQ(rep.train.files, std::vector<std::string>{dir.file("out") + "/train_000000.pairs"});
  EXPECT_TRUE(rep.val.files.empty());
  PackedDataset ds(dir.file("out"), 8, 257, "--data-path");
  ASSERT_EQ(ds.num_samples(), 2u);
  const Row r0 = row(ds, 0), r1 = row(ds, 1);
  EXPECT_EQ(r0.tokens, (std::vector<int32_t>{'a', 'b', 'c', 'd', 'e', E, E, E}));
  EXPECT_EQ(r0.targets, (std::vector<int32_t>{-1, 'c', E, 'e', E, -1, -1, -1}));
  EXPECT_EQ(r0.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 1, 2}));
  EXPECT_EQ(r1.tokens, (std::vector<int32_t>{'f', 'g', 'h', 'i', 'j', 'k', E, E}));
  EXPECT_EQ(r1.targets, (std::vector<int32_t>{-1, -1, 'i', 'j', 'k', E, -1, -1}));
  EXPECT_EQ(r1.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 0, 1}));
  EXPECT_EQ(ds.loss_tokens(0), 4u);
  EXPECT_EQ(ds.loss_tokens(1), 4u);
  const uint64_t both[] = {0, 1, 1};
  EXPECT_EQ(ds.loss_tokens(both), 12u);
  EXPECT_EQ(ds.total_loss_tokens(), 8u);
  EXPECT_EQ(rep.train.loss_tokens, 8u);
  ASSERT_EQ(ds.num_pairs(), 3u);
  std::vector<int32_t> p, r;
  ds.pair(2, p, r);
  EXPECT_EQ(p, ids("fgh"));
  EXPECT_EQ(r, ids("ijk"));
  EXPECT_FALSE(ds.pair_truncated(2));

  // --loss-on all: the prompt's targets count too.
  PreparePairsOptions o = options(dir.file("in.jsonl"), dir.file("all"), 8);
  o.loss_on = LossOn::kAll;
  prepare_pairs(o);
  PackedDataset all(dir.file("all"), 8, 257, "--data-path");
  EXPECT_EQ(row(all, 0).targets, (std::vector<int32_t>{'b', 'c', E, 'e', E, -1, -1, -1}));
  EXPECT_EQ(row(all, 1).targets, (std::vector<int32_t>{'g', 'h', 'i', 'j', 'k', E, -1, -1}));
  EXPECT_EQ(all.loss_tokens(0), 5u);
  EXPECT_EQ(all.total_loss_tokens(), 11u);
}

// First fit over the open rows, oldest first; a full row closes at once; with the open-row
// bound reached the oldest row closes.
TEST(PairsPack, FirstFitOrder) {
  TempDir dir;
  // Positions per sample = tokens - 1 = len(prompt) + len(response): 6, 6, 4, 3.
  test::write_bytes(dir.file("in.jsonl"), jsonl({{"AAA", "aaa"}, {"BBB", "bbb"}, {"CC", "cc"}, {"DD", "d"}}));
  prepare_pairs(options(dir.file("in.jsonl"), dir.file("out"), 10));
  PackedDataset ds(dir.file("out"), 10, 257, "--data-path");
  ASSERT_EQ(ds.num_samples(), 2u);
  std::vector<std::string> order;
  std::vector<int32_t> p, r;
  for (uint64_t i = 0; i < ds.num_pairs(); ++i) {
    ds.pair(i, p, r);
    order.emplace_back(p.begin(), p.end());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"AAA", "CC", "BBB", "DD"}));
  EXPECT_EQ(row(ds, 0).positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3}));
  EXPECT_EQ(row(ds, 1).positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 0}));

  PreparePairsOptions o = options(dir.file("in.jsonl"), dir.file("two"), 10);
  o.open_rows = 1;
  prepare_pairs(o);
  PackedDataset one(dir.file("two"), 10, 257, "--data-path");
  EXPECT_EQ(one.num_samples(), 3u);  // [AAA] [BBB CC] [DD]
}

// Random pairs: every row is whole samples laid out as pair() gives them back, positions
// restart at each boundary, prompts and padding carry no loss; the multiset of pairs is the
// input's; rows spread over several shards.
TEST(PairsPack, RandomPairsRoundTrip) {
  TempDir dir;
  std::mt19937 rng(3);
  Pairs pairs;
  auto str = [&](int max) {
    std::string s(rng() % static_cast<unsigned>(max + 1), ' ');
    for (char& c : s) c = static_cast<char>('a' + rng() % 26);
    return s;
  };
  for (int i = 0; i < 500; ++i) pairs.emplace_back(str(12), str(15));
  test::write_bytes(dir.file("in.jsonl"), jsonl(pairs));
  PreparePairsOptions o = options(dir.file("in.jsonl"), dir.file("out"), 24);
  o.max_shard_positions = 24 * 50;
  o.batch_lines = 64;  // many batches
  const PreparePairsReport rep = prepare_pairs(o);
  EXPECT_GT(rep.train.files.size(), 2u);
  const uint64_t empty = static_cast<uint64_t>(std::count(pairs.begin(), pairs.end(), std::pair<std::string, std::string>{}));
  EXPECT_EQ(rep.empty, empty);
  PackedDataset ds(dir.file("out"), 24, 257, "--data-path");
  ASSERT_EQ(ds.num_pairs(), pairs.size() - empty);
  EXPECT_EQ(ds.num_samples(), rep.train.rows);
  Pairs got;
  uint64_t i = 0, loss = 0, truncated = 0;
  std::vector<int32_t> p, r;
  for (uint64_t k = 0; k < ds.num_samples(); ++k) {
    const Row x = row(ds, k);
    size_t t = 0;
    int samples = 0;
    // A sample starts with a byte, never with end-of-text: the padding does (and at
    // position 0, which is also checked below).
    while (t < 24 && x.tokens[t] != E) {
      ASSERT_LT(i, ds.num_pairs());
      ds.pair(i, p, r);
      std::vector<int32_t> s = p;
      s.insert(s.end(), r.begin(), r.end());
      if (!ds.pair_truncated(i)) s.push_back(E);
      truncated += ds.pair_truncated(i) ? 1 : 0;
      ASSERT_LE(t + s.size() - 1, 24u);
      for (size_t j = 0; j + 1 < s.size(); ++j, ++t) {
        EXPECT_EQ(x.tokens[t], s[j]);
        EXPECT_EQ(x.positions[t], static_cast<int32_t>(j));
        EXPECT_EQ(x.targets[t], j + 1 >= p.size() ? s[j + 1] : -1);
        loss += j + 1 >= p.size() ? 1 : 0;
      }
      // A truncated pair comes back cut; compare it with the input cut the same way.
      got.emplace_back(std::string(p.begin(), p.end()), std::string(r.begin(), r.end()));
      ++i;
      ++samples;
    }
    EXPECT_GT(samples, 0);
    for (int j = 0; t < 24; ++t, ++j) {
      EXPECT_EQ(x.tokens[t], E);
      EXPECT_EQ(x.targets[t], -1);
      EXPECT_EQ(x.positions[t], j);
    }
  }
  EXPECT_EQ(i, ds.num_pairs());
  EXPECT_EQ(loss, ds.total_loss_tokens());
  EXPECT_EQ(truncated, rep.truncated);
  EXPECT_GT(truncated, 0u);
  Pairs want;
  for (auto pr : pairs) {
    if (pr == std::pair<std::string, std::string>{}) continue;
    if (pr.first.size() + pr.second.size() > 25) pr.second.resize(25 - pr.first.size());  // T+1 tokens
    want.push_back(pr);
  }
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  EXPECT_GT(rep.train.efficiency(24), 0.8);
}

// The folder's files but the lock file every preparation leaves (kPrepareLockFile).
std::vector<std::string> files_of(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename() != kPrepareLockFile) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(PairsFormats, JsonlTextParquetGiveIdenticalShards) {
  TempDir dir;
  Pairs pairs = {{"what is 12 plus 7?", "19"},   {"tab\there", "new\nline"}, {"back\\slash\r", ""},
                 {"", "no prompt"},              {"caf\xC3\xA9 \xE4\xB8\xAD", "\xF0\x9F\x98\x80"},
                 {"", ""}};
  for (int i = 0; i < 200; ++i) pairs.push_back({"q" + std::to_string(i), std::string(static_cast<size_t>(i % 40), 'x')});
  test::write_bytes(dir.file("in.jsonl"), jsonl(pairs));
  test::write_bytes(dir.file("in.txt"), text(pairs));
  std::vector<std::optional<std::string>> ps, rs;
  for (const auto& [p, r] : pairs) {
    ps.push_back(p);
    rs.push_back(r);
  }
  test::pq::WriteOptions w;
  w.rows_per_group = 64;  // several row groups
  w.codec = 1;
  test::write_bytes(dir.file("in.parquet"), test::pq::write_parquet({{"response", rs}, {"prompt", ps}}, w));
  uint64_t truncated = 0;
  for (const auto& [p, r] : pairs) truncated += p.size() + r.size() + 1 > 17 ? 1 : 0;
  ASSERT_GT(truncated, 0u);
  std::vector<std::string> outs;
  for (const char* in : {"in.jsonl", "in.txt", "in.parquet"}) {
    PreparePairsOptions o = options(dir.file(in), dir.file(std::string("out_") + in), 16);
    o.val_fraction = 0.3;
    o.seed = 5;
    const PreparePairsReport rep = prepare_pairs(o);
    EXPECT_EQ(rep.empty, 1u) << in;
    EXPECT_EQ(rep.truncated, truncated) << in;
    EXPECT_GT(rep.val.samples, 0u) << in;
    outs.push_back(o.out_dir);
  }
  const std::vector<std::string> names = files_of(outs[0]);
  EXPECT_EQ(names, (std::vector<std::string>{"train_000000.pairs", "val_000000.pairs"}));
  for (size_t k = 1; k < outs.size(); ++k) {
    ASSERT_EQ(files_of(outs[k]), names);
    for (const auto& n : names)
      EXPECT_EQ(test::read_bytes(outs[0] + "/" + n), test::read_bytes(outs[k] + "/" + n)) << outs[k] << "/" << n;
  }
}

// The Parquet files pyarrow wrote on the device (tests/fixtures/parquet: dictionary, PLAIN and
// DELTA_LENGTH_BYTE_ARRAY pages, v1 and v2, every codec) give the same shards as JSONL of the
// same pairs. Files with nulls are refused (a null prompt is not a pair), so the REQUIRED ones
// are used.
TEST(PairsFormats, PyarrowParquetFilesGiveTheShardsOfTheSameJsonl) {
  const std::string fixtures = std::string(FITTRAIN_SOURCE_DIR) + "/tests/fixtures/parquet";
  if (!std::filesystem::exists(fixtures + "/expected.json")) GTEST_SKIP() << "no pyarrow fixtures";
  const auto all = nlohmann::json::parse(test::read_bytes(fixtures + "/expected.json"));
  TempDir dir;
  int compared = 0;
  for (const auto& [name, e] : all.at("files").items()) {
    if (name.find("required") == std::string::npos) continue;
    SCOPED_TRACE(name);
    const auto& ps = all.at("values").at(e["columns"]["prompt"]["ref"].get<std::string>());
    const auto& rs = all.at("values").at(e["columns"]["response"]["ref"].get<std::string>());
    Pairs pairs;
    for (size_t i = 0; i < ps.size(); ++i) pairs.push_back({ps[i].get<std::string>(), rs[i].get<std::string>()});
    const std::string stem = name.substr(0, name.size() - 8);
    test::write_bytes(dir.file(stem + ".jsonl"), jsonl(pairs));
    std::vector<std::string> outs;
    for (const std::string& in : {fixtures + "/" + name, dir.file(stem + ".jsonl")}) {
      PreparePairsOptions o = options(in, dir.file(stem + (in.ends_with(".jsonl") ? "_jsonl" : "_parquet")), 32);
      o.val_fraction = 0.2;
      prepare_pairs(o);
      outs.push_back(o.out_dir);
    }
    const std::vector<std::string> names = files_of(outs[0]);
    ASSERT_EQ(files_of(outs[1]), names);
    for (const auto& n : names) EXPECT_EQ(test::read_bytes(outs[0] + "/" + n), test::read_bytes(outs[1] + "/" + n)) << n;
    ++compared;
  }
  EXPECT_GE(compared, 16);
}

TEST(PairsPrepare, TruncationIsReportedAndKept) {
  TempDir dir;
  test::write_bytes(dir.file("in.txt"), "ab\t0123456789\nshort\tok\n0123456789abcdefghij\tlost\n");
  const PreparePairsReport rep = prepare_pairs(options(dir.file("in.txt"), dir.file("out"), 8));
  EXPECT_EQ(rep.truncated, 2u);
  EXPECT_EQ(rep.prompt_only, 1u);
  EXPECT_EQ(rep.longest, 25u);
  PackedDataset ds(dir.file("out"), 8, 257, "--data-path");
  std::vector<int32_t> p, r;
  ds.pair(0, p, r);  // 2 + 10 + 1 tokens cut to T+1 = 9, no end-of-text
  EXPECT_EQ(p, ids("ab"));
  EXPECT_EQ(r, ids("0123456"));
  EXPECT_TRUE(ds.pair_truncated(0));
  const Row x = row(ds, 0);
  EXPECT_EQ(x.tokens, ids("ab012345"));
  EXPECT_EQ(x.targets, (std::vector<int32_t>{-1, '0', '1', '2', '3', '4', '5', '6'}));
  // Rows: [ab0123456] full, closed at once; [short ok] open; the third does not fit there,
  // so it opens a row of its own, also full: pair order ab.., 0123.., short.
  ds.pair(1, p, r);
  EXPECT_EQ(p, ids("012345678"));  // cut inside the prompt: no response, no loss
  EXPECT_TRUE(r.empty());
  EXPECT_TRUE(ds.pair_truncated(1));
  EXPECT_EQ(ds.loss_tokens(1), 0u);
  EXPECT_EQ(row(ds, 1).targets, std::vector<int32_t>(8, -1));
  ds.pair(2, p, r);
  EXPECT_EQ(p, ids("short"));
  EXPECT_EQ(r, ids("ok"));
  EXPECT_FALSE(ds.pair_truncated(2));
}

TEST(PairsPrepare, MalformedInputNamesFileAndLine) {
  TempDir dir;
  const std::string good = R"({"prompt": "a", "response": "b"})";
  auto fails = [&](const std::string& name, const std::string& body, std::initializer_list<std::string> needles) {
    test::write_bytes(dir.file(name), body);
    expect_user_error([&] { prepare_pairs(options(dir.file(name), dir.file("out_" + name), 8)); }, needles);
    EXPECT_FALSE(std::filesystem::exists(dir.file("out_" + name) + "/train_000000.pairs")) << name;
  };
  fails("a.jsonl", good + "\n\n" + R"({"prompt": "a", "response": "b")" + "\n", {"a.jsonl:3:", "invalid JSON"});
  fails("b.jsonl", good + "\n" + R"({"prompt": "a", "answer": "b"})" + "\n", {"b.jsonl:2:", "no \"response\" field"});
  fails("c.jsonl", R"({"prompt": 12, "response": "b"})", {"c.jsonl:1:", "\"prompt\" is a number"});
  fails("d.jsonl", good + "\n[1, 2]\n", {"d.jsonl:2:", "not an object"});
  fails("e.txt", "a\tb\nno tab here\n", {"e.txt:2:", "no TAB"});
  fails("f.txt", "a\\x\tb\n", {"f.txt:1:", "unknown escape"});
  fails("g.txt", "a\tb\tc\n", {"g.txt:1:", "more than one TAB"});
  fails("h.md", "a\tb\n", {"h.md", "--input-format"});
  test::pq::WriteOptions w;
  w.optional = true;
  fails("i.parquet", test::pq::write_parquet({{"prompt", {"a", "b"}}, {"response", {"x", std::nullopt}}}, w),
        {"i.parquet: row group 0, row 1", "\"response\" is null"});
  fails("j.parquet", test::pq::write_parquet({{"prompt", {"a"}}, {"answer", {"x"}}}, {}),
        {"j.parquet", "no column \"response\"", "--response-field", "prompt, answer"});
  // Custom field names; nested fields of the same name are ignored.
  test::write_bytes(dir.file("ok.jsonl"), R"({"meta": {"q": 1}, "q": "x\u00e9", "a": "y"})" "\n");
  PreparePairsOptions o = options(dir.file("ok.jsonl"), dir.file("ok"), 8);
  o.prompt_field = "q";
  o.response_field = "a";
  prepare_pairs(o);
  PackedDataset ds(dir.file("ok"), 8, 257, "--data-path");
  std::vector<int32_t> p, r;
  ds.pair(0, p, r);
  EXPECT_EQ(p, ids("x\xC3\xA9"));
  EXPECT_EQ(r, ids("y"));
}

TEST(PairsPrepare, SplitByFractionAndByValInput) {
  TempDir dir;
  Pairs pairs;
  for (int i = 0; i < 1000; ++i) pairs.push_back({"p" + std::to_string(i), "r"});
  test::write_bytes(dir.file("in.jsonl"), jsonl(pairs));
  test::write_bytes(dir.file("val.txt"), "v1\tr\nv2\tr\nv3\tr\n");
  PreparePairsOptions o = options(dir.file("in.jsonl"), dir.file("a"), 64);
  o.val_fraction = 0.2;
  const PreparePairsReport a = prepare_pairs(o);
  EXPECT_EQ(a.train.samples + a.val.samples, 1000u);
  EXPECT_GT(a.val.samples, 150u);
  EXPECT_LT(a.val.samples, 250u);
  const std::string val0 = test::read_bytes(o.out_dir + "/val_000000.pairs");
  EXPECT_EQ(prepare_pairs(o).val.samples, a.val.samples);  // seeded
  EXPECT_EQ(test::read_bytes(o.out_dir + "/val_000000.pairs"), val0);
  o.seed = 1;
  prepare_pairs(o);
  EXPECT_NE(test::read_bytes(o.out_dir + "/val_000000.pairs"), val0);
  o.val_inputs = {dir.file("val.txt")};
  const PreparePairsReport b = prepare_pairs(o);
  EXPECT_EQ(b.train.samples, 1000u);
  EXPECT_EQ(b.val.samples, 3u);
  EXPECT_EQ(resolve_split(o.out_dir, "val", "--val-data-path", ".pairs").size(), 1u);
  PackedDataset val(resolve_split(o.out_dir, "val", "--val-data-path", ".pairs"), 64, 257, "--val-data-path");
  EXPECT_EQ(val.num_pairs(), 3u);
}

TEST(PackedDataset, DamagedFilesAreUserErrors) {
  TempDir dir;
  test::write_bytes(dir.file("in.txt"), "hello\tworld\nfoo\tbar\n");
  prepare_pairs(options(dir.file("in.txt"), dir.file("out"), 16));
  const std::string f = dir.file("out") + "/train_000000.pairs";
  const std::string good = test::read_bytes(f);
  auto damaged = [&](const std::string& bytes, std::initializer_list<std::string> needles) {
    test::write_bytes(dir.file("bad.pairs"), bytes);
    expect_user_error([&] { PackedDataset(dir.file("bad.pairs"), 16, 257, "--data-path"); }, needles);
  };
  damaged(good.substr(0, good.size() - 1), {"bad.pairs", "truncated", "--data-path"});
  damaged(good + "x", {"bad.pairs", "trailing data"});
  damaged(good.substr(0, 30), {"bad.pairs", "too small"});
  damaged("", {"bad.pairs", "too small"});
  std::string g = good;
  g[0] = 'X';
  damaged(g, {"bad.pairs", "magic"});
  g = good;
  g[20] ^= 1;  // token bytes
  damaged(g, {"bad.pairs", "header CRC"});
  g = good;
  g[g.size() - 3] ^= 1;  // row loss table
  damaged(g, {"bad.pairs", "table CRC"});
  expect_user_error([&] { PackedDataset(f, 32, 257, "--data-path"); },
                    {f, "T=16", "--seq-len 32", "train with --seq-len 16"});
  expect_user_error([&] { PackedDataset(f, 16, 200, "--data-path"); }, {f, "outside the vocabulary"});
  expect_user_error([&] { PackedDataset(dir.file("in.txt") + "x", 16, 257, "--data-path"); }, {"--data-path"});
}

TEST(PairsPrepare, StaleShardsOfEitherKindAreReplaced) {
  TempDir dir;
  test::write_bytes(dir.file("in.txt"), "a\tb\n");
  std::filesystem::create_directories(dir.file("out"));
  test::write_bytes(dir.file("out") + "/train_000007.pairs", "old");
  test::write_bytes(dir.file("out") + "/val_000000.bin", "old");
  test::write_bytes(dir.file("out") + "/notes.txt", "mine");
  prepare_pairs(options(dir.file("in.txt"), dir.file("out"), 8));
  EXPECT_EQ(files_of(dir.file("out")), (std::vector<std::string>{"notes.txt", "train_000000.pairs"}));
}

// A preparation that fails, at any point of reading its inputs, leaves the earlier one as it
// was: its shards byte for byte, and no staging folder. (The earlier shards were removed
// before the inputs were read, so a missing file or a bad record lost them.)
TEST(PairsPrepare, AFailedPreparationLeavesTheEarlierShardsAsTheyWere) {
  TempDir dir;
  Pairs pairs;
  for (int i = 0; i < 50; ++i) pairs.push_back({"p" + std::to_string(i), "r"});
  test::write_bytes(dir.file("in.jsonl"), jsonl(pairs));
  PreparePairsOptions o = options(dir.file("in.jsonl"), dir.file("out"), 16);
  o.val_fraction = 0.2;
  prepare_pairs(o);
  const std::vector<std::string> before = files_of(dir.file("out"));
  ASSERT_EQ(before, (std::vector<std::string>{"train_000000.pairs", "val_000000.pairs"}));
  const std::string train0 = test::read_bytes(dir.file("out") + "/train_000000.pairs");
  auto fails = [&](const PreparePairsOptions& bad, std::initializer_list<std::string> needles) {
    expect_user_error([&] { prepare_pairs(bad); }, needles);
    EXPECT_EQ(files_of(dir.file("out")), before);
    EXPECT_EQ(test::read_bytes(dir.file("out") + "/train_000000.pairs"), train0);
  };
  PreparePairsOptions missing = o;
  missing.inputs = {dir.file("in.jsonl"), dir.file("nope.jsonl")};
  fails(missing, {"nope.jsonl", "does not exist"});
  test::write_bytes(dir.file("late.jsonl"), jsonl(pairs) + "{\"prompt\": 1}\n");  // bad after 50 good ones
  fails(options(dir.file("late.jsonl"), dir.file("out"), 16), {"late.jsonl:51:"});
  // Something in the way of a new shard's name is found before anything is replaced.
  std::filesystem::create_directories(dir.file("blocked") + "/train_000000.pairs");
  test::write_bytes(dir.file("blocked") + "/train_000001.pairs", "old");
  expect_user_error([&] { prepare_pairs(options(dir.file("in.jsonl"), dir.file("blocked"), 16)); },
                    {"train_000000.pairs", "is in the way", "nothing was replaced"});
  EXPECT_EQ(test::read_bytes(dir.file("blocked") + "/train_000001.pairs"), "old");
  // A stale staging folder (a run killed before its commit) is cleared by the next one.
  std::filesystem::create_directories(dir.file("out") + "/" + kStagingDir);
  test::write_bytes(dir.file("out") + "/" + kStagingDir + "/train_000003.pairs", "half");
  o.seed = 3;
  const PreparePairsReport r = prepare_pairs(o);
  EXPECT_EQ(files_of(dir.file("out")), before);
  EXPECT_EQ(r.train.files, std::vector<std::string>{dir.file("out") + "/train_000000.pairs"});
  PackedDataset ds(r.train.files, 16, 257, "--data-path");
  EXPECT_EQ(ds.num_pairs(), r.train.samples);
}

// The CLI path: `prepare --input x.jsonl --out DIR --seq-len 16` is pair mode by extension;
// a .txt without --pairs stays a document, and --seq-len is refused there.
TEST(PairsCli, RunPrepare) {
  TempDir dir;
  test::write_bytes(dir.file("in.jsonl"), jsonl({{"what is 12 plus 7?", "19"}, {"what is 1 plus 1?", "2"}}));
  RunConfig rc;
  rc.command = "prepare";
  rc.inputs = {dir.file("in.jsonl")};
  rc.out_dir = dir.file("out");
  rc.seq_len = 32;
  rc.val_fraction = 0;
  EXPECT_EQ(run_prepare(rc), 0);
  EXPECT_EQ(PackedDataset(rc.out_dir, 32, 257, "--data-path").num_pairs(), 2u);
  expect_user_error([&] { run_prepare(rc); }, {"--overwrite"});
  rc.overwrite = true;
  rc.loss_on = "prompt";
  expect_user_error([&] { run_prepare(rc); }, {"--loss-on", "prompt"});
  test::write_bytes(dir.file("doc.txt"), "a document\n");
  rc.inputs = {dir.file("doc.txt")};
  rc.loss_on = "response";
  expect_user_error([&] { run_prepare(rc); }, {"--seq-len", "--pairs"});
  rc.seq_len = 0;
  EXPECT_EQ(run_prepare(rc), 0);  // a document: token shards, the packed ones removed
  EXPECT_EQ(files_of(rc.out_dir), (std::vector<std::string>{"train_000000.bin"}));
}

}  // namespace
}  // namespace ft
