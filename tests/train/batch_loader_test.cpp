// The background loader returns exactly what the inline one does, and rethrows data errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "core/error.h"
#include "data/token_shard.h"
#include "data/dataset.h"
#include "train/batch_loader.h"

namespace ft {
namespace {

TEST(BatchLoader, BackgroundMatchesInlineAndRethrows) {
  const std::string dir = "/tmp/fittrain_test_loader_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<uint32_t> toks(4000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint32_t>((i * 7) % 50);
  toks[3000] = 99;  // outside a vocabulary of 60
  write_shard(dir + "/a.bin", toks);
  TokenDataset data(dir + "/a.bin", 16, 60, "--data-path");
  BatchLoader inl(data, 4, false), bg(data, 4, true);
  std::vector<uint64_t> idx = {5, 1, 9, 2, 7, 3};
  for (int round = 0; round < 3; ++round) {
    std::span<const uint64_t> a(idx.data() + round * 2, 2);
    inl.request(a);
    bg.request(a);
    auto x = inl.get(), y = bg.get();
    ASSERT_EQ(x.size, y.size);
    for (const char* f : {"tokens", "targets"}) {
      const int32_t* a = x.data<int32_t>(f);
      EXPECT_TRUE(std::equal(a, a + x.size * 16, y.data<int32_t>(f))) << f;
    }
  }
  const uint64_t bad = 3000 / 16;  // the window holding token 99
  bg.request(std::span<const uint64_t>(&bad, 1));
  EXPECT_THROW(bg.get(), UserError);
}

}  // namespace
}  // namespace ft
