#include "data/dataset.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <numeric>
#include <vector>

#include "test_util.h"

namespace ft {
namespace {

using test::expect_user_error;
using test::TempDir;

std::vector<uint32_t> iota_tokens(size_t n, uint32_t start) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(TokenDataset, SampleWindows) {
  TempDir dir;
  // Shard a: 10 tokens, T=3 -> (10-1)/3 = 3 samples; shard b: 7 tokens -> 2 samples.
  write_shard(dir.file("a.bin"), iota_tokens(10, 0));
  write_shard(dir.file("b.bin"), iota_tokens(7, 100));
  TokenDataset ds(dir.str(), 3, 1000, "--data-path");
  ASSERT_EQ(ds.num_shards(), 2u);
  ASSERT_EQ(ds.num_samples(), 5u);
  EXPECT_EQ(ds.num_tokens(), 17u);
  int32_t in[3], tg[3];
  const int32_t starts[] = {0, 3, 6, 100, 103};
  for (uint64_t i = 0; i < 5; ++i) {
    ds.read_sample(i, in, tg);
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(in[t], starts[i] + t) << "sample " << i;
      EXPECT_EQ(tg[t], starts[i] + t + 1) << "sample " << i;  // targets = inputs shifted
    }
  }
}

TEST(TokenDataset, ExactFitUsesLastToken) {
  TempDir dir;
  write_shard(dir.file("a.bin"), iota_tokens(9, 0));  // (9-1)/4 = 2 samples, last target 8
  TokenDataset ds(dir.file("a.bin"), 4, 100, "--data-path");
  ASSERT_EQ(ds.num_samples(), 2u);
  int32_t in[4], tg[4];
  ds.read_sample(1, in, tg);
  EXPECT_EQ(in[0], 4);
  EXPECT_EQ(tg[3], 8);
}

TEST(TokenDataset, VocabCheckNamesShard) {
  TempDir dir;
  const auto p = dir.file("a.bin");
  write_shard(p, std::vector<uint32_t>{1, 2, 3, 70000, 4});
  // Refused at open, before any sample is read: the shard, the token, its position and the
  // vocabulary size are named.
  expect_user_error([&] { TokenDataset ds(p, 2, 50257, "--data-path", ScanCacheOptions{}); },
                    {p, "token 70000 at position 3", "vocab size 50257", "--data-path"});
  // A token past the last full window (never read by any sample) is refused too, and so is
  // one equal to the vocabulary size; one below it is fine.
  write_shard(p, std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 100});
  expect_user_error([&] { TokenDataset ds(p, 4, 100, "--val-data-path", ScanCacheOptions{}); },
                    {p, "token 100 at position 6", "vocab size 100", "--val-data-path"});
  TokenDataset ok(p, 4, 101, "--data-path", ScanCacheOptions{});
  EXPECT_EQ(ok.num_samples(), 1u);
}

TEST(TokenDataset, VocabCheckCoversEveryShardOfAFolder) {
  TempDir dir;
  write_shard(dir.file("a.bin"), iota_tokens(100, 0));
  std::vector<uint32_t> b = iota_tokens(100, 0);
  b[77] = 300;
  write_shard(dir.file("b.bin"), b);
  expect_user_error([&] { TokenDataset ds(dir.str(), 4, 200, "--data-path", ScanCacheOptions{}); },
                    {dir.file("b.bin"), "token 300 at position 77", "vocab size 200"});
}

// The scan cache: a second open of an unchanged shard reads the cached maximum; a changed
// shard is rescanned; a broken cache costs a rescan, never the run.
TEST(TokenDataset, ScanCacheIsUsedAndInvalidated) {
  TempDir dir;
  const std::string cache = dir.file("cache"), p = dir.file("a.bin");
  write_shard(p, iota_tokens(1000, 0));
  const ScanCacheOptions opts{cache, 0};  // racy_ns 0: cache even a file written just now
  {
    TokenDataset ds(p, 8, 1000, "--data-path", opts);
    EXPECT_EQ(ds.shards_from_cache(), 0u);
  }
  const std::string entry = scan_cache_file(cache, p);
  ASSERT_TRUE(std::filesystem::exists(entry));
  {
    TokenDataset ds(p, 8, 1000, "--data-path", opts);
    EXPECT_EQ(ds.shards_from_cache(), 1u);
    // The cached maximum still refuses a smaller vocabulary.
    expect_user_error([&] { TokenDataset small(p, 8, 999, "--data-path", opts); },
                      {p, "token 999 at position 999", "vocab size 999"});
  }
  // Modified in place, same size: a token out of range appears; the cache must not hide it.
  {
    std::vector<uint32_t> t = iota_tokens(1000, 0);
    t[500] = 5000;
    const std::string tmp = dir.file("b.bin");
    write_shard(tmp, t);
    const auto before = std::filesystem::last_write_time(p);
    std::filesystem::copy_file(tmp, p, std::filesystem::copy_options::overwrite_existing);
    // File timestamps move in kernel ticks (a few ms): make sure this edit is a later one, as
    // it would be for any edit made after the 2 s the cache waits (racy_ns) by default.
    std::filesystem::last_write_time(p, before + std::chrono::seconds(1));
  }
  expect_user_error([&] { TokenDataset ds(p, 8, 1000, "--data-path", opts); },
                    {p, "token 5000 at position 500"});
  // Garbage in the cache entry: rescanned, and the entry rewritten.
  write_shard(p, iota_tokens(1000, 0));
  { TokenDataset ds(p, 8, 1000, "--data-path", opts); }
  test::write_bytes(entry, "fittrain-shard-scan 1\nnonsense\ncrc 00000000\n");
  {
    TokenDataset ds(p, 8, 1000, "--data-path", opts);
    EXPECT_EQ(ds.shards_from_cache(), 0u);
  }
  {
    TokenDataset ds(p, 8, 1000, "--data-path", opts);
    EXPECT_EQ(ds.shards_from_cache(), 1u);
  }
  // An edited maximum with a stale CRC is not trusted.
  {
    std::string text = test::read_bytes(entry);
    const size_t at = text.find(" 999\n");
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, 5, " 998\n");
    test::write_bytes(entry, text);
    TokenDataset ds(p, 8, 1000, "--data-path", opts);
    EXPECT_EQ(ds.shards_from_cache(), 0u);
  }
  // A cache folder that cannot be created (its parent is a file) only costs scans.
  test::write_bytes(dir.file("file"), "x");
  const ScanCacheOptions broken{dir.file("file") + "/cache", 0};
  for (int i = 0; i < 2; ++i) {
    TokenDataset ds(p, 8, 1000, "--data-path", broken);
    EXPECT_EQ(ds.shards_from_cache(), 0u);
  }
}

