#include "data/token_shard.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <vector>

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

}  // namespace
}  // namespace ft
