// Whole-model parity with PyTorch on the CUDA backend: the same fixture as the CPU test,
// fp32 at tight tolerance, bf16 and fp16 at mixed-precision tolerance.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/backend.h"
#include "models/gpt2_fixture.h"

namespace ft {
namespace {
using namespace ft::testing;

TEST(GPU_GPT2Fixture, MatchesPyTorch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Fixture fx(fixture_path("gpt2_tiny.fix"));
  struct Tol { Precision p; double logits, loss, grads, steps, params; };
  // fp16 runs without loss scaling (dloss = 1/N as is); its tolerances are tighter than bf16's
  // (11 mantissa bits against 8).
  for (Tol t : {Tol{Precision::fp32, 1e-4, 1e-4, 1e-3, 1e-4, 1e-4},
                Tol{Precision::bf16, 2e-2, 2e-2, 6e-2, 3e-2, 1e-2},
                Tol{Precision::fp16, 1e-2, 1e-2, 3e-2, 1.5e-2, 5e-3}}) {
    auto be = make_backend(DeviceKind::cuda);
    FixtureRun r = run_gpt2_fixture(fx, *be, t.p);
    const char* name = precision_name(t.p);
    EXPECT_LT(rel_error(r.logits, fx.get<float>("logits")), t.logits) << name;
    EXPECT_NEAR(r.loss, fx.get<float>("loss")[0], t.loss * 5) << name;
    EXPECT_LT(rel_error(r.grads, fx.get<float>("grads")), t.grads) << name;
    auto losses = fx.get<float>("step_losses");
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(r.step_losses[i], losses[i], t.steps * 5) << name << " step " << i;
    EXPECT_LT(rel_error(r.params_after, fx.get<float>("params_after")), t.params) << name;
    std::printf("[%s] logits %.2e grads %.2e params %.2e final loss %.5f (torch %.5f)\n", name,
                rel_error(r.logits, fx.get<float>("logits")), rel_error(r.grads, fx.get<float>("grads")),
                rel_error(r.params_after, fx.get<float>("params_after")), r.step_losses.back(), losses.back());
  }
}

}  // namespace
}  // namespace ft
