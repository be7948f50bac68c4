// The DiT (models/dit.h): planned == allocated and the arena never goes past the plan, whole-
// model gradients against finite differences (condition vector and condition map, predicting
// x0 and eps), recompute changes nothing, the gradient-ready hook covers every parameter once,
// micro-batches accumulate, the position table is DiT's, the Denoiser is the evaluation's
// network, configuration errors name the flag; and PyTorch parity when the fixture exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "backend/diffusion_rng.h"
#include "core/rng.h"
#include "models/dit.h"
#include "models/diffusion_model_checks.h"
#include "models/gpt2_fixture.h"
#include "models/registry.h"
#include "train/runtime.h"

namespace ft {
namespace {
using namespace ft::testing;

// cond: "vector", "map" or "none"
DiTConfig small(const std::string& cond = "vector", const std::string& predict = "x0") {
  DiTConfig c;
  c.depth = 2;
  c.hidden = 16;
  c.heads = 2;
  c.patch = 2;
  c.image = 8;
  c.in_channels = 1;
  c.cond_channels = cond == "map" ? 1 : 0;
  c.cond_dim = cond == "vector" ? 5 : 0;
  c.mlp_ratio = 4;
  c.freq_dim = 16;
  c.predict = predict;
  return c;
}

TEST(DiT, PlannedIsAllocatedAndTheArenaStaysInsideIt) {
  for (const std::string cond : {"vector", "map", "none"})
    check_plan_and_arena<DiT>(small(cond, cond == "map" ? "eps" : "x0"));
}

TEST(DiT, WholeModelGradientsMatchFiniteDifferences) {
  check_finite_differences<DiT>(small("vector", "x0"));
  check_finite_differences<DiT>(small("map", "eps"));
  check_finite_differences<DiT>(small("none", "x0"));
}

TEST(DiT, RecomputeChangesNothing) { check_recompute_changes_nothing<DiT>(small("map")); }

TEST(DiT, MicroBatchesAccumulate) { check_micro_batches_accumulate<DiT>(small("vector")); }

TEST(DiT, FirstMicroBatchOverwritesEveryGradient) {
  for (const std::string cond : {"vector", "map", "none"}) check_first_micro_batch_overwrites<DiT>(small(cond));
}

TEST(DiT, GradReadyHookCoversEveryParameterOnce) {
  for (const std::string cond : {"vector", "map", "none"}) check_grad_ready_once<DiT>(small(cond));
}

TEST(DiT, ReadsEachParameterOnlyAfterTheForwardNamedIt) {
  for (const std::string cond : {"vector", "map", "none"}) check_reads_only_named_params<DiT>(small(cond));
}

TEST(DiT, AtInitialisationTheOutputIsZeroAndOnlyTheHeadLearns) { check_zero_at_init<DiT>(small("vector")); }

TEST(DiT, PositionTableIsDiTs) {
  const int64_t D = 16, grid = 3, q = D / 4;
  const std::vector<float> pe = DiT::position_table(D, grid);
  ASSERT_EQ(pe.size(), static_cast<size_t>(grid * grid * D));
  for (int64_t i = 0; i < grid; ++i)
    for (int64_t j = 0; j < grid; ++j)
      for (int64_t k = 0; k < q; ++k) {
        const double w = std::pow(10000.0, -static_cast<double>(k) / q);
        const float* row = pe.data() + (i * grid + j) * D;
        EXPECT_FLOAT_EQ(row[k], static_cast<float>(std::sin(j * w)));          // columns first
        EXPECT_FLOAT_EQ(row[q + k], static_cast<float>(std::cos(j * w)));
        EXPECT_FLOAT_EQ(row[2 * q + k], static_cast<float>(std::sin(i * w)));  // then rows
        EXPECT_FLOAT_EQ(row[3 * q + k], static_cast<float>(std::cos(i * w)));
      }
}

TEST(DiT, DenoiserIsTheEvaluationsNetwork) {
  for (const std::string predict : {"x0", "eps"}) check_denoiser_is_eval<DiT>(small("map", predict), predict);
}

TEST(DiT, ConfigurationErrorsNameTheFlagOrKey) {
  auto expect = [](const nlohmann::json& j, const std::string& needle) {
    try {
      make_model(j, "ckpt.ftc");
      ADD_FAILURE() << "no error for " << j.dump();
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("ckpt.ftc"), std::string::npos) << e.what();
    }
  };
  const nlohmann::json c = preset_config("dit-tiny");
  auto j = c;
  j["patch_size"] = 2;
  expect(j, "unknown DiT setting 'patch_size'");
  j = c;
  j["image"] = 30;
  expect(j, "--image-size 30 must be a multiple of --patch-size 4");
  j = c;
  j["heads"] = 3;
  expect(j, "--n-embd 64 must be a multiple of --n-head 3");
  j = c;
  j["cond_channels"] = 1;
  expect(j, "--cond");
  j = c;
  j["predict"] = "v";
  expect(j, "predict must be x0 or eps");
  j = c;
  j.erase("depth");
  expect(j, "lacks 'depth'");
  EXPECT_EQ(make_model(preset_config("dit-s"), "t")->describe().find("DiT L=12 D=384"), 0u);
}

TEST(DiTFixture, MatchesPyTorchOnCpu) {
  int found = 0;
  for (const char* name : {"dit_tiny.fix", "dit_tiny_map.fix"}) {
    const std::string path = ft::testing::fixture_path(name);
    if (!std::filesystem::exists(path)) continue;
    ++found;
    check_fixture_on_cpu<DiT, DiTConfig>(path);
  }
  if (found == 0)
    GTEST_SKIP() << "tests/fixtures/dit_tiny.fix and dit_tiny_map.fix missing: run scripts/make_dit_fixture.py "
                    "(and --cond map) on a machine with PyTorch";
}

}  // namespace
}  // namespace ft
