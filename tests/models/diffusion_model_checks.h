// The whole-model checks DiT and CDEIT share (tests/models/dit_test.cpp, cdeit_test.cpp), for
// any diffusion model with a Denoiser (predict) and a configuration with image_elems(),
// cond_elems() and describe(): planned == allocated and the arena stays inside the plan,
// gradients against central finite differences, block recompute changes no bit, micro-batches
// accumulate, the gradient-ready hook covers every parameter once, adaLN-Zero's zero output at
// initialisation, the Denoiser is the evaluation's network, and PyTorch parity on a fixture.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/diffusion_rng.h"
#include "core/rng.h"
#include "models/host_copies.h"
#include "models/diffusion_fixture.h"
#include "models/dit_config.h"
#include "models/param_need_check.h"
#include "plan/memory_plan.h"
#include "train/runtime.h"

namespace ft::testing {

template <class Model>
struct DiffusionHarness {
  Model model;
  std::unique_ptr<ModelRuntime> rt;
  // perturb: add noise to every parameter, so the zero-initialised adaLN and final layer do
  // not hide every other gradient
  template <class Config>
  DiffusionHarness(Backend& be, const Config& c, const PlanShape& s, bool perturb = true, uint64_t seed = 7)
      : model(c) {
    rt = std::make_unique<ModelRuntime>(model, be, s);
    std::vector<float> host(static_cast<size_t>(model.num_params()));
    model.init_params(seed, host.data());
    if (perturb) {
      Rng rng(seed + 1);
      for (float& v : host) v += 0.15f * static_cast<float>(rng.normal());
    }
    rt->load_params_from_host(host.data());
  }
  std::vector<float> params() const { return testing::host_params(*rt, model.num_params()); }
  std::vector<float> grads() const { return testing::host_grads(*rt, model.num_params()); }
  double loss_at(const Batch& b) {
    rt->zero_grads();
    return rt->forward_backward(b, 1.0f);
  }
};

template <class Model, class Config>
void check_plan_and_arena(const Config& c) {
  auto be = make_cpu_backend();
  for (Recompute rc : {Recompute::none, Recompute::block}) {
    PlanShape s;
    s.micro_batch = 3;
    s.eval_batch = 4;
    s.recompute = rc;
    Model m(c);
    const MemoryPlan p = runtime_plan(m, *be, s);
    std::set<std::string> names;
    for (const auto& buf : p.buffers) EXPECT_TRUE(names.insert(buf.name).second) << buf.name;
    EXPECT_EQ(validate_plan(p), "");
    EXPECT_EQ(names.count("rf.qkv"), rc == Recompute::block ? 1u : 0u);
    DiffusionHarness<Model> h(*be, c, s);
    EXPECT_EQ(h.rt->plan().total_bytes, p.total_bytes);
    h.rt->zero_grads();
    const double loss = h.rt->forward_backward(random_diffusion_batch(c, 3, 1).batch(c), 1.0f / 3);
    EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;
    EXPECT_TRUE(std::isfinite(h.rt->eval_loss(random_diffusion_batch(c, 4, 2).batch(c))));
    std::vector<float> out(static_cast<size_t>(5 * c.image_elems()));
    const DiffusionBatch pb = random_diffusion_batch(c, 5, 3);  // more than the eval batch: two chunks
    h.model.predict(pb.image.data(), c.cond_elems() > 0 ? pb.cond.data() : nullptr, pb.t.data(), 5, out.data());
    EXPECT_LE(h.rt->arena().high_water_bytes(), p.total_bytes) << c.describe();
    // evaluation only (fittrain test): the training buffers are not planned
    PlanShape e = s;
    e.training = false;
    EXPECT_LT(runtime_plan(m, *be, e).total_bytes, p.total_bytes);
  }
}

template <class Model, class Config>
void check_finite_differences(const Config& c) {
  auto be = make_cpu_backend();
  PlanShape s;
  s.micro_batch = 2;
  s.eval_batch = 2;
  DiffusionHarness<Model> h(*be, c, s);
  DiffusionBatch db = random_diffusion_batch(c, 2, 3);
  db.t = {999, 400};  // a nearly pure-noise sample and a middle one
  const Batch b = db.batch(c);
  h.loss_at(b);
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
    const double up = h.loss_at(b);
    p[static_cast<size_t>(i)] = keep - eps;
    h.rt->load_params_from_host(p.data());
    const double down = h.loss_at(b);
    p[static_cast<size_t>(i)] = keep;
    const double fd = (up - down) / (2 * eps);
    nonzero += std::fabs(fd) > 1e-4;
    EXPECT_NEAR(g[static_cast<size_t>(i)], fd, 2e-3 + 2e-2 * std::fabs(fd)) << c.describe() << " parameter " << i;
  }
  EXPECT_GT(nonzero, static_cast<int>(coords.size()) / 2) << "most gradients should be non-zero";
}

