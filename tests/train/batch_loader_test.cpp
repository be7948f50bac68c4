// The background loader returns exactly what the inline one does, and rethrows data errors.
#include <gtest/gtest.h>

#include <vector>

#include "cli/cli_util.h"
#include "core/error.h"
#include "data/token_shard.h"
#include "data/dataset.h"
#include "train/batch_loader.h"

namespace ft {
namespace {

// The data set refuses a token outside the vocabulary when it opens, so a read error that
// reaches the loader is made here: sample `bad` throws as a bad window would.
class FailingSource final : public SampleSource {
 public:
  FailingSource(const SampleSource& inner, uint64_t bad) : inner_(inner), bad_(bad) {}
  uint64_t num_samples() const override { return inner_.num_samples(); }
  std::vector<FieldSpec> fields() const override { return inner_.fields(); }
  void read(uint64_t idx, std::span<void* const> dst) const override {
    if (idx == bad_) throw UserError("sample " + std::to_string(idx) + " is bad");
    inner_.read(idx, dst);
  }

 private:
  const SampleSource& inner_;
  uint64_t bad_;
};

TEST(BatchLoader, BackgroundMatchesInlineAndRethrows) {
  const std::string dir = ::ft::testing::temp_dir("loader");
  std::vector<uint32_t> toks(4000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint32_t>((i * 7) % 50);
  write_shard(dir + "/a.bin", toks);
  TokenDataset tokens(dir + "/a.bin", 16, 60, "--data-path");
  const uint64_t bad = 3000 / 16;
  FailingSource data(tokens, bad);
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
  bg.request(std::span<const uint64_t>(&bad, 1));
  EXPECT_THROW(bg.get(), UserError);
}

}  // namespace
}  // namespace ft
