// GPT-2 on the CPU backend: the plan is exact (planned bytes == arena high-water mark),
// recompute changes nothing numerically, gradients match finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "models/gpt2.h"

namespace ft {
namespace {

struct ModelRun {
  std::unique_ptr<Backend> be = make_cpu_backend();
  GPT2Config cfg;
  PlanShape shape;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<GPT2> model;
  ModelRun(GPT2Config c, int64_t mb, int64_t eb, Recompute rc) : cfg(c) {
    shape.micro_batch = mb;
    shape.eval_batch = eb;
    shape.seq_len = c.seq_len;
    shape.recompute = rc;
    arena = std::make_unique<Arena>(*be, gpt2_memory_plan(cfg, shape, *be));
    model = std::make_unique<GPT2>(cfg, shape, *arena);
    std::vector<float> p(static_cast<size_t>(model->layout().total));
    gpt2_init_params(cfg, model->layout(), 42, p.data());
    model->load_params_from_host(p.data());
  }
  std::vector<float> grads() const {
    std::vector<float> out(static_cast<size_t>(model->layout().total));
    model->copy_grads_to_host(out.data());
    return out;
  }
};

void random_tokens(Rng& rng, int V, std::vector<int32_t>& t) {
  for (auto& x : t) x = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V));
}

TEST(GPT2, ParamLayoutMatchesHuggingFaceCount) {
  GPT2Config gpt2{12, 12, 768, 1024, 50257};
  // HF GPT2LMHeadModel has 124,439,808 parameters with V=50257; the padded rows add
  // (50304-50257)*768.
  EXPECT_EQ(gpt2_num_params(gpt2), 124439808 + (50304 - 50257) * 768);
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
    EXPECT_EQ(validate_plan(r.arena->plan()), "");
    std::vector<int32_t> tok(static_cast<size_t>(k.mb * k.c.seq_len)), tgt(tok.size());
    random_tokens(rng, k.c.vocab_size, tok);
    random_tokens(rng, k.c.vocab_size, tgt);
    r.model->zero_grads();
    r.model->forward_backward(tok.data(), tgt.data(), k.mb, 1.0f / static_cast<float>(tok.size()));
    AdamWStep st;
    st.lr = 1e-3f;
    r.model->adamw_step(st);
    std::vector<int32_t> etok(static_cast<size_t>(k.eb * k.c.seq_len)), etgt(etok.size());
    random_tokens(rng, k.c.vocab_size, etok);
    random_tokens(rng, k.c.vocab_size, etgt);
    r.model->eval_loss(etok.data(), etgt.data(), k.eb);
    EXPECT_EQ(r.arena->high_water_bytes(), r.arena->plan().total_bytes)
        << k.c.describe() << " mb=" << k.mb << " eb=" << k.eb << " recompute=" << recompute_name(k.rc);
  }
}

TEST(GPT2, RecomputeGivesSameLossAndGradients) {
  GPT2Config c{3, 2, 16, 8, 61};
  ModelRun a(c, 2, 1, Recompute::none), b(c, 2, 1, Recompute::block);
  Rng rng(5);
  std::vector<int32_t> tok(16), tgt(16);
  random_tokens(rng, c.vocab_size, tok);
  random_tokens(rng, c.vocab_size, tgt);
  a.model->zero_grads();
  b.model->zero_grads();
  double la = a.model->forward_backward(tok.data(), tgt.data(), 2, 1.0f / 16);
  double lb = b.model->forward_backward(tok.data(), tgt.data(), 2, 1.0f / 16);
  EXPECT_EQ(la, lb);
  auto ga = a.grads(), gb = b.grads();
  ASSERT_EQ(ga.size(), gb.size());
  EXPECT_EQ(0, std::memcmp(ga.data(), gb.data(), ga.size() * 4)) << "recompute changed the gradients";
  EXPECT_LT(b.arena->plan().total_bytes, a.arena->plan().total_bytes);
}

TEST(GPT2, GradientsMatchFiniteDifferences) {
  GPT2Config c{2, 2, 8, 4, 11};
  ModelRun r(c, 2, 2, Recompute::none);
  Rng rng(9);
  std::vector<int32_t> tok(8), tgt(8);
  random_tokens(rng, c.vocab_size, tok);
  random_tokens(rng, c.vocab_size, tgt);
  const float dloss = 1.0f / 8;
  r.model->zero_grads();
  r.model->forward_backward(tok.data(), tgt.data(), 2, dloss);
  auto g = r.grads();
  std::vector<float> p(g.size());
  r.model->copy_params_to_host(p.data());
  auto loss_at = [&](const std::vector<float>& params) {
    r.model->load_params_from_host(params.data());
    return r.model->eval_loss(tok.data(), tgt.data(), 2) / 8.0;
  };
  const auto& lay = r.model->layout();
  int checked = 0;
  for (const auto& e : lay.entries) {
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
  std::vector<int32_t> tok(24), tgt(24);
  random_tokens(rng, c.vocab_size, tok);
  random_tokens(rng, c.vocab_size, tgt);
  big.model->zero_grads();
  exact.model->zero_grads();
  double a = big.model->forward_backward(tok.data(), tgt.data(), 3, 1.0f / 24);
  double b = exact.model->forward_backward(tok.data(), tgt.data(), 3, 1.0f / 24);
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
  std::vector<int32_t> tok(32), tgt(32);
  random_tokens(rng, c.vocab_size, tok);
  random_tokens(rng, c.vocab_size, tgt);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    r.model->zero_grads();
    double l = r.model->forward_backward(tok.data(), tgt.data(), 2, 1.0f / 32) / 32;
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
