// CDEIT (models/cdeit.h): planned == allocated and the arena stays inside the plan (with and
// without recompute, plain and shifted windows), whole-model gradients against finite
// differences (windows, shifts, patch merging, upsampling and skips, widths that change
// between stages), recompute changes nothing, the gradient-ready hook covers every parameter
// once, micro-batches accumulate, adaLN-Zero at initialisation, the Denoiser is the
// evaluation's network, configuration errors name the key, the window ops' permutations on
// the CPU; and PyTorch parity when tests/fixtures/cdeit_tiny.fix exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "backend/diffusion_rng.h"
#include "core/rng.h"
#include "models/cdeit.h"
#include "models/diffusion_model_checks.h"
#include "models/gpt2_fixture.h"
#include "models/registry.h"
#include "plan/fit.h"
#include "train/runtime.h"

namespace ft {
namespace {
using namespace ft::testing;

// Two stages on an 8x8 token grid: stage 0 in 4x4 windows (shifted in its odd block when
// shift), stage 1 (4x4 grid) in 2x2 windows, widths 16 and 24 (head sizes 8 and 12).
CDEITConfig two_stage(int shift = 1, const std::string& predict = "x0") {
  CDEITConfig c;
  c.image = 8;
  c.patch = 1;
  c.in_channels = 1;
  c.cond_channels = 1;
  c.heads = 2;
  c.depths = {2, 2};
  c.widths = {16, 24};
  c.windows = {4, 2};
  c.shift = shift;
  c.mlp_ratio = 2;
  c.freq_dim = 16;
  c.predict = predict;
  return c;
}
// Three stages (grids 4, 2, 1 of 2x2 patches of an 8x8 image), global attention below the
// first, predicting eps, no condition channel.
CDEITConfig three_stage() {
  CDEITConfig c;
  c.image = 8;
  c.patch = 2;
  c.cond_channels = 0;
  c.heads = 1;
  c.depths = {1, 1, 1};
  c.widths = {8, 16, 16};
  c.windows = {2, 0, 0};
  c.mlp_ratio = 2;
  c.freq_dim = 8;
  c.predict = "eps";
  return c;
}

TEST(Cdeit, BlocksFollowTheU) {
  const CDEITConfig c = two_stage();
  const std::vector<CDEITBlock> v = cdeit_blocks(c);
  ASSERT_EQ(v.size(), 6u);  // down 0 (2), down 1 (2), up 0 (2)
  EXPECT_EQ(c.total_blocks(), 6);
  const int runs[] = {0, 0, 1, 1, 2, 2}, stages[] = {0, 0, 1, 1, 0, 0}, shifts[] = {0, 2, 0, 1, 0, 2};
  for (size_t k = 0; k < v.size(); ++k) {
    EXPECT_EQ(v[k].run, runs[k]) << k;
    EXPECT_EQ(v[k].stage, stages[k]) << k;
    EXPECT_EQ(v[k].shift, shifts[k]) << k;
    EXPECT_TRUE(v[k].windowed()) << k;
  }
  EXPECT_FALSE(cdeit_blocks(three_stage())[1].windowed());
}

TEST(Cdeit, PlannedIsAllocatedAndTheArenaStaysInsideIt) {
  for (const CDEITConfig& c : {two_stage(0), two_stage(1, "eps"), three_stage()}) check_plan_and_arena<CDEIT>(c);
}

TEST(Cdeit, WholeModelGradientsMatchFiniteDifferences) {
  check_finite_differences<CDEIT>(two_stage(1, "x0"));
  check_finite_differences<CDEIT>(two_stage(0, "eps"));
  check_finite_differences<CDEIT>(three_stage());
}

TEST(Cdeit, RecomputeChangesNothing) {
  for (const CDEITConfig& c : {two_stage(1), three_stage()}) check_recompute_changes_nothing<CDEIT>(c);
}

// The keep levels (CDEIT::keep_levels) of the preset's 14 blocks, whose [N, H] a sample come in
// four sizes: against every subset, level by level the totals of kept [N, H] the subsets make
// (each exactly once, increasing), each by the most blocks any subset making it has, blocks of
// one size taken last first.
TEST(Cdeit, KeepLevelsAreEveryTotalByTheMostBlocks) {
  for (const CDEITConfig& c : {CDEITConfig{}, three_stage()}) {
    const std::vector<CDEITBlock> blocks = cdeit_blocks(c);
    const size_t K = blocks.size();
    ASSERT_LE(K, 20u);
    auto size = [&](size_t k) { return blocks[k].grid * blocks[k].grid * blocks[k].hidden_mlp; };
    std::map<int64_t, int> most;  // total -> the most blocks of a subset making it
    for (uint32_t m = 0; m < (1u << K); ++m) {
      int64_t total = 0;
      for (size_t k = 0; k < K; ++k)
        if (m >> k & 1u) total += size(k);
      int& best = most.try_emplace(total, 0).first->second;
      best = std::max(best, std::popcount(m));
    }
    const std::vector<std::vector<bool>> levels = CDEIT::keep_levels(blocks);
    ASSERT_EQ(levels.size(), most.size()) << c.describe();
    size_t l = 0;
    for (const auto& [total, count] : most) {
      const std::vector<bool>& kept = levels[l++];
      ASSERT_EQ(kept.size(), K);
      int64_t t = 0;
      for (size_t k = 0; k < K; ++k) {
        if (kept[k]) t += size(k);
        for (size_t j = k + 1; j < K; ++j)  // a later block of the same size is kept first
          if (kept[k] && size(j) == size(k)) EXPECT_TRUE(kept[j]) << "level " << l - 1 << " block " << k;
      }
      EXPECT_EQ(t, total) << "level " << l - 1;
      EXPECT_EQ(std::count(kept.begin(), kept.end(), true), count) << "level " << l - 1;
    }
    CDEIT m(c);
    EXPECT_EQ(m.max_keep_level(), static_cast<int>(levels.size()) - 1);
    EXPECT_EQ(m.kept_blocks(0), 0);
    EXPECT_EQ(m.kept_blocks(m.max_keep_level()), static_cast<int>(K));
  }
}

// silu(fch) kept from the forward (PlanShape::keep_level) changes the plan, not the result:
// each kept block's silu(fch) is an activation and its d(fch) no transient of its own, every
// block kept costs more than none, the arena stays inside the plan, and loss and gradients are
// bitwise those of recomputing it; with recompute nothing is kept.
TEST(Cdeit, KeptSiluChangesThePlanNotTheGradients) {
  auto be = make_cpu_backend();
  for (const CDEITConfig& c : {two_stage(1), three_stage()}) {
    CDEIT probe(c);
    const int K = probe.max_keep_level();
    ASSERT_EQ(probe.kept_blocks(K), c.total_blocks());
    std::vector<float> g0;
    double l0 = 0;
    size_t none = 0;
    for (int level = 0; level <= K; ++level) {
      PlanShape s;
      s.micro_batch = 2;
      s.keep_level = level;
      const MemoryPlan p = runtime_plan(probe, *be, s);
      EXPECT_EQ(validate_plan(p), "");
      for (int k = 0; k < c.total_blocks(); ++k)  // a kept block's d(fch) is its kept silu(fch)
        EXPECT_EQ(p.find("g" + std::to_string(k) + ".d_fc") < 0, p.find("l" + std::to_string(k) + ".fch_silu") >= 0 &&
                                                                    p.at("l" + std::to_string(k) + ".fch_silu").cls ==
                                                                        BufferClass::activations)
            << "level " << level << " block " << k;
      if (level == 0) none = p.total_bytes;
      if (level == K) EXPECT_GT(p.total_bytes, none) << c.describe();
      if (level != 0 && level != 1 && level != K / 2 && level != K) continue;  // the steps: a few levels
      DiffusionHarness<CDEIT> h(*be, c, s);
      h.rt->zero_grads();
      const double loss = h.rt->forward_backward(random_diffusion_batch(c, 2, 5).batch(c), 0.5f);
      EXPECT_LE(h.rt->arena().high_water_bytes(), p.total_bytes);
      if (level == 0) {
        g0 = h.grads();
        l0 = loss;
      } else {
        EXPECT_EQ(loss, l0) << "level " << level;
        EXPECT_EQ(h.grads(), g0) << "level " << level;
      }
    }
    PlanShape r;
    r.micro_batch = 2;
    r.recompute = Recompute::block;
    const size_t recomputed = runtime_plan(probe, *be, r).total_bytes;
    r.keep_level = K;
    EXPECT_EQ(runtime_plan(probe, *be, r).total_bytes, recomputed);
  }
}

// fit_batch spends what the budget leaves after the batch on the keep level: the highest that
// fits (a higher level's plan may be smaller, so at least the level the budget was made for,
// and no level above the one chosen fits), never at the cost of the micro-batch, none when the
// request allows none.
TEST(Cdeit, FitTakesTheHighestKeepLevelTheBudgetLeaves) {
  auto be = make_cpu_backend();
  const CDEITConfig c = three_stage();
  CDEIT m(c);
  const PlanFunction fn = [&](const PlanShape& s) { return runtime_plan(m, *be, s); };
  const int K = m.max_keep_level();
  auto request = [&](int64_t global_batch, size_t budget) {
    FitRequest req;
    req.global_batch = global_batch;
    req.budget = budget;
    req.budget_source = "test";
    req.max_keep_level = K;
    return req;
  };
  for (int want = 0; want <= K; ++want) {
    PlanShape s;
    s.micro_batch = 2;
    s.keep_level = want;
    FitRequest req = request(2, fn(s).total_bytes);
    const FitResult r = fit_batch(fn, PlanShape{}, req);
    EXPECT_EQ(r.shape.micro_batch, 2);
    EXPECT_GE(r.shape.keep_level, want);
    EXPECT_LE(r.plan.total_bytes, req.budget);
    for (int above = r.shape.keep_level + 1; above <= K; ++above) {
      s.keep_level = above;
      EXPECT_GT(fn(s).total_bytes, req.budget) << "level " << above << " fits the budget of level " << want;
    }
    req.max_keep_level = 0;
    EXPECT_EQ(fit_batch(fn, PlanShape{}, req).shape.keep_level, 0);
  }
  // A budget that holds micro-batch 3 with nothing kept, or micro-batch 2 with every block
  // kept: the batch comes first (fewer accumulation steps), the kept blocks get what is left.
  PlanShape three, two_all;
  three.micro_batch = 3;
  two_all.micro_batch = 2;
  two_all.keep_level = K;
  ASSERT_LE(fn(two_all).total_bytes, fn(three).total_bytes) << "the case needs the second choice to fit too";
  const FitResult r = fit_batch(fn, PlanShape{}, request(6, fn(three).total_bytes));
  EXPECT_EQ(r.shape.micro_batch, 3);
  EXPECT_EQ(r.grad_accum, 2);
  EXPECT_EQ(r.shape.keep_level, 0);
}

TEST(Cdeit, MicroBatchesAccumulate) { check_micro_batches_accumulate<CDEIT>(two_stage()); }

TEST(Cdeit, FirstMicroBatchOverwritesEveryGradient) { check_first_micro_batch_overwrites<CDEIT>(two_stage()); }

TEST(Cdeit, GradReadyHookCoversEveryParameterOnce) {
  for (const CDEITConfig& c : {two_stage(), three_stage()}) check_grad_ready_once<CDEIT>(c);
}

TEST(Cdeit, ReadsEachParameterOnlyAfterTheForwardNamedIt) {
  for (const CDEITConfig& c : {two_stage(), three_stage()}) check_reads_only_named_params<CDEIT>(c);
}

TEST(Cdeit, AtInitialisationTheOutputIsZeroAndOnlyTheHeadLearns) { check_zero_at_init<CDEIT>(two_stage()); }

TEST(Cdeit, DenoiserIsTheEvaluationsNetwork) {
  for (const std::string predict : {"x0", "eps"}) check_denoiser_is_eval<CDEIT>(two_stage(1, predict), predict);
}

TEST(Cdeit, ConfigurationErrorsNameTheKey) {
  auto expect = [](const nlohmann::json& j, const std::string& needle) {
    try {
      make_model(j, "ckpt.ftc");
      ADD_FAILURE() << "no error for " << j.dump();
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("ckpt.ftc"), std::string::npos) << e.what();
    }
  };
  const nlohmann::json c = preset_config("cdeit-tiny");
  auto j = c;
  j["depth"] = 2;
  expect(j, "unknown CDEIT setting 'depth'");
  j = c;
  j["widths"] = {64};
  expect(j, "one entry a stage");
  j = c;
  j["windows"] = {5, 0};
  expect(j, "windows[0] 5 must be 0 (global) or divide");
  j = c;
  j["heads"] = 3;
  expect(j, "must be a multiple of heads 3");
  j = c;
  j["cond_dim"] = 208;
  expect(j, "cond_dim must be 0");
  j = c;
  j["image"] = 30;
  expect(j, "must halve evenly");
  j = c;
  j.erase("depths");
  expect(j, "lacks 'depths'");
  EXPECT_EQ(make_model(preset_config("cdeit"), "t")->describe().find("CDEIT stages=4 depths=2,2,2,2 widths=512"), 0u);
  EXPECT_EQ(make_model(preset_config("cdeit"), "t")->config(), preset_config("cdeit"));
}

// ---- the window ops on the CPU ------------------------------------------------------------------------

std::vector<float> iota_vec(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}
Tensor host_tensor(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::f32, dims);
}