template <class Model, class Config>
void check_recompute_changes_nothing(const Config& c) {
  auto be = make_cpu_backend();
  std::vector<float> g[2];
  double loss[2];
  for (int r = 0; r < 2; ++r) {
    PlanShape s;
    s.micro_batch = 2;
    s.recompute = r ? Recompute::block : Recompute::none;
    DiffusionHarness<Model> h(*be, c, s);
    h.rt->zero_grads();
    loss[r] = h.rt->forward_backward(random_diffusion_batch(c, 2, 5).batch(c), 0.5f);
    g[r] = h.grads();
  }
  EXPECT_EQ(loss[0], loss[1]) << c.describe();
  EXPECT_EQ(g[0], g[1]) << c.describe();
}

template <class Model, class Config>
void check_micro_batches_accumulate(const Config& c) {
  auto be = make_cpu_backend();
  PlanShape s;
  s.micro_batch = 2;
  DiffusionHarness<Model> h(*be, c, s);
  const DiffusionBatch a = random_diffusion_batch(c, 2, 11), b = random_diffusion_batch(c, 2, 12);
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

// Model::overwrites_every_grad: after the first zero_grads, the runtime no longer zeroes the
// gradients, so a step must give the same gradients from NaN (every byte 0xff) as from zeros.
// An op that adds into a gradient the step has not yet written carries the NaN through.
template <class Model, class Config>
void check_first_micro_batch_overwrites(const Config& c) {
  auto be = make_cpu_backend();
  for (Recompute rc : {Recompute::none, Recompute::block}) {
    PlanShape s;
    s.micro_batch = 2;
    s.recompute = rc;
    DiffusionHarness<Model> h(*be, c, s);
    ASSERT_TRUE(h.model.overwrites_every_grad());
    const DiffusionBatch db = random_diffusion_batch(c, 2, 21);
    h.rt->zero_grads();
    h.rt->forward_backward(db.batch(c), 0.5f);
    const std::vector<float> from_zero = h.grads();
    const Tensor g = h.rt->grads();
    const std::vector<unsigned char> nan(g.bytes(), 0xff);
    be->copy_to_device(g.data, nan.data(), nan.size());
    h.rt->zero_grads();
    h.rt->forward_backward(db.batch(c), 0.5f);
    const std::vector<float> from_nan = h.grads();
    ASSERT_EQ(from_zero.size(), from_nan.size());
    for (size_t i = 0; i < from_nan.size(); ++i)
      ASSERT_EQ(from_nan[i], from_zero[i]) << "element " << i << ", recompute " << static_cast<int>(rc);
  }
}

template <class Model, class Config>
void check_grad_ready_once(const Config& c) {
  auto be = make_cpu_backend();
  PlanShape s;
  s.micro_batch = 2;
  DiffusionHarness<Model> h(*be, c, s);
  std::vector<int> seen(static_cast<size_t>(h.model.num_params()), 0);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> calls[2];  // each backward's reports
  h.rt->zero_grads();
  h.rt->forward_backward(random_diffusion_batch(c, 2, 4).batch(c), 0.5f, [&](std::span<const ParamRange> rs) {
    calls[0].emplace_back();
    for (const ParamRange& r : rs) {
      calls[0].back().emplace_back(r.offset, r.count);
      for (int64_t i = r.offset; i < r.offset + r.count; ++i) ++seen[static_cast<size_t>(i)];
    }
  });
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(seen.size())) << c.describe();
  // Another batch, adding to the gradients: the same reports in the same calls (a rank whose
  // backward failed replays the last step's reports: GradReducer::drain).
  h.rt->forward_backward(random_diffusion_batch(c, 2, 9).batch(c), 0.5f, [&](std::span<const ParamRange> rs) {
    calls[1].emplace_back();
    for (const ParamRange& r : rs) calls[1].back().emplace_back(r.offset, r.count);
  });
  EXPECT_EQ(calls[0], calls[1]) << c.describe();
}

