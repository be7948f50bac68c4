#include "data/token_shard.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <vector>

#include "core/host_memory.h"
#include "data/mapped_file.h"
#include "test_util.h"

namespace ft {
namespace {

using test::expect_user_error;
using test::TempDir;

TEST(TokenShard, RoundTripU16) {
  TempDir dir;
  std::vector<uint32_t> toks = {0, 1, 2, 50256, 65535, 7};
  write_shard(dir.file("a.bin"), toks);
  EXPECT_EQ(std::filesystem::file_size(dir.file("a.bin")), kShardHeaderBytes + 2 * toks.size());
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.bin.tmp")));
  TokenShard s(dir.file("a.bin"));
  EXPECT_EQ(s.token_bytes(), 2);
  ASSERT_EQ(s.size(), toks.size());
  for (size_t i = 0; i < toks.size(); ++i) EXPECT_EQ(s.token(i), toks[i]);
}

TEST(TokenShard, RoundTripU32) {
  TempDir dir;
  std::vector<uint32_t> toks = {3, 65536, 100000, 0, 200019};
  write_shard(dir.file("a.bin"), toks);
  EXPECT_EQ(std::filesystem::file_size(dir.file("a.bin")), kShardHeaderBytes + 4 * toks.size());
  TokenShard s(dir.file("a.bin"));
  EXPECT_EQ(s.token_bytes(), 4);
  ASSERT_EQ(s.size(), toks.size());
  for (size_t i = 0; i < toks.size(); ++i) EXPECT_EQ(s.token(i), toks[i]);
  TokenShard moved(std::move(s));
  EXPECT_EQ(moved.token(2), 100000u);
}

TEST(TokenShard, MissingFile) {
  TempDir dir;
  const auto p = dir.file("nope.bin");
  expect_user_error([&] { TokenShard s(p); }, {p, "cannot open"});
}

// Writes a valid shard then patches header int `which` to `value`.
void patch_header(const std::string& path, int which, int32_t value) {
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, which * 4, SEEK_SET);
  std::fwrite(&value, 4, 1, f);
  std::fclose(f);
}

TEST(TokenShard, WrongMagic) {
  TempDir dir;
  const auto p = dir.file("a.bin");
  write_shard(p, std::vector<uint32_t>{1, 2, 3});
  patch_header(p, 0, 12345);
  expect_user_error([&] { TokenShard s(p); }, {p, "magic", "12345"});
}

TEST(TokenShard, WrongVersion) {
  TempDir dir;
  const auto p = dir.file("a.bin");
  write_shard(p, std::vector<uint32_t>{1, 2, 3});
  patch_header(p, 1, 7);
  expect_user_error([&] { TokenShard s(p); }, {p, "version", "7"});
}

TEST(TokenShard, Truncated) {
  TempDir dir;
  const auto p = dir.file("a.bin");
  write_shard(p, std::vector<uint32_t>(100, 5));
  std::filesystem::resize_file(p, kShardHeaderBytes + 150);
  expect_user_error([&] { TokenShard s(p); },
                    {p, "truncated", "expected 1224 bytes", "has 1174 bytes"});
}

TEST(TokenShard, TooSmallForHeader) {
  TempDir dir;
  const auto p = dir.file("a.bin");
  test::write_bytes(p, "hello");
  expect_user_error([&] { TokenShard s(p); }, {p, "header"});
}

TEST(TokenShard, MaxTokenAndFirstAtLeast) {
  TempDir dir;
  // Both formats, a size that is no multiple of any vector width, and one large enough for
  // the threaded path (>= 2^22 tokens).
  for (size_t n : {size_t{0}, size_t{1}, size_t{37}, (size_t{1} << 22) + 5}) {
    for (uint32_t top : {uint32_t{65535}, uint32_t{1} << 20}) {
      std::mt19937 rng(static_cast<uint32_t>(n + top));
      std::vector<uint32_t> t(n);
      for (auto& x : t) x = rng() % 1000;
      if (n > 0) t[n - 1 - n / 3] = top;  // the maximum, somewhere inside
      write_shard(dir.file("m.bin"), t);
      TokenShard s(dir.file("m.bin"));
      EXPECT_EQ(s.token_bytes(), n > 0 && top > 65535 ? 4 : 2);
      EXPECT_EQ(s.max_token(), n == 0 ? 0u : top) << n;
      EXPECT_EQ(s.first_token_at_least(top), n == 0 ? 0 : n - 1 - n / 3) << n;
      EXPECT_EQ(s.first_token_at_least(top + 1), n);
    }
  }
}

// (A FIFO would block the old open(2) forever, so it is tested by running the binary under
// timeout(1): BadInput.FifoAsDataPathIsRefusedQuickly.)
TEST(TokenShard, NonRegularFilesAreRefused) {
  TempDir dir;
  expect_user_error([&] { TokenShard s(dir.str()); }, {dir.str(), "folder", "regular file"});
  expect_user_error([&] { TokenShard s("/dev/null"); }, {"/dev/null", "character device"});
}

// A token shard's pages that training has read are handed back (release_data_pages, at every
// logged step) instead of piling up in the resident set: 48 MiB of tokens read in full leave
// the resident set once released, and read again they are the same tokens (the page cache
// kept them). An unmapped shard is no longer released (its range could be someone else's).
TEST(TokenShard, ReadPagesAreHandedBackAndReadAgain) {
  TempDir dir;
  std::vector<uint32_t> toks(size_t{24} << 20);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint32_t>((i * 2654435761u) % 50257);
  write_shard(dir.file("big.bin"), toks);
  auto sum = [](const TokenShard& s) {
    uint64_t t = 0;
    for (size_t i = 0; i < s.size(); ++i) t += s.token(i);
    return t;
  };
  uint64_t want = 0;
  for (uint32_t t : toks) want += t;
  toks = {};
  TokenShard s(dir.file("big.bin"));
  release_data_pages();
  const size_t before = host_rss_bytes();
  EXPECT_EQ(sum(s), want);  // every page read
  const size_t read = host_rss_bytes();
  EXPECT_GE(read, before + (size_t{40} << 20));
  const size_t released = release_data_pages();
  EXPECT_GE(released, size_t{40} << 20);
  EXPECT_LE(host_rss_bytes() + (size_t{40} << 20), read);
  EXPECT_EQ(sum(s), want);  // read again from the page cache
  {
    TokenShard gone(dir.file("big.bin"));
  }  // unmapped: release_data_pages must not touch its range
  release_data_pages();
}

}  // namespace
}  // namespace ft