TEST(WindowOps, PartitionMatchesSwinAndReverseUndoesIt) {
  auto be = make_cpu_backend();
  // a 4x6 grid of C=2, windows of 2, shift 1: window (wy, wx) position (iy, ix) holds the
  // token at ((2wy + iy + 1) mod 4, (2wx + ix + 1) mod 6), Swin's roll by -1 then partition
  const int64_t B = 2, H = 4, W = 6, C = 2, w = 2, s = 1;
  std::vector<float> x = iota_vec(B * H * W * C), win(x.size()), back(x.size());
  be->window_partition(host_tensor(win, {B * 6, w * w, C}), host_tensor(x, {B, H * W, C}), H, W, w, s);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t wy = 0; wy < 2; ++wy)
      for (int64_t wx = 0; wx < 3; ++wx)
        for (int64_t iy = 0; iy < w; ++iy)
          for (int64_t ix = 0; ix < w; ++ix)
            for (int64_t c = 0; c < C; ++c) {
              const int64_t y = (wy * w + iy + s) % H, xx = (wx * w + ix + s) % W;
              const int64_t row = (b * 6 + wy * 3 + wx) * w * w + iy * w + ix;
              ASSERT_EQ(win[static_cast<size_t>(row * C + c)], x[static_cast<size_t>(((b * H + y) * W + xx) * C + c)]);
            }
  be->window_reverse(host_tensor(back, {B, H * W, C}), host_tensor(win, {B * 6, w * w, C}), H, W, w, s);
  EXPECT_EQ(back, x);
}

