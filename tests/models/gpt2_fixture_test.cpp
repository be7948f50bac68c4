// Whole-model parity with PyTorch on the CPU backend (fp32): logits, loss, every gradient,
// 10 AdamW steps with clipping. The fixture comes from scripts/make_gpt2_fixture.py.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#include "models/gpt2_fixture.h"

namespace ft {
namespace {
using namespace ft::testing;

TEST(GPT2Fixture, MatchesPyTorchOnCpu) {
  const std::string path = fixture_path("gpt2_tiny.fix");
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " missing: run scripts/make_gpt2_fixture.py on a machine with PyTorch";
  Fixture fx(path);
  auto be = make_cpu_backend();
  FixtureRun r = run_gpt2_fixture(fx, *be, Precision::fp32);
  EXPECT_LT(rel_error(r.logits, fx.get<float>("logits")), 1e-5);
  EXPECT_NEAR(r.loss, fx.get<float>("loss")[0], 1e-5);
  auto want = fx.get<float>("grads");
  EXPECT_LT(rel_error(r.grads, want), 1e-4);
  // Per parameter tensor too, so one wrong small tensor is not hidden by the big ones.
  GPT2Config cfg{fx.config["n_layer"], fx.config["n_head"], fx.config["n_embd"], fx.config["seq_len"],
                 fx.config["vocab_size"]};
  // (a named model: a range-for over a member of a temporary reads freed memory in C++20)
  const GPT2LM lm(cfg);
  for (const auto& e : lm.param_table().entries()) {
    std::vector<float> a(r.grads.begin() + e.offset, r.grads.begin() + e.offset + e.count);
    std::vector<float> b(want.begin() + e.offset, want.begin() + e.offset + e.count);
    EXPECT_LT(rel_error(a, b), 1e-4) << e.name;
  }
  auto losses = fx.get<float>("step_losses");
  ASSERT_EQ(r.step_losses.size(), losses.size());
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(r.step_losses[i], losses[i], 2e-5) << "step " << i;
  EXPECT_LT(rel_error(r.params_after, fx.get<float>("params_after")), 1e-5);
}

}  // namespace
}  // namespace ft