// The training forward names every parameter before an op reads it (ZeRO-1's gatherer waits
// only for what was named: models/param_need_check.h), with and without recompute.
template <class Model, class Config>
void check_reads_only_named_params(const Config& c) {
  auto be = make_cpu_backend();
  for (Recompute rc : {Recompute::none, Recompute::block}) {
    PlanShape s;
    s.micro_batch = 2;
    s.recompute = rc;
    DiffusionHarness<Model> h(*be, c, s);
    const DiffusionBatch db = random_diffusion_batch(c, 2, 5);
    expect_reads_only_named_params(*h.rt, db.batch(c), c.describe() + ", recompute " + recompute_name(rc));
  }
}

// adaLN-Zero: the final linear and every modulation start at zero, so an x0 model predicts 0
// and only the final layer's parameters get a gradient in the first step.
template <class Model, class Config>
void check_zero_at_init(const Config& c) {
  auto be = make_cpu_backend();
  PlanShape s;
  s.micro_batch = 2;
  s.eval_batch = 2;
  DiffusionHarness<Model> h(*be, c, s, /*perturb=*/false);
  const DiffusionBatch db = random_diffusion_batch(c, 2, 6);
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

// predict() on x_t made on the host from the same noise gives the evaluation's loss.
template <class Model, class Config>
void check_denoiser_is_eval(const Config& c, const std::string& predict) {
  auto be = make_cpu_backend();
  PlanShape s;
  s.micro_batch = 1;
  s.eval_batch = 3;
  DiffusionHarness<Model> h(*be, c, s);
  const DiffusionBatch db = random_diffusion_batch(c, 3, 8);
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
  h.model.predict(xt.data(), c.cond_elems() > 0 ? db.cond.data() : nullptr, db.t.data(), 3, out.data());
  const std::vector<float>& target = predict == "x0" ? db.image : eps;
  double mse = 0;
  for (size_t k = 0; k < out.size(); ++k) mse += (out[k] - target[k]) * (out[k] - target[k]) / static_cast<double>(E);
  EXPECT_NEAR(mse, eval, 1e-5 * eval) << predict;
}

// One fixture of scripts/make_dit_fixture.py or make_cdeit_fixture.py on the CPU: loss, every
// gradient (per tensor too), the fixture's AdamW steps (losses and final weights), and the
// Denoiser's prediction on the fixture's x_t (which also checks the noise: the loss used x_t
// drawn on the device from the same keys).
template <class Model, class Config>
void check_fixture_on_cpu(const std::string& path) {
  Fixture fx(path);
  const Config c = Config::from_json(fx.config.at("model"), path);
  const int64_t B = fx.config.at("batch").get<int64_t>();
  auto be = make_cpu_backend();
  PlanShape s;
  s.micro_batch = B;
  s.eval_batch = B;
  Model model(c);
  ModelRuntime rt(model, *be, s);
  ASSERT_EQ(static_cast<int64_t>(fx.get<float>("params").size()), model.num_params()) << path;
  const DiffusionBatch db = fixture_batch(fx);
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
  rt.load_params_from_host(fx.get<float>("params").data());  // the prediction with the starting weights
  std::vector<float> out(static_cast<size_t>(B * c.image_elems()));
  model.predict(fx.get<float>("x_t").data(), c.cond_elems() > 0 ? db.cond.data() : nullptr, db.t.data(), B,
                out.data());
  EXPECT_LT(rel_error(out, fx.get<float>("pred")), 1e-4) << path;
}

}  // namespace ft::testing
