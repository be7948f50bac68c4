// The diffusion task's sample fields (train/diffusion_task.h): the base's image and condition
// pass through, other fields are dropped, t and the noise key are a pure function of (seed,
// sample, epoch) in training (fresh every epoch, uniform over the timesteps) and of the sample
// alone in evaluation.
#include <gtest/gtest.h>

#include <set>

#include "models/dit_config.h"
#include "train/diffusion_task.h"

namespace ft {
namespace {

// image [4] = idx, cond [2] = -idx, baseline [4] (to be dropped) = 7
class FakeEit final : public SampleSource {
 public:
  uint64_t num_samples() const override { return 100; }
  std::vector<FieldSpec> fields() const override {
    return {{"image", DType::f32, 4}, {"cond", DType::f32, 2}, {"baseline", DType::f32, 4}};
  }
  void read(uint64_t idx, std::span<void* const> dst) const override {
    for (int i = 0; i < 4; ++i) static_cast<float*>(dst[0])[i] = static_cast<float>(idx);
    for (int i = 0; i < 2; ++i) static_cast<float*>(dst[1])[i] = -static_cast<float>(idx);
    for (int i = 0; i < 4; ++i) static_cast<float*>(dst[2])[i] = 7.0f;
  }
};

struct Sample {
  float image[4], cond[2];
  int32_t t, key;
};

Sample read(const DiffusionSource& s, uint64_t idx, uint64_t epoch) {
  Sample r{};
  void* dst[4] = {r.image, r.cond, &r.t, &r.key};
  s.read_visit(idx, epoch, dst);
  return r;
}

TEST(DiffusionSource, FieldsAndDraws) {
  DiffusionSource train(std::make_unique<FakeEit>(), /*with_cond=*/true, /*train=*/true, 42);
  const std::vector<FieldSpec> f = train.fields();
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].name, "image");
  EXPECT_EQ(f[1].name, "cond");
  EXPECT_EQ(f[2].name, "t");
  EXPECT_EQ(f[3].name, "noise_key");
  const Sample a = read(train, 5, 0);
  EXPECT_EQ(a.image[3], 5.0f);
  EXPECT_EQ(a.cond[1], -5.0f);
  // deterministic, fresh per epoch, per sample and per seed
  const Sample again = read(train, 5, 0), next = read(train, 5, 1), other = read(train, 6, 0);
  EXPECT_EQ(again.t, a.t);
  EXPECT_EQ(again.key, a.key);
  EXPECT_NE(next.key, a.key);
  EXPECT_NE(other.key, a.key);
  DiffusionSource seed2(std::make_unique<FakeEit>(), true, true, 43);
  EXPECT_NE(read(seed2, 5, 0).key, a.key);
  // timesteps cover [0, 1000) roughly uniformly
  std::set<int32_t> ts;
  double mean = 0;
  for (uint64_t e = 0; e < 50; ++e)
    for (uint64_t i = 0; i < 100; ++i) {
      const Sample s = read(train, i, e);
      ASSERT_GE(s.t, 0);
      ASSERT_LT(s.t, kDiffusionSteps);
      ts.insert(s.t);
      mean += s.t / 5000.0;
    }
  EXPECT_GT(ts.size(), 950u);
  EXPECT_NEAR(mean, 499.5, 15);
  // evaluation: the same draw every epoch and whatever the run seed
  DiffusionSource eval(std::make_unique<FakeEit>(), true, false, 42), eval2(std::make_unique<FakeEit>(), true, false, 9);
  EXPECT_EQ(read(eval, 5, 0).key, read(eval, 5, 3).key);
  EXPECT_EQ(read(eval, 5, 0).t, read(eval2, 5, 0).t);
  EXPECT_EQ(read(eval, 5, 0).key, read(eval2, 5, 0).key);
  // without a condition the field is dropped too
  DiffusionSource uncond(std::make_unique<FakeEit>(), false, true, 42);
  EXPECT_EQ(uncond.fields().size(), 3u);
  EXPECT_EQ(uncond.fields()[1].name, "t");
}

}  // namespace
}  // namespace ft
