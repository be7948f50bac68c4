// GPT-2 on the CPU backend: the plan is exact (planned bytes == arena high-water mark),
// recompute changes nothing numerically, gradients match finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "models/gpt2_harness.h"

namespace ft {
namespace {

// n random tokens and n targets in [0, V), all tokens drawn before the targets.
struct Batch {
  std::vector<int32_t> tok, tgt;
};
Batch random_batch(Rng& rng, int V, size_t n) {
  Batch d{std::vector<int32_t>(n), std::vector<int32_t>(n)};
  for (auto* t : {&d.tok, &d.tgt})
    for (auto& x : *t) x = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V));
  return d;
}

struct ModelRun {
  std::unique_ptr<Backend> be = make_cpu_backend();
  GPT2Config cfg;
  PlanShape shape;
  std::unique_ptr<testing::GPT2Harness> model;
  ModelRun(GPT2Config c, int64_t mb, int64_t eb, Recompute rc) : cfg(c) {
    shape.micro_batch = mb;
    shape.eval_batch = eb;
    shape.recompute = rc;
    model = std::make_unique<testing::GPT2Harness>(*be, cfg, shape, 42);
  }
  // Gradients of one micro-batch of b sequences from zero; returns the summed loss.
  double grads_of(const Batch& d, int64_t b, float dloss) {
    model->zero_grads();
    return model->forward_backward(d.tok.data(), d.tgt.data(), b, dloss);
  }
  std::vector<float> grads() const {
    return model->grads();
  }
};

TEST(GPT2, ParamLayoutMatchesHuggingFaceCount) {
  GPT2Config gpt2{12, 12, 768, 1024, 50257};
  // HF GPT2LMHeadModel has 124,439,808 parameters with V=50257; the padded rows add
  // (50304-50257)*768.
  EXPECT_EQ(GPT2LM(gpt2).num_params(), 124439808 + (50304 - 50257) * 768);
}

// The trainer's step seam (ModelRuntime::queue_step_sums): the host values and the gradients'
// sum of squares come back summed, the update reads its clip factor and verdict from the
// device, equal to the same update with the factor passed from the host; a non-finite loss
// leaves the weights as they were.
TEST(GPT2, StepSumsDecideTheUpdateWithoutTheHost) {
  const GPT2Config c{2, 2, 16, 8, 50};
  ModelRun r(c, 2, 1, Recompute::none), ref(c, 2, 1, Recompute::none);
  Rng rng(3);
  const Batch d = random_batch(rng, c.vocab_size, 16);
  const std::vector<float> initial = r.model->params();
  const double loss = r.grads_of(d, 2, 1.0f / 16);
  ModelRuntime& rt = r.model->runtime();
  const double ss = rt.grad_sum_squares_part();
  UpdateRule rule;
  rule.max_norm = 0.5 * std::sqrt(ss);  // the norm is clipped to half
  rt.queue_step_sums(loss, 1.0, 7.0, rule, 0.0);
  AdamWStep st;
  st.lr = 1e-2f;
  st.control = rt.update_control();
  rt.adamw_step(st);
  const StepSums s = rt.step_sums();
  EXPECT_EQ(s.loss, loss);
  EXPECT_EQ(s.stop, 1.0);
  EXPECT_EQ(s.units_ahead, 7.0);
  EXPECT_EQ(s.out_of_memory, 0.0);
  EXPECT_EQ(s.grad_sum_squares, ss);
  EXPECT_TRUE(s.applied);
  EXPECT_FLOAT_EQ(s.grad_scale, 0.5f);
  const std::vector<float> updated = r.model->params();
  ref.grads_of(d, 2, 1.0f / 16);
  AdamWStep host = st;
  host.control = Tensor();
  host.grad_scale = s.grad_scale;
  ref.model->adamw_step(host);
  EXPECT_EQ(ref.model->params(), updated);
  EXPECT_NE(updated, initial);  // it moved
  // A non-finite loss (as a rank that ran out of memory sends it): the update is queued,
  // reads the verdict and writes nothing; the rank's vote comes back with the sums.
  r.grads_of(d, 2, 1.0f / 16);
  rt.queue_step_sums(NAN, 0.0, 0.0, rule, 1.0);
  st.t = 2;
  rt.adamw_step(st);
  const StepSums failed = rt.step_sums();
  EXPECT_FALSE(failed.applied);
  EXPECT_EQ(failed.out_of_memory, 1.0);
  EXPECT_EQ(r.model->params(), updated);
}

