// CDEIT (models/cdeit.h): planned == allocated and the arena stays inside the plan (with and
// without recompute, plain and shifted windows), whole-model gradients against finite
// differences (windows, shifts, patch merging, upsampling and skips, widths that change
// between stages), recompute changes nothing, the gradient-ready hook covers every parameter
// once, micro-batches accumulate, adaLN-Zero at initialisation, the Denoiser is the
// evaluation's network, configuration errors name the key, the window ops' permutations on
// the CPU; and PyTorch parity when tests/fixtures/cdeit_tiny.fix exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "backend/diffusion_rng.h"
#include "core/rng.h"
#include "models/cdeit.h"
#include "models/diffusion_fixture.h"
#include "models/gpt2_fixture.h"
#include "models/registry.h"
#include "train/runtime.h"

namespace ft {
namespace {

using CBatch = testing::DiffusionBatch;
CBatch random_batch(const CDEITConfig& c, int64_t b, uint64_t seed) { return testing::random_diffusion_batch(c, b, seed); }

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

struct Harness {
  CDEIT model;
  std::unique_ptr<ModelRuntime> rt;
  Harness(Backend& be, const CDEITConfig& c, const PlanShape& s, bool perturb = true, uint64_t seed = 7) : model(c) {
    rt = std::make_unique<ModelRuntime>(model, be, s);
    std::vector<float> host(static_cast<size_t>(model.num_params()));
    model.init_params(seed, host.data());
    if (perturb) {  // so that the zero adaLN and final layer do not hide the other gradients
      Rng rng(seed + 1);
      for (float& v : host) v += 0.15f * static_cast<float>(rng.normal());
    }
    rt->load_params_from_host(host.data());
  }
  std::vector<float> params() const {
    std::vector<float> p(static_cast<size_t>(model.num_params()));
    rt->copy_params_to_host(p.data());
    return p;
  }
  std::vector<float> grads() const {
    std::vector<float> g(static_cast<size_t>(model.num_params()));
    rt->copy_grads_to_host(g.data());
    return g;
  }
};

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
  auto be = make_cpu_backend();
  for (const CDEITConfig& c : {two_stage(0), two_stage(1, "eps"), three_stage()}) {
    for (Recompute rc : {Recompute::none, Recompute::block}) {
      PlanShape s;
      s.micro_batch = 3;
      s.eval_batch = 4;
      s.recompute = rc;
      CDEIT m(c);
      const MemoryPlan p = runtime_plan(m, *be, s);
      std::set<std::string> names;
      for (const auto& buf : p.buffers) EXPECT_TRUE(names.insert(buf.name).second) << buf.name;
      EXPECT_EQ(validate_plan(p), "");
      EXPECT_EQ(names.count("rf.qkv"), rc == Recompute::block ? 1u : 0u);
      Harness h(*be, c, s);
      EXPECT_EQ(h.rt->plan().total_bytes, p.total_bytes);
      h.rt->zero_grads();
      const double loss = h.rt->forward_backward(random_batch(c, 3, 1).batch(c), 1.0f / 3);
      EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;
      EXPECT_TRUE(std::isfinite(h.rt->eval_loss(random_batch(c, 4, 2).batch(c))));
      std::vector<float> out(static_cast<size_t>(5 * c.image_elems()));
      CBatch pb = random_batch(c, 5, 3);  // more than the eval batch: two chunks
      h.model.predict(pb.image.data(), c.cond_channels ? pb.cond.data() : nullptr, pb.t.data(), 5, out.data());
      EXPECT_LE(h.rt->arena().high_water_bytes(), p.total_bytes) << c.describe();
      PlanShape e = s;
      e.training = false;
      EXPECT_LT(runtime_plan(m, *be, e).total_bytes, p.total_bytes);
    }
  }
}

double loss_at(Harness& h, const Batch& b) {
  h.rt->zero_grads();
  return h.rt->forward_backward(b, 1.0f);
}

void check_finite_differences(const CDEITConfig& c) {
  auto be = make_cpu_backend();
  PlanShape s;
  s.micro_batch = 2;
  s.eval_batch = 2;
  Harness h(*be, c, s);
  CBatch db = random_batch(c, 2, 3);
  db.t = {999, 400};
  const Batch b = db.batch(c);
  loss_at(h, b);
  const std::vector<float> g = h.grads();
  std::vector<float> p = h.params();
  std::vector<int64_t> coords;
  for (const ParamEntry& e : h.model.param_table().entries())
    for (int64_t k : {int64_t{0}, e.count / 3, e.count - 1}) coords.push_back(e.offset + k);
  const float eps = 2e-3f;
  int nonzero = 0;
  for (int64_t i : coords) {
    const float keep = p[static_cast<size_t>(i)];
    p[static_cast<size_t>(i)] = keep + eps;
    h.rt->load_params_from_host(p.data());
    const double up = loss_at(h, b);
    p[static_cast<size_t>(i)] = keep - eps;
    h.rt->load_params_from_host(p.data());
    const double down = loss_at(h, b);
    p[static_cast<size_t>(i)] = keep;
    const double fd = (up - down) / (2 * eps);
    nonzero += std::fabs(fd) > 1e-4;
    EXPECT_NEAR(g[static_cast<size_t>(i)], fd, 2e-3 + 2e-2 * std::fabs(fd)) << c.describe() << " parameter " << i;
  }
  EXPECT_GT(nonzero, static_cast<int>(coords.size()) / 2) << "most gradients should be non-zero";
}

TEST(Cdeit, WholeModelGradientsMatchFiniteDifferences) {
  check_finite_differences(two_stage(1, "x0"));
  check_finite_differences(two_stage(0, "eps"));
  check_finite_differences(three_stage());
}

TEST(Cdeit, RecomputeChangesNothing) {
  auto be = make_cpu_backend();
  for (const CDEITConfig& c : {two_stage(1), three_stage()}) {
    std::vector<float> g[2];
    double loss[2];
    for (int r = 0; r < 2; ++r) {
      PlanShape s;
      s.micro_batch = 2;
      s.recompute = r ? Recompute::block : Recompute::none;
      Harness h(*be, c, s);
      h.rt->zero_grads();
      loss[r] = h.rt->forward_backward(random_batch(c, 2, 5).batch(c), 0.5f);
      g[r] = h.grads();
    }
    EXPECT_EQ(loss[0], loss[1]);
    EXPECT_EQ(g[0], g[1]);
  }
}

TEST(Cdeit, MicroBatchesAccumulate) {
  auto be = make_cpu_backend();
  const CDEITConfig c = two_stage();
  PlanShape s;
  s.micro_batch = 2;
  Harness h(*be, c, s);
  CBatch a = random_batch(c, 2, 11), b = random_batch(c, 2, 12);
  h.rt->zero_grads();
  h.rt->forward_backward(a.batch(c), 0.25f);
  const std::vector<float> ga = h.grads();
  h.rt->zero_grads();
  h.rt->forward_backward(b.batch(c), 0.25f);
  const std::vector<float> gb = h.grads();
  h.rt->zero_grads();
  h.rt->forward_backward(a.batch(c), 0.25f);
  h.rt->forward_backward(b.batch(c), 0.25f);
  const std::vector<float> both = h.grads();
  for (size_t i = 0; i < both.size(); ++i) ASSERT_NEAR(both[i], ga[i] + gb[i], 1e-5 + 1e-5 * std::fabs(both[i])) << i;
}

TEST(Cdeit, GradReadyHookCoversEveryParameterOnce) {
  auto be = make_cpu_backend();
  for (const CDEITConfig& c : {two_stage(), three_stage()}) {
    PlanShape s;
    s.micro_batch = 2;
    Harness h(*be, c, s);
    std::vector<int> seen(static_cast<size_t>(h.model.num_params()), 0);
    h.rt->zero_grads();
    h.rt->forward_backward(random_batch(c, 2, 4).batch(c), 0.5f, [&](std::span<const ParamRange> rs) {
      for (const ParamRange& r : rs)
        for (int64_t i = r.offset; i < r.offset + r.count; ++i) ++seen[static_cast<size_t>(i)];
    });
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(seen.size())) << c.describe();
  }
}

