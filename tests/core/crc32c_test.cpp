// CRC-32C against published vectors (RFC 3720 B.4), incremental use, and hardware vs table.
#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace ft {
namespace {

TEST(Crc32c, KnownVectors) {
  const char* s = "123456789";
  EXPECT_EQ(crc32c(s, 9), 0xE3069283u);
  EXPECT_EQ(crc32c_portable(s, 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c_portable(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, IncrementalAndPathsAgree) {
  std::mt19937 rng(42);
  std::vector<uint8_t> buf(10007);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const uint32_t whole = crc32c(buf.data(), buf.size());
  EXPECT_EQ(crc32c_portable(buf.data(), buf.size()), whole);
  // Every split point class (unaligned heads and tails) gives the same result.
  for (size_t split : {0, 1, 3, 7, 8, 9, 100, 4096, 10006, 10007}) {
    uint32_t c = crc32c(buf.data(), split);
    EXPECT_EQ(crc32c(buf.data() + split, buf.size() - split, c), whole) << split;
    uint32_t p = crc32c_portable(buf.data(), split);
    EXPECT_EQ(crc32c_portable(buf.data() + split, buf.size() - split, p), whole) << split;
  }
  // Unaligned starts and odd lengths, hardware vs table.
  for (size_t off = 0; off < 9; ++off)
    for (size_t len : {0, 1, 5, 8, 15, 16, 17, 63, 1000})
      EXPECT_EQ(crc32c(buf.data() + off, len), crc32c_portable(buf.data() + off, len));
}

}  // namespace
}  // namespace ft
