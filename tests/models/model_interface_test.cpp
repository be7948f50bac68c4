// The Model seam: the gradient-ready hook reports every parameter exactly once, each range
// already holding its final gradient; the registry builds every preset and names what is
// wrong with a bad configuration; the plan's buffers are declared once (no duplicate names).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "models/gpt2_harness.h"
#include "models/param_need_check.h"
#include "models/registry.h"
#include "train/runtime.h"

namespace ft {
namespace {

// n random tokens and n random targets below vocab.
std::pair<std::vector<int32_t>, std::vector<int32_t>> random_tokens(int64_t n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tok(static_cast<size_t>(n)), tgt(static_cast<size_t>(n));
  for (auto& t : tok) t = static_cast<int32_t>(rng.next_u64() % vocab);
  for (auto& t : tgt) t = static_cast<int32_t>(rng.next_u64() % vocab);
  return {std::move(tok), std::move(tgt)};
}

TEST(GradReadyHook, ReportsEveryParameterOnceWithItsFinalGradient) {
  auto be = make_cpu_backend();
  const GPT2Config c{3, 2, 16, 8, 40};
  for (Recompute rc : {Recompute::none, Recompute::block}) {
    PlanShape s;
    s.micro_batch = 2;
    s.recompute = rc;
    testing::GPT2Harness h(*be, c, s);
    const int64_t P = h.model().num_params(), n = 2 * c.seq_len;
    const auto [tok, tgt] = random_tokens(n, 40, 4);
    std::vector<std::vector<std::pair<int64_t, int64_t>>> calls[2];  // each micro-batch's reports
    for (int micro = 0; micro < 2; ++micro) {  // overwrite, then accumulate
      if (micro == 0) h.zero_grads();
      std::vector<int> covered(static_cast<size_t>(P), 0);
      std::vector<std::pair<ParamRange, std::vector<float>>> seen;
      auto hook = [&](std::span<const ParamRange> ranges) {
        calls[micro].emplace_back();
        for (const ParamRange& r : ranges) calls[micro].back().emplace_back(r.offset, r.count);
        // what the gradient holds at report time, for the reported ranges
        std::vector<float> g = h.grads();
        for (const ParamRange& r : ranges) {
          for (int64_t i = r.offset; i < r.offset + r.count; ++i) covered[static_cast<size_t>(i)]++;
          seen.emplace_back(r, std::vector<float>(g.begin() + r.offset, g.begin() + r.offset + r.count));
        }
      };
      h.forward_backward(tok.data(), tgt.data(), 2, 1.0f / static_cast<float>(n), hook);
      // The backward's last two reports are block 0's qkv bias, then its weight: under ZeRO-1
      // only their chunks are reduced after the last op (the rest of block 0 goes before the
      // embeddings' backward).
      const ParamEntry &qw = h.layout().at("qkvw"), &qb = h.layout().at("qkvb");
      using Ranges = std::vector<std::pair<int64_t, int64_t>>;
      ASSERT_GE(calls[micro].size(), 3u);
      EXPECT_EQ(calls[micro].back(), (Ranges{{qw.offset, qw.count / c.n_layer}}));
      EXPECT_EQ(calls[micro][calls[micro].size() - 2], (Ranges{{qb.offset, qb.count / c.n_layer}}));
      EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int k) { return k == 1; }))
          << "every parameter reported exactly once (recompute " << recompute_name(rc) << ")";
      const std::vector<float> final_g = h.grads();
      for (const auto& [r, at_report] : seen)
        EXPECT_EQ(0, std::memcmp(at_report.data(), final_g.data() + r.offset, at_report.size() * 4))
            << "range at " << r.offset << " changed after it was reported final";
    }
    // Every backward reports the same ranges in the same calls, whether it overwrites or adds
    // (a rank whose backward failed replays the last step's reports: GradReducer::drain).
    EXPECT_EQ(calls[0], calls[1]) << "recompute " << recompute_name(rc);
  }
}

// With a hook, GPT-2 runs block 0's qkv weight product after the embeddings' backward (so
// their reduction overlaps it), its bias as column sums before it: the gradients must be the
// very same as without one.
TEST(GradReadyHook, TheHookedOrderGivesTheSameGradients) {
  auto be = make_cpu_backend();
  const GPT2Config c{2, 2, 16, 8, 40};
  for (Recompute rc : {Recompute::none, Recompute::block}) {
    PlanShape s;
    s.micro_batch = 2;
    s.recompute = rc;
    testing::GPT2Harness h(*be, c, s);
    const int64_t n = 2 * c.seq_len;
    const auto [tok, tgt] = random_tokens(n, 40, 7);
    h.zero_grads();
    const double plain_loss = h.forward_backward(tok.data(), tgt.data(), 2, 1.0f / static_cast<float>(n), {});
    const std::vector<float> plain = h.grads();
    h.zero_grads();
    int reports = 0;
    const double hooked_loss = h.forward_backward(tok.data(), tgt.data(), 2, 1.0f / static_cast<float>(n),
                                                  [&](std::span<const ParamRange>) { ++reports; });
    EXPECT_GT(reports, 0);
    EXPECT_EQ(plain_loss, hooked_loss);
    const std::vector<float> hooked = h.grads();
    ASSERT_EQ(plain.size(), hooked.size());
    EXPECT_EQ(0, std::memcmp(plain.data(), hooked.data(), plain.size() * 4)) << recompute_name(rc);
  }
}

