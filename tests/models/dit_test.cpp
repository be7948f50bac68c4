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
#include "models/diffusion_fixture.h"
#include "models/gpt2_fixture.h"
#include "models/registry.h"
#include "train/runtime.h"

namespace ft {
namespace {

using DiTBatch = testing::DiffusionBatch;
DiTBatch random_batch(const DiTConfig& c, int64_t b, uint64_t seed) { return testing::random_diffusion_batch(c, b, seed); }

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

struct Harness {
  DiT model;
  std::unique_ptr<ModelRuntime> rt;
  // perturb: add noise to every parameter, so the zero-initialised adaLN and final layer do
  // not hide every other gradient
  Harness(Backend& be, const DiTConfig& c, const PlanShape& s, bool perturb = true, uint64_t seed = 7) : model(c) {
    rt = std::make_unique<ModelRuntime>(model, be, s);
    std::vector<float> host(static_cast<size_t>(model.num_params()));
    model.init_params(seed, host.data());
    if (perturb) {
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

TEST(DiT, PlannedIsAllocatedAndTheArenaStaysInsideIt) {
  auto be = make_cpu_backend();
  for (const std::string cond : {"vector", "map", "none"}) {
    for (Recompute rc : {Recompute::none, Recompute::block}) {
      const DiTConfig c = small(cond, cond == "map" ? "eps" : "x0");
      PlanShape s;
      s.micro_batch = 3;
      s.eval_batch = 4;
      s.recompute = rc;
      DiT m(c);
      const MemoryPlan p = runtime_plan(m, *be, s);
      std::set<std::string> names;
      for (const auto& buf : p.buffers) EXPECT_TRUE(names.insert(buf.name).second) << buf.name;
      EXPECT_EQ(validate_plan(p), "");
      EXPECT_EQ(names.count("rf.qkv"), rc == Recompute::block ? 1u : 0u);
      Harness h(*be, c, s);
      EXPECT_EQ(h.rt->plan().total_bytes, p.total_bytes);
      DiTBatch tb = random_batch(c, 3, 1);
      h.rt->zero_grads();
      const double loss = h.rt->forward_backward(tb.batch(c), 1.0f / 3);
      EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;
      DiTBatch eb = random_batch(c, 4, 2);
      EXPECT_TRUE(std::isfinite(h.rt->eval_loss(eb.batch(c))));
      std::vector<float> out(static_cast<size_t>(5 * c.image_elems()));
      DiTBatch pb = random_batch(c, 5, 3);  // more than the eval batch: two chunks
      h.model.predict(pb.image.data(), cond == "none" ? nullptr : pb.cond.data(), pb.t.data(), 5, out.data());
      EXPECT_LE(h.rt->arena().high_water_bytes(), p.total_bytes) << cond;
      // evaluation only (fittrain test): the training buffers are not planned
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

void check_finite_differences(const DiTConfig& c) {
  auto be = make_cpu_backend();
  PlanShape s;
  s.micro_batch = 2;
  s.eval_batch = 2;
  Harness h(*be, c, s);
  DiTBatch db = random_batch(c, 2, 3);
  db.t = {999, 400};  // a nearly pure-noise sample and a middle one
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
    EXPECT_NEAR(g[static_cast<size_t>(i)], fd, 2e-3 + 2e-2 * std::fabs(fd))
        << c.describe() << " parameter " << i;
  }
  EXPECT_GT(nonzero, static_cast<int>(coords.size()) / 2) << "most gradients should be non-zero";
}

TEST(DiT, WholeModelGradientsMatchFiniteDifferences) {
  check_finite_differences(small("vector", "x0"));
  check_finite_differences(small("map", "eps"));
  check_finite_differences(small("none", "x0"));
}

TEST(DiT, RecomputeChangesNothing) {
  auto be = make_cpu_backend();
  const DiTConfig c = small("map");
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

TEST(DiT, MicroBatchesAccumulate) {
  auto be = make_cpu_backend();
  const DiTConfig c = small("vector");
  PlanShape s;
  s.micro_batch = 2;
  Harness h(*be, c, s);
  DiTBatch a = random_batch(c, 2, 11), b = random_batch(c, 2, 12);
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

TEST(DiT, GradReadyHookCoversEveryParameterOnce) {
  auto be = make_cpu_backend();
  for (const std::string cond : {"vector", "map", "none"}) {
    const DiTConfig c = small(cond);
    PlanShape s;
    s.micro_batch = 2;
    Harness h(*be, c, s);
    std::vector<int> seen(static_cast<size_t>(h.model.num_params()), 0);
    h.rt->zero_grads();
    h.rt->forward_backward(random_batch(c, 2, 4).batch(c), 0.5f, [&](std::span<const ParamRange> rs) {
      for (const ParamRange& r : rs)
        for (int64_t i = r.offset; i < r.offset + r.count; ++i) ++seen[static_cast<size_t>(i)];
    });
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(seen.size())) << cond;
  }
}

TEST(DiT, AtInitialisationTheOutputIsZeroAndOnlyTheHeadLearns) {
  // adaLN-Zero: the final linear and every modulation start at zero, so the prediction is 0
  // and only the final layer's parameters get a gradient in the first step.
  auto be = make_cpu_backend();
  const DiTConfig c = small("vector");
  PlanShape s;
  s.micro_batch = 2;
  s.eval_batch = 2;
  Harness h(*be, c, s, /*perturb=*/false);
  DiTBatch db = random_batch(c, 2, 6);
  h.rt->zero_grads();
  const double loss = h.rt->forward_backward(db.batch(c), 1.0f);
  double want = 0;  // predicting 0 for x0: the mean square of each image
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
  // predict() on x_t made on the host from the same noise gives the evaluation's loss.
  auto be = make_cpu_backend();
  for (const std::string predict : {"x0", "eps"}) {
    const DiTConfig c = small("map", predict);
    PlanShape s;
    s.micro_batch = 1;
    s.eval_batch = 3;
    Harness h(*be, c, s);
    DiTBatch db = random_batch(c, 3, 8);
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

// One fixture of scripts/make_dit_fixture.py: loss, every gradient (per tensor too), the
// Denoiser's prediction on the fixture's x_t, and the fixture's AdamW steps (losses and final
// weights).
void check_fixture(const std::string& path) {
  using namespace ft::testing;
  Fixture fx(path);
  DiTConfig c = DiTConfig::from_json(fx.config.at("model"), path);
  const int64_t B = fx.config.at("batch").get<int64_t>();
  auto be = make_cpu_backend();
  PlanShape s;
  s.micro_batch = B;
  s.eval_batch = B;
  DiT model(c);
  ModelRuntime rt(model, *be, s);
  ASSERT_EQ(static_cast<int64_t>(fx.get<float>("params").size()), model.num_params()) << path;
  const DiTBatch db = fixture_batch(fx);
  const DiffusionFixtureRun r = run_diffusion_fixture(fx, rt, db.batch(c), model.num_params());
  const float want_loss = fx.get<float>("loss")[0];
  EXPECT_NEAR(r.loss, want_loss, 1e-5 * std::fabs(want_loss) + 1e-7) << path;
  const std::vector<float> want = fx.get<float>("grads");
  EXPECT_LT(rel_error(r.grads, want), 1e-4) << path;
  for (const ParamEntry& e : model.param_table().entries()) {
    std::vector<float> a(r.grads.begin() + e.offset, r.grads.begin() + e.offset + e.count);
    std::vector<float> b(want.begin() + e.offset, want.begin() + e.offset + e.count);
    EXPECT_LT(rel_error(a, b), 1e-3) << path << " " << e.name;
  }
  if (fx.index.contains("step_losses")) {
    const std::vector<float> losses = fx.get<float>("step_losses");
    ASSERT_EQ(r.step_losses.size(), losses.size()) << path;
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(r.step_losses[i], losses[i], 1e-5 * std::fabs(losses[i]) + 1e-7) << path << " step " << i;
    EXPECT_LT(rel_error(r.params_after, fx.get<float>("params_after")), 1e-5) << path;
  }
  // the network on the fixture's own x_t (the Denoiser path; also checks the noise: the
  // loss above used x_t drawn on the device from the same keys), with the starting weights
  rt.load_params_from_host(fx.get<float>("params").data());
  std::vector<float> out(static_cast<size_t>(B * c.image_elems()));
  model.predict(fx.get<float>("x_t").data(), db.cond.data(), db.t.data(), B, out.data());
  EXPECT_LT(rel_error(out, fx.get<float>("pred")), 1e-4) << path;
}

TEST(DiTFixture, MatchesPyTorchOnCpu) {
  int found = 0;
  for (const char* name : {"dit_tiny.fix", "dit_tiny_map.fix"}) {
    const std::string path = ft::testing::fixture_path(name);
    if (!std::filesystem::exists(path)) continue;
    ++found;
    check_fixture(path);
  }
  if (found == 0)
    GTEST_SKIP() << "tests/fixtures/dit_tiny.fix and dit_tiny_map.fix missing: run scripts/make_dit_fixture.py "
                    "(and --cond map) on a machine with PyTorch";
}

}  // namespace
}  // namespace ft
