#include "data/dataset.h"

#include <gtest/gtest.h>

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
  TokenDataset ds(p, 2, 50257, "--data-path");
  int32_t in[2], tg[2];
  ds.read_sample(0, in, tg);
  expect_user_error([&] { ds.read_sample(1, in, tg); }, {p, "70000", "vocab"});
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