TEST(TokenDataset, ScanCacheSkipsAShardChangedJustNow) {
  TempDir dir;
  const std::string cache = dir.file("cache"), p = dir.file("a.bin");
  write_shard(p, iota_tokens(100, 0));
  // Default options: a shard changed within the last 2 s is scanned but not cached (a change
  // in the same timestamp tick would go unseen).
  { TokenDataset ds(p, 8, 100, "--data-path", ScanCacheOptions{cache}); }
  EXPECT_FALSE(std::filesystem::exists(scan_cache_file(cache, p)));
}

TEST(TokenDataset, NonRegularShardsAreRefusedByName) {
  TempDir dir;
  write_shard(dir.file("a.bin"), iota_tokens(100, 0));
  std::filesystem::create_directories(dir.file("sub"));
  expect_user_error([&] { TokenDataset ds(dir.file("s*"), 4, 100, "--val-data-path"); },
                    {dir.file("sub"), "folder", "--val-data-path"});
  expect_user_error([&] { TokenDataset ds("/dev/zero", 4, 100, "--val-data-path"); },
                    {"/dev/zero", "character device", "--val-data-path"});
}

TEST(TokenDataset, EmptyGlob) {
  TempDir dir;
  const auto spec = dir.file("*.bin");
  expect_user_error([&] { TokenDataset ds(spec, 4, 100, "--data-path"); },
                    {"--data-path", spec, "no file matches"});
}

TEST(TokenDataset, MissingPath) {
  TempDir dir;
  const auto spec = dir.file("nothing.bin");
  expect_user_error([&] { TokenDataset ds(spec, 4, 100, "--val-data-path"); },
                    {"--val-data-path", spec, "no such file"});
}

TEST(TokenDataset, EmptyFolder) {
  TempDir dir;
  expect_user_error([&] { TokenDataset ds(dir.str(), 4, 100, "--data-path"); },
                    {"--data-path", dir.str(), "no *.bin"});
}

TEST(TokenDataset, SequenceLongerThanShard) {
  TempDir dir;
  const auto p = dir.file("small.bin");
  write_shard(p, iota_tokens(8, 0));
  expect_user_error([&] { TokenDataset ds(p, 8, 100, "--data-path"); },
                    {"sequence length T=8", "longer than the data in", p, "(8 tokens"});
}

TEST(TokenDataset, FolderAndGlobResolution) {
  TempDir dir;
  write_shard(dir.file("x_val_000.bin"), iota_tokens(5, 0));
  write_shard(dir.file("x_train_001.bin"), iota_tokens(5, 0));
  write_shard(dir.file("x_train_000.bin"), iota_tokens(5, 0));
  test::write_bytes(dir.file("notes.txt"), "not a shard");
  const auto all = resolve_data_files(dir.str(), "--data-path");
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0], dir.file("x_train_000.bin"));
  EXPECT_EQ(all[1], dir.file("x_train_001.bin"));
  EXPECT_EQ(all[2], dir.file("x_val_000.bin"));
  const auto g = resolve_data_files(dir.file("x_train_*.bin"), "--data-path");
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0], dir.file("x_train_000.bin"));

  const auto train = resolve_split(dir.str(), "train");
  const auto val = resolve_split(dir.str(), "val");
  ASSERT_EQ(train.size(), 2u);
  EXPECT_EQ(train[1], dir.file("x_train_001.bin"));
  ASSERT_EQ(val.size(), 1u);
  EXPECT_EQ(val[0], dir.file("x_val_000.bin"));

  // A single file is train only.
  EXPECT_EQ(resolve_split(dir.file("x_val_000.bin"), "train").size(), 1u);
  EXPECT_TRUE(resolve_split(dir.file("x_val_000.bin"), "val").empty());
}

TEST(TokenDataset, SplitWithoutNamesIsAllTrain) {
  TempDir dir;
  write_shard(dir.file("a.bin"), iota_tokens(5, 0));
  write_shard(dir.file("b.bin"), iota_tokens(5, 0));
  EXPECT_EQ(resolve_split(dir.str(), "train").size(), 2u);
  EXPECT_TRUE(resolve_split(dir.str(), "val").empty());
}

TEST(TokenDataset, SplitWithOnlyValIsAnError) {
  TempDir dir;
  write_shard(dir.file("tiny_val.bin"), iota_tokens(5, 0));
  expect_user_error([&] { resolve_split(dir.str(), "train", "--data-path"); },
                    {"--data-path", dir.str(), "train"});
}

}  // namespace
}  // namespace ft