TEST(Cdeit, AtInitialisationTheOutputIsZeroAndOnlyTheHeadLearns) {
  auto be = make_cpu_backend();
  const CDEITConfig c = two_stage();
  PlanShape s;
  s.micro_batch = 2;
  Harness h(*be, c, s, /*perturb=*/false);
  CBatch db = random_batch(c, 2, 6);
  h.rt->zero_grads();
  const double loss = h.rt->forward_backward(db.batch(c), 1.0f);
  double want = 0;
  for (float v : db.image) want += static_cast<double>(v) * v / static_cast<double>(c.image_elems());
  EXPECT_NEAR(loss, want, 1e-5 * want);
  const std::vector<float> g = h.grads();
  for (const ParamEntry& e : h.model.param_table().entries()) {
    double n = 0;
    for (int64_t i = 0; i < e.count; ++i) n += std::fabs(g[static_cast<size_t>(e.offset + i)]);
    if (e.name == "out_w" || e.name == "out_b") EXPECT_GT(n, 0) << e.name;
    else if (e.name != "final_ada_w" && e.name != "final_ada_b") EXPECT_EQ(n, 0) << e.name;
  }
}

TEST(Cdeit, DenoiserIsTheEvaluationsNetwork) {
  auto be = make_cpu_backend();
  for (const std::string predict : {"x0", "eps"}) {
    const CDEITConfig c = two_stage(1, predict);
    PlanShape s;
    s.micro_batch = 1;
    s.eval_batch = 3;
    Harness h(*be, c, s);
    CBatch db = random_batch(c, 3, 8);
    const double eval = h.rt->eval_loss(db.batch(c));
    const int64_t E = c.image_elems();
    std::vector<float> xt(db.image.size()), eps(db.image.size()), out(db.image.size());
    for (int64_t b = 0; b < 3; ++b) {
      const double ab = diffusion_alpha_bars()[static_cast<size_t>(db.t[static_cast<size_t>(b)])];
      for (int64_t i = 0; i < E; ++i) {
        const size_t k = static_cast<size_t>(b * E + i);
        eps[k] = diffusion_normal(kDiTNoiseSeed, static_cast<uint32_t>(db.keys[static_cast<size_t>(b)]),
                                  static_cast<uint64_t>(i));
        xt[k] = static_cast<float>(std::sqrt(ab)) * db.image[k] + static_cast<float>(std::sqrt(1 - ab)) * eps[k];
      }
    }
    h.model.predict(xt.data(), db.cond.data(), db.t.data(), 3, out.data());
    const std::vector<float>& target = predict == "x0" ? db.image : eps;
    double mse = 0;
    for (size_t k = 0; k < out.size(); ++k) mse += (out[k] - target[k]) * (out[k] - target[k]) / static_cast<double>(E);
    EXPECT_NEAR(mse, eval, 1e-5 * eval) << predict;
  }
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
  using namespace ft::testing;
  const std::string path = fixture_path("cdeit_tiny.fix");
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "tests/fixtures/cdeit_tiny.fix missing: run scripts/make_cdeit_fixture.py on a machine with "
                    "PyTorch";
  Fixture fx(path);
  const CDEITConfig c = CDEITConfig::from_json(fx.config.at("model"), path);
  const int64_t B = fx.config.at("batch").get<int64_t>();
  auto be = make_cpu_backend();
  PlanShape s;
  s.micro_batch = B;
  s.eval_batch = B;
  CDEIT model(c);
  ModelRuntime rt(model, *be, s);
  ASSERT_EQ(static_cast<int64_t>(fx.get<float>("params").size()), model.num_params());
  const CBatch db = fixture_batch(fx);
  const DiffusionFixtureRun r = run_diffusion_fixture(fx, rt, db.batch(c), model.num_params());
  const float want_loss = fx.get<float>("loss")[0];
  EXPECT_NEAR(r.loss, want_loss, 1e-5 * std::fabs(want_loss) + 1e-7);
  const std::vector<float> want = fx.get<float>("grads");
  EXPECT_LT(rel_error(r.grads, want), 1e-4);
  for (const ParamEntry& e : model.param_table().entries()) {
    std::vector<float> a(r.grads.begin() + e.offset, r.grads.begin() + e.offset + e.count);
    std::vector<float> b(want.begin() + e.offset, want.begin() + e.offset + e.count);
    EXPECT_LT(rel_error(a, b), 1e-3) << e.name;
  }
  if (fx.index.contains("step_losses")) {
    const std::vector<float> losses = fx.get<float>("step_losses");
    ASSERT_EQ(r.step_losses.size(), losses.size());
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(r.step_losses[i], losses[i], 1e-5 * std::fabs(losses[i]) + 1e-7) << "step " << i;
    EXPECT_LT(rel_error(r.params_after, fx.get<float>("params_after")), 1e-5);
  }
  rt.load_params_from_host(fx.get<float>("params").data());  // the prediction with the starting weights
  std::vector<float> out(static_cast<size_t>(B * c.image_elems()));
  model.predict(fx.get<float>("x_t").data(), db.cond.data(), db.t.data(), B, out.data());
  EXPECT_LT(rel_error(out, fx.get<float>("pred")), 1e-4);
}

}  // namespace
}  // namespace ft