TEST(PatchMerge, SwinOrderAndSplitUndoesIt) {
  auto be = make_cpu_backend();
  const int64_t B = 2, H = 4, W = 6, C = 3;
  std::vector<float> x = iota_vec(B * H * W * C), m(x.size()), back(x.size());
  be->patch_merge(host_tensor(m, {B, H * W / 4, 4 * C}), host_tensor(x, {B, H * W, C}), H, W);
  const int64_t order[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};  // (dy, dx): Swin's x0, x1, x2, x3
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < H / 2; ++i)
      for (int64_t j = 0; j < W / 2; ++j)
        for (int k = 0; k < 4; ++k)
          for (int64_t c = 0; c < C; ++c) {
            const int64_t src = ((b * H + 2 * i + order[k][0]) * W + 2 * j + order[k][1]) * C + c;
            const int64_t dst = ((b * (H / 2) + i) * (W / 2) + j) * 4 * C + k * C + c;
            ASSERT_EQ(m[static_cast<size_t>(dst)], x[static_cast<size_t>(src)]);
          }
  be->patch_split(host_tensor(back, {B, H * W, C}), host_tensor(m, {B, H * W / 4, 4 * C}), H, W);
  EXPECT_EQ(back, x);
}

TEST(UpsampleNearest, CopiesAndItsBackwardSumsEachBlock) {
  auto be = make_cpu_backend();
  const int64_t B = 2, H = 3, W = 2, C = 2;
  std::vector<float> x = iota_vec(B * H * W * C), up(static_cast<size_t>(4 * B * H * W * C)), dx(x.size());
  be->upsample_nearest(host_tensor(up, {B, 4 * H * W, C}), host_tensor(x, {B, H * W, C}), H, W);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t Y = 0; Y < 2 * H; ++Y)
      for (int64_t X = 0; X < 2 * W; ++X)
        for (int64_t c = 0; c < C; ++c)
          ASSERT_EQ(up[static_cast<size_t>(((b * 2 * H + Y) * 2 * W + X) * C + c)],
                    x[static_cast<size_t>(((b * H + Y / 2) * W + X / 2) * C + c)]);
  be->upsample_nearest_backward(host_tensor(dx, {B, H * W, C}), host_tensor(up, {B, 4 * H * W, C}), H, W);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(dx[i], 4 * x[i]);
}

