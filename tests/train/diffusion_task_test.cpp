// The diffusion task's sample fields (train/diffusion_task.h): the base's image and condition
// pass through, other fields are dropped, t and the noise key are a pure function of (seed,
// sample, epoch) in training (fresh every epoch, uniform over the timesteps) and of the sample
// alone in evaluation.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "models/dit_config.h"
#include "models/registry.h"
#include "train/diffusion_task.h"
#include "train/part_comm.h"
#include "train/runtime.h"

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

// The reconstruction metrics of an evaluation split over two ranks (EvalShard): rank 0
// reconstructs images 0, 2, 4, 6 of 7, rank 1 images 1, 3, 5, each with its sample index's
// noise, and the sums each adds over the ranks (RMSE, PSNR, SSIM, images) are its own part's,
// which together are one process's whole (to rounding: a sample's forward may round
// differently in another batch).
TEST(DiffusionTask, ReconstructionMetricsSplitTheirImagesOverTheRanks) {
  const std::string dir = "/tmp/fittrain_test_diffusion_split_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::string prep = std::string(FITTRAIN_BINARY) + " prepare --synthetic eit --out " + dir +
                           " --train 8 --valid 8 --test 8 --image-size 32 >/dev/null 2>&1";
  ASSERT_EQ(std::system(prep.c_str()), 0) << prep;
  RunConfig rc;
  rc.task = "diffusion";
  rc.data_path = dir;
  rc.eval_images = 7;
  const nlohmann::json cfg = preset_config("dit-tiny");
  std::unique_ptr<Model> model = make_model(cfg, "test");
  auto task = make_task(rc, *model, true);
  auto be = make_cpu_backend();
  std::vector<float> w(static_cast<size_t>(model->num_params()));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * std::sin(0.37f * static_cast<float>(i));
  PlanShape s;
  s.training = false;
  s.eval_batch = 4;
  auto metric = [](const std::vector<Metric>& ms, const std::string& name) {
    for (const Metric& m : ms)
      if (m.name == name) return m.value;
    ADD_FAILURE() << "no metric " << name;
    return 0.0;
  };
  ModelRuntime alone(*model, *be, s);
  alone.load_params_from_host(w.data());
  const std::vector<Metric> whole = task->model_metrics(alone, *task->val_data());
  double sums[3] = {0, 0, 0}, images = 0, part_rmse[2];
  for (int r = 0; r < 2; ++r) {
    std::unique_ptr<Model> m = make_model(cfg, "test");
    test::PartComm comm(r);
    PlanShape ps = s;
    ps.world_size = 2;
    ModelRuntime rt(*m, *be, ps, &comm);
    rt.load_params_from_host(w.data());
    const std::vector<Metric> part = task->model_metrics(rt, *task->val_data());
    ASSERT_EQ(comm.sums.size(), 5u);
    EXPECT_EQ(comm.sums[4], 0.0) << "rank " << r << " ran out of memory";
    EXPECT_EQ(comm.sums[3], r == 0 ? 4.0 : 3.0) << "rank " << r << "'s images";
    part_rmse[r] = metric(part, "rmse");
    EXPECT_NEAR(part_rmse[r], comm.sums[0] / comm.sums[3], 1e-12);
    for (int k = 0; k < 3; ++k) sums[k] += comm.sums[static_cast<size_t>(k)];
    images += comm.sums[3];
    // the baselines come from the data alone: every rank scores all of them
    EXPECT_EQ(metric(part, "tr_rmse"), metric(whole, "tr_rmse"));
  }
  EXPECT_NE(part_rmse[0], part_rmse[1]);
  EXPECT_NEAR(sums[0] / images, metric(whole, "rmse"), 1e-5 * metric(whole, "rmse"));
  EXPECT_NEAR(sums[1] / images, metric(whole, "psnr"), 1e-5 * metric(whole, "psnr"));
  EXPECT_NEAR(sums[2] / images, metric(whole, "ssim"), 1e-5 * std::fabs(metric(whole, "ssim")));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ft
