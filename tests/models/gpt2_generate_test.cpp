// GPT-2 generation with the KV cache (GPT2LM::generate) on the CPU backend, against the
// recompute path (next_token_logits over the whole context for every token): the same
// tokens and per-step logits; batching (prompts of different lengths, chunks of the eval
// batch) changes nothing; stop token, max_new_tokens and the context limit; the plan holds
// the cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "models/gpt2_harness.h"
#include "models/sampling.h"
#include "train/runtime.h"

namespace ft {
namespace {

const GPT2Config kCfg{2, 2, 32, 24, 61};  // L, heads, C, T, V

// An evaluation-only model of eval batch G with GPT-2's init scaled up, so the next token's
// logits are far apart (greedy choices do not hang on rounding).
struct GenRun {
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::unique_ptr<testing::GPT2Harness> h;
  explicit GenRun(int64_t G, const GPT2Config& c = kCfg) {
    PlanShape s;
    s.training = false;
    s.eval_batch = G;
    h = std::make_unique<testing::GPT2Harness>(*be, c, s, 42);
    std::vector<float> p = h->params();
    for (float& x : p) x *= 4;
    h->load_params_from_host(p.data());
  }
  GPT2LM& m() { return h->model(); }
};

std::vector<std::vector<int32_t>> prompts_of(std::initializer_list<int> lens, int V, uint64_t seed = 5) {
  Rng rng(seed);
  std::vector<std::vector<int32_t>> v;
  for (int n : lens) {
    v.emplace_back(n);
    for (auto& t : v.back()) t = static_cast<int32_t>(rng.next_u64() % V);
  }
  return v;
}

GenerateOptions greedy(int64_t n) {
  GenerateOptions o;
  o.max_new_tokens = n;
  return o;
}

TEST(GPT2Generate, KvCacheMatchesRecomputeTokensAndLogits) {
  GenRun r(3);
  const int64_t V = kCfg.vocab_size;
  const auto prompts = prompts_of({5, 1, 9, 12, 3}, kCfg.vocab_size);  // two chunks of G = 3
  std::vector<std::vector<std::vector<float>>> steps(prompts.size());
  const auto out = r.m().generate(prompts, greedy(8), [&](int64_t i, int64_t step, std::span<const float> l) {
    EXPECT_EQ(static_cast<int64_t>(steps[i].size()), step);
    steps[i].emplace_back(l.begin(), l.end());
  });
  std::vector<float> ref(static_cast<size_t>(V));
  double worst = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    std::vector<int32_t> ctx = prompts[i];
    ASSERT_EQ(out[i].size(), 8u);
    ASSERT_EQ(steps[i].size(), 8u);
    for (size_t s = 0; s < 8; ++s) {
      r.m().next_token_logits(ctx.data(), static_cast<int64_t>(ctx.size()), ref.data());
      for (int64_t v = 0; v < V; ++v) worst = std::max(worst, static_cast<double>(std::fabs(steps[i][s][v] - ref[v])));
      ASSERT_EQ(out[i][s], argmax_token(ref)) << "step " << s;
      ctx.push_back(out[i][s]);
    }
  }
  EXPECT_LT(worst, 1e-4);
  // the device argmax path (no hook) gives the same tokens
  EXPECT_EQ(r.m().generate(prompts, greedy(8)), out);
}

TEST(GPT2Generate, BatchOfDifferentLengthsEqualsEachPromptAlone) {
  GenRun batch(4), alone(1);
  const auto prompts = prompts_of({7, 2, 13, 1, 4, 10}, kCfg.vocab_size, 9);
  const auto together = batch.m().generate(prompts, greedy(6));
  ASSERT_EQ(together.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(alone.m().generate({prompts[i]}, greedy(6))[0], together[i]) << "prompt " << i;
  // sampling: the same seed draws the same tokens, another seed others
  GenerateOptions o = greedy(10);
  o.temperature = 1.0, o.top_k = 20, o.top_p = 0.95, o.seed = 77;
  const auto a = batch.m().generate(prompts, o), b = batch.m().generate(prompts, o);
  EXPECT_EQ(a, b);
  o.seed = 78;
  EXPECT_NE(batch.m().generate(prompts, o), a);
  // top_k = 1 samples the greedy tokens
  o.top_k = 1;
  EXPECT_EQ(batch.m().generate(prompts, o), batch.m().generate(prompts, greedy(10)));
}

TEST(GPT2Generate, StopTokenMaxNewTokensAndContextLimit) {
  GenRun r(2);
  const int64_t T = kCfg.seq_len;
  const auto prompts = prompts_of({4, 6}, kCfg.vocab_size, 3);
  const auto full = r.m().generate(prompts, greedy(12));
  // stop at the first token of row 0 that did not come before: the row ends just before it
  size_t k = 1;
  while (k < full[0].size() && std::count(full[0].begin(), full[0].begin() + k, full[0][k]) > 0) ++k;
  ASSERT_LT(k, full[0].size());
  GenerateOptions o = greedy(12);
  o.stop_token = full[0][k];
  const auto stopped = r.m().generate(prompts, o);
  EXPECT_EQ(stopped[0], std::vector<int32_t>(full[0].begin(), full[0].begin() + k));
  const auto it = std::find(full[1].begin(), full[1].end(), o.stop_token);  // row 1 stops on its own
  EXPECT_EQ(stopped[1], std::vector<int32_t>(full[1].begin(), it));

  for (int64_t n : {0, 1, 3}) {
    const auto out = r.m().generate(prompts, greedy(n));
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(out[i], std::vector<int32_t>(full[i].begin(), full[i].begin() + n)) << "max_new_tokens " << n;
  }
  // the context: prompt + new tokens <= T
  const auto longp = prompts_of({static_cast<int>(T - 1), 10}, kCfg.vocab_size, 4);
  const auto capped = r.m().generate(longp, greedy(100));
  EXPECT_EQ(capped[0].size(), 1u);
  EXPECT_EQ(static_cast<int64_t>(capped[1].size()), T - 10);
  // prompts the model cannot continue
  EXPECT_THROW(r.m().generate({{}}, greedy(2)), UserError);
  EXPECT_THROW(r.m().generate(prompts_of({static_cast<int>(T)}, kCfg.vocab_size), greedy(2)), UserError);
  EXPECT_THROW(r.m().generate({{1, kCfg.vocab_size}}, greedy(2)), UserError);
  GenerateOptions bad = greedy(2);
  bad.top_p = 0;
  EXPECT_THROW(r.m().generate(prompts, bad), UserError);
  EXPECT_TRUE(r.m().generate({}, greedy(2)).empty());
}

TEST(GPT2Generate, AVocabLimitChoosesOnlyTheIdsBelowIt) {
  GenRun r(3);
  const int64_t V = kCfg.vocab_size;
  const auto prompts = prompts_of({5, 2, 8}, V, 11);
  // the ids the unlimited model picks greedily, and the limit below most of them
  const auto free_run = r.m().generate(prompts, greedy(8));
  int32_t top = 0;
  for (const auto& row : free_run)
    for (int32_t t : row) top = std::max(top, t);
  ASSERT_GT(top, 8) << "the test needs greedy choices above a small limit";
  GenerateOptions o = greedy(8);
  o.vocab_limit = top;  // the largest id chosen above is now out of reach
  std::vector<float> ref(static_cast<size_t>(V));
  const auto limited = r.m().generate(prompts, o);
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> ctx = prompts[i];
    for (int32_t t : limited[i]) {
      r.m().next_token_logits(ctx.data(), static_cast<int64_t>(ctx.size()), ref.data());
      EXPECT_EQ(t, argmax_token({ref.data(), static_cast<size_t>(top)})) << "prompt " << i;
      ctx.push_back(t);
    }
  }
  // the device argmax and the host sampler both stay below it
  o.temperature = 5.0, o.seed = 3;  // flat: without the limit, ids near V are drawn too
  for (const auto& row : r.m().generate(prompts, o))
    for (int32_t t : row) EXPECT_LT(t, top);
  o.vocab_limit = V + 1;
  EXPECT_THROW(r.m().generate(prompts, o), InternalError);
}

TEST(GPT2Generate, ThePlanHoldsTheCacheAtTheEvalBatch) {
  const int64_t L = kCfg.n_layer, T = kCfg.seq_len, C = kCfg.n_embd;
  auto be = make_cpu_backend();
  GPT2LM model(kCfg);
  for (int64_t G : {1, 3, 8}) {
    PlanShape s;
    s.training = false;
    s.eval_batch = G;
    const MemoryPlan p = runtime_plan(model, *be, s);
    const size_t one = static_cast<size_t>(G * T * C) * sizeof(float);  // fp32 on the CPU
    EXPECT_EQ(p.class_bytes(BufferClass::kv_cache), static_cast<size_t>(2 * L) * one) << "G=" << G;
    const GPT2Schedule sch{kCfg.n_layer};
    for (int l = 0; l < L; ++l)
      for (const char* kv : {".k", ".v"}) {
        const BufferSpec& b = p.at("kv" + std::to_string(l) + kv);
        EXPECT_EQ(b.bytes, one);
        EXPECT_EQ(b.first, sch.eval_block(l));
        EXPECT_EQ(b.last, sch.gen_decode());  // not the evaluation head: no overlap with its logits
      }
    EXPECT_EQ(validate_plan(p), "");
  }
}

TEST(GPT2Generate, GenerationStaysInsideThePlan) {
  GenRun r(3);
  r.m().generate(prompts_of({5, 23, 1}, kCfg.vocab_size), greedy(30));
  EXPECT_LE(r.h->arena().high_water_bytes(), r.h->plan().total_bytes);
  EXPECT_EQ(validate_plan(r.h->plan()), "");
}

}  // namespace
}  // namespace ft