// GPT-2 names what its forward reads just before each op that reads it: the embeddings, then
// each block op by op (ln1 and the qkv product, the attention's projection, ln2 and the fc
// product, the fc projection), then the final layernorm. So under ZeRO-1 a block's first
// product waits only for its own chunks' gathers, not for those of the block's last product.
TEST(ParamsNeeded, GPT2ReadsEachParameterOnlyAfterItsOpNamedIt) {
  auto be = make_cpu_backend();
  const GPT2Config c{3, 2, 16, 8, 40};
  for (Recompute rc : {Recompute::none, Recompute::block}) {
    PlanShape s;
    s.micro_batch = 2;
    s.recompute = rc;
    testing::GPT2Harness h(*be, c, s);
    const auto [tok, tgt] = random_tokens(2 * c.seq_len, 40, 5);
    const int64_t names = testing::expect_reads_only_named_params(h.runtime(), lm_batch(tok.data(), tgt.data(), 2, c.seq_len),
                                                                  std::string("recompute ") + recompute_name(rc));
    // embeddings + 4 ops a block + the final layernorm; a recomputing backward names the first
    // three of each block's ops again (it stops before the fc projection)
    EXPECT_EQ(names, 2 + 4 * c.n_layer + (rc == Recompute::block ? 3 * c.n_layer : 0)) << recompute_name(rc);
  }
}

// Every model family's start drawn by ranges (the blocks a rank uploads) is the whole
// layout's: the table's draws and each model's own (GPT-2's zero padded rows, the
// recommender's identity, DiT's and CDEIT's xavier streams), ranges cut anywhere.
TEST(ModelInit, RangesOfEveryFamilyAreTheWholeLayout) {
  std::set<std::string> families;
  for (const ModelPreset& p : model_presets()) {
    auto m = make_model(p.config, "test");
    if (m->num_params() > 40'000'000 || !families.insert(m->family()).second) continue;  // the smallest of each
    const int64_t P = m->num_params();
    std::vector<float> whole(static_cast<size_t>(P), -1.f), tiled(static_cast<size_t>(P), -1.f);
    m->init_params(3, whole.data());
    Rng rng(P);
    for (int64_t b = 0; b < P;) {  // ranges of random lengths, some tiny, some past an entry
      const int64_t k = std::min<int64_t>(P - b, 1 + static_cast<int64_t>(rng.next_u64() % (rng.uniform() < 0.3f ? 7 : 200000)));
      m->init_range(3, b, k, tiled.data() + b);
      b += k;
    }
    EXPECT_EQ(0, std::memcmp(tiled.data(), whole.data(), whole.size() * 4)) << p.name;
  }
  EXPECT_EQ(families, (std::set<std::string>{"gpt2", "gpt2rec", "dit", "cdeit"}));
}

TEST(ModelRegistry, BuildsEveryPresetAndRejectsBadConfigurations) {
  for (const ModelPreset& p : model_presets()) {
    auto m = make_model(p.config, "test");
    EXPECT_EQ(m->family(), p.config["arch"].get<std::string>());
    EXPECT_EQ(m->config(), p.config) << p.name;  // the configuration round-trips
    EXPECT_GT(m->num_params(), 0);
  }
  EXPECT_EQ(make_model(preset_config("gpt2"), "t")->num_params(), 124439808 + (50304 - 50257) * 768);
  auto expect_error = [](const nlohmann::json& j, const std::string& needle) {
    try {
      make_model(j, "ckpt.ftc");
      ADD_FAILURE() << "no error for " << j.dump();
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("ckpt.ftc"), std::string::npos) << e.what();
    }
  };
  nlohmann::json c = preset_config("tiny");
  expect_error(nlohmann::json{{"arch", "unet"}}, "unknown model family 'unet' (this build knows: gpt2, gpt2rec, dit, cdeit)");
  expect_error(nlohmann::json{{"n_layer", 2}}, "lacks its family");
  auto extra = c;
  extra["n_layers"] = 3;
  expect_error(extra, "unknown GPT-2 setting 'n_layers'");
  auto missing = c;
  missing.erase("n_head");
  expect_error(missing, "lacks 'n_head'");
  auto bad = c;
  bad["n_head"] = 3;  // 128 is not divisible by 3
  EXPECT_THROW(make_model(bad, "t"), UserError);
  EXPECT_THROW(preset_config("gpt3"), UserError);
}

TEST(ModelPlan, EveryBufferIsDeclaredOnceAndTheRuntimeAllocatesThePlan) {
  auto be = make_cpu_backend();
  GPT2LM m(GPT2Config{2, 2, 16, 8, 50});
  for (Recompute rc : {Recompute::none, Recompute::block}) {
    PlanShape s;
    s.micro_batch = 3;
    s.eval_batch = 2;
    s.recompute = rc;
    const MemoryPlan p = runtime_plan(m, *be, s);
    std::set<std::string> names;
    for (const auto& b : p.buffers) EXPECT_TRUE(names.insert(b.name).second) << b.name << " declared twice";
    EXPECT_EQ(validate_plan(p), "");
    ModelRuntime rt(m, *be, s);
    EXPECT_EQ(rt.plan().total_bytes, p.total_bytes);
    EXPECT_EQ(rt.arena().size(), p.total_bytes);
    ASSERT_EQ(rt.plan().buffers.size(), p.buffers.size());
    for (size_t i = 0; i < p.buffers.size(); ++i) EXPECT_EQ(rt.plan().buffers[i].offset, p.buffers[i].offset);
  }
}

}  // namespace
}  // namespace ft