TEST(WindowOps, BadShapesAreRefused) {
  auto be = make_cpu_backend();
  std::vector<float> a(64), b(64);
  EXPECT_ANY_THROW(be->window_partition(host_tensor(b, {4, 16, 1}), host_tensor(a, {1, 64, 1}), 8, 8, 3, 0));
  EXPECT_ANY_THROW(be->window_partition(host_tensor(b, {4, 16, 1}), host_tensor(a, {1, 64, 1}), 8, 8, 4, 4));
  EXPECT_ANY_THROW(be->patch_merge(host_tensor(b, {1, 16, 2}), host_tensor(a, {1, 64, 1}), 8, 8));
  EXPECT_ANY_THROW(be->upsample_nearest(host_tensor(b, {1, 64, 1}), host_tensor(a, {1, 64, 1}), 8, 8));
}

// ---- PyTorch parity --------------------------------------------------------------------------------------

TEST(CdeitFixture, MatchesPyTorchOnCpu) {
  const std::string path = fixture_path("cdeit_tiny.fix");
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "tests/fixtures/cdeit_tiny.fix missing: run scripts/make_cdeit_fixture.py on a machine with "
                    "PyTorch";
  check_fixture_on_cpu<CDEIT, CDEITConfig>(path);
}

}  // namespace
}  // namespace ft
