// Whole-model parity of DiT and CDEIT with PyTorch on the CUDA backend: the CPU tests' fixtures
// (scripts/make_dit_fixture.py, scripts/make_cdeit_fixture.py) in fp32 at tight tolerance and
// in bf16 at mixed-precision tolerance: first loss, every gradient, the 10 AdamW steps' losses
// and the final weights.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "backend/backend.h"
#include "models/cdeit.h"
#include "models/diffusion_fixture.h"
#include "models/dit.h"

namespace ft {
namespace {
using namespace ft::testing;

struct Tol {
  Precision p;
  double loss, grads, steps, params;
};

template <class Model, class Config>
void check_on_cuda(const char* name) {
  const std::string path = fixture_path(name);
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " missing";
  Fixture fx(path);
  ASSERT_TRUE(fx.index.contains("step_losses")) << path << " predates the training steps: regenerate it";
  const Config c = Config::from_json(fx.config.at("model"), path);
  const int64_t B = fx.config.at("batch").get<int64_t>();
  const DiffusionBatch db = fixture_batch(fx);
  for (Tol t : {Tol{Precision::fp32, 1e-4, 1e-3, 1e-4, 1e-4}, Tol{Precision::bf16, 3e-2, 8e-2, 3e-2, 1e-2}}) {
    auto be = make_backend(DeviceKind::cuda);
    PlanShape s;
    s.micro_batch = B;
    s.eval_batch = B;
    s.precision = t.p;
    Model model(c);
    ModelRuntime rt(model, *be, s);
    const DiffusionFixtureRun r = run_diffusion_fixture(fx, rt, db.batch(c), model.num_params());
    const char* prec = precision_name(t.p);
    const float want_loss = fx.get<float>("loss")[0];
    EXPECT_NEAR(r.loss, want_loss, t.loss * std::fabs(want_loss)) << name << " " << prec;
    EXPECT_LT(rel_error(r.grads, fx.get<float>("grads")), t.grads) << name << " " << prec;
    const std::vector<float> losses = fx.get<float>("step_losses");
    ASSERT_EQ(r.step_losses.size(), losses.size());
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(r.step_losses[i], losses[i], t.steps * std::fabs(losses[i])) << name << " " << prec << " step " << i;
    EXPECT_LT(rel_error(r.params_after, fx.get<float>("params_after")), t.params) << name << " " << prec;
    std::printf("[%s %s] loss %.6f (torch %.6f) grads %.2e params %.2e final loss %.5f (torch %.5f)\n", name, prec,
                r.loss, want_loss, rel_error(r.grads, fx.get<float>("grads")),
                rel_error(r.params_after, fx.get<float>("params_after")), r.step_losses.back(), losses.back());
  }
}

TEST(GPU_DiffusionFixture, DiTMatchesPyTorch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_on_cuda<DiT, DiTConfig>("dit_tiny.fix");
  check_on_cuda<DiT, DiTConfig>("dit_tiny_map.fix");
}

TEST(GPU_DiffusionFixture, CdeitMatchesPyTorch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_on_cuda<CDEIT, CDEITConfig>("cdeit_tiny.fix");
}

}  // namespace
}  // namespace ft