TEST(GPT2, PlannedBytesEqualArenaHighWater) {
  struct Case { GPT2Config c; int64_t mb, eb; Recompute rc; };
  const Case cases[] = {
      {{1, 2, 16, 8, 50}, 1, 1, Recompute::none},  {{2, 2, 16, 8, 50}, 3, 2, Recompute::none},
      {{2, 4, 32, 16, 300}, 4, 8, Recompute::none}, {{2, 2, 16, 8, 50}, 3, 1, Recompute::block},
      {{3, 4, 32, 16, 300}, 2, 5, Recompute::block}, {{4, 2, 24, 12, 129}, 5, 3, Recompute::block},
  };
  Rng rng(1);
  for (const auto& k : cases) {
    ModelRun r(k.c, k.mb, k.eb, k.rc);
    EXPECT_EQ(validate_plan(r.model->plan()), "");
    const Batch d = random_batch(rng, k.c.vocab_size, static_cast<size_t>(k.mb * k.c.seq_len));
    r.grads_of(d, k.mb, 1.0f / static_cast<float>(d.tok.size()));
    AdamWStep st;
    st.lr = 1e-3f;
    r.model->adamw_step(st);
    const Batch e = random_batch(rng, k.c.vocab_size, static_cast<size_t>(k.eb * k.c.seq_len));
    r.model->eval_loss(e.tok.data(), e.tgt.data(), k.eb);
    // and generation (the KV cache and the decode phase): every planned buffer is touched
    GenerateOptions go;
    go.max_new_tokens = 2;
    r.model->model().generate(std::vector<std::vector<int32_t>>(static_cast<size_t>(k.eb), {1, 2}), go);
    EXPECT_EQ(r.model->arena().high_water_bytes(), r.model->plan().total_bytes)
        << k.c.describe() << " mb=" << k.mb << " eb=" << k.eb << " recompute=" << recompute_name(k.rc);
  }
}

TEST(GPT2, RecomputeGivesSameLossAndGradients) {
  GPT2Config c{3, 2, 16, 8, 61};
  ModelRun a(c, 2, 1, Recompute::none), b(c, 2, 1, Recompute::block);
  Rng rng(5);
  const Batch d = random_batch(rng, c.vocab_size, 16);
  double la = a.grads_of(d, 2, 1.0f / 16);
  double lb = b.grads_of(d, 2, 1.0f / 16);
  EXPECT_EQ(la, lb);
  auto ga = a.grads(), gb = b.grads();
  ASSERT_EQ(ga.size(), gb.size());
  EXPECT_EQ(0, std::memcmp(ga.data(), gb.data(), ga.size() * 4)) << "recompute changed the gradients";
  EXPECT_LT(b.model->plan().total_bytes, a.model->plan().total_bytes);
}

TEST(GPT2, GradientsMatchFiniteDifferences) {
  GPT2Config c{2, 2, 8, 4, 11};
  ModelRun r(c, 2, 2, Recompute::none);
  Rng rng(9);
  const Batch d = random_batch(rng, c.vocab_size, 8);
  r.grads_of(d, 2, 1.0f / 8);
  auto g = r.grads();
  std::vector<float> p(g.size());
  r.model->copy_params_to_host(p.data());
  auto loss_at = [&](const std::vector<float>& params) {
    r.model->load_params_from_host(params.data());
    return r.model->eval_loss(d.tok.data(), d.tgt.data(), 2) / 8.0;
  };
  const auto& lay = r.model->layout();
  int checked = 0;
  for (const auto& e : lay.entries()) {
    for (int k = 0; k < 3; ++k) {
      int64_t i = e.offset + static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(e.count));
      if (e.name == "wte" && (i - e.offset) / c.n_embd >= c.vocab_size) continue;  // padding rows
      const float h = 1e-2f;
      auto pp = p, pm = p;
      pp[i] += h;
      pm[i] -= h;
      double fd = (loss_at(pp) - loss_at(pm)) / (2.0 * h);
      EXPECT_NEAR(g[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << e.name << " element " << (i - e.offset);
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(GPT2, SmallerLastMicroBatchUsesPlannedBuffers) {
  GPT2Config c{2, 2, 16, 8, 40};
  ModelRun big(c, 4, 1, Recompute::none), exact(c, 3, 1, Recompute::none);
  Rng rng(3);
  const Batch d = random_batch(rng, c.vocab_size, 24);
  double a = big.grads_of(d, 3, 1.0f / 24);
  double b = exact.grads_of(d, 3, 1.0f / 24);
  EXPECT_NEAR(a, b, 1e-4 * std::fabs(b));
  auto ga = big.grads(), gb = exact.grads();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    diff += (ga[i] - gb[i]) * (ga[i] - gb[i]);
    norm += gb[i] * gb[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5);
}

TEST(GPT2, OverfitsOneBatch) {
  GPT2Config c{2, 2, 32, 16, 30};
  ModelRun r(c, 2, 1, Recompute::none);
  Rng rng(11);
  const Batch d = random_batch(rng, c.vocab_size, 32);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    double l = r.grads_of(d, 2, 1.0f / 32) / 32;
    if (step == 0) first = l;
    last = l;
    AdamWStep st;
    st.lr = 3e-3f;
    st.t = step + 1;
    st.weight_decay = 0;
    r.model->adamw_step(st);
  }
  EXPECT_NEAR(first, std::log(30.0), 0.3);  // random init predicts ~uniformly
  EXPECT_LT(last, 0.5 * first);
}

}  // namespace
}  // namespace ft
