// The GPT-2 recommender (models/gpt2_rec.h): planned == allocated and the arena never goes past
// the plan, whole-model gradients against finite differences (BPR and cross-entropy), the item
// table on and off give the same losses and gradients, the gradient-ready hook covers every
// parameter once, and the ranker's scores are the ones the loss uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "models/host_copies.h"
#include "models/gpt2_rec.h"
#include "models/param_need_check.h"
#include "models/registry.h"
#include "plan/fit.h"
#include "train/runtime.h"

namespace ft {
namespace {

struct RecBatch {
  std::vector<int32_t> tokens, targets, negatives;
  int64_t b = 0;
  Batch batch(const GPT2RecConfig& c) const {
    Batch out;
    out.size = b;
    out.fields.push_back(BatchField{FieldSpec{"tokens", DType::i32, c.seq_len}, tokens.data()});
    out.fields.push_back(BatchField{FieldSpec{"targets", DType::i32, c.seq_len}, targets.data()});
    if (c.loss == "bpr")
      out.fields.push_back(BatchField{FieldSpec{"negatives", DType::i32, c.seq_len * c.negatives}, negatives.data()});
    return out;
  }
};

// b histories of random lengths in [2, T+1], right-padded; negatives avoid the row's items.
RecBatch random_batch(const GPT2RecConfig& c, int64_t b, uint64_t seed) {
  Rng rng(seed);
  const int64_t T = c.seq_len, K = c.negatives;
  RecBatch r;
  r.b = b;
  r.tokens.assign(static_cast<size_t>(b * T), 0);
  r.targets.assign(static_cast<size_t>(b * T), -1);
  r.negatives.assign(static_cast<size_t>(b * T * K), 1);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t len = 2 + static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(T));  // items in the row
    std::vector<int32_t> seq(static_cast<size_t>(len));
    for (auto& s : seq) s = 1 + static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(c.items));
    for (int64_t t = 0; t + 1 < len; ++t) {
      r.tokens[static_cast<size_t>(i * T + t)] = seq[static_cast<size_t>(t)];
      r.targets[static_cast<size_t>(i * T + t)] = seq[static_cast<size_t>(t + 1)];
      for (int64_t k = 0; k < K; ++k) {
        int32_t n;
        do n = 1 + static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(c.items));
        while (std::find(seq.begin(), seq.end(), n) != seq.end());
        r.negatives[static_cast<size_t>((i * T + t) * K + k)] = n;
      }
    }
  }
  return r;
}

struct Harness {
  GPT2Rec model;
  std::unique_ptr<ModelRuntime> rt;
  Harness(Backend& be, const GPT2RecConfig& c, const PlanShape& s, uint64_t seed = 7) : model(c) {
    rt = std::make_unique<ModelRuntime>(model, be, s);
    std::vector<float> host(static_cast<size_t>(model.num_params()));
    model.init_params(seed, host.data());
    // Perturb the item head away from the identity so its gradient is exercised generally.
    const ParamEntry& w = model.param_table().at("item_w");
    Rng rng(seed + 1);
    for (int64_t i = 0; i < w.count; ++i) host[static_cast<size_t>(w.offset + i)] += 0.05f * static_cast<float>(rng.normal());
    rt->load_params_from_host(host.data());
  }
  std::vector<float> params() const { return testing::host_params(*rt, model.num_params()); }
  std::vector<float> grads() const { return testing::host_grads(*rt, model.num_params()); }
};

GPT2RecConfig small(const std::string& loss = "bpr", int K = 2) {
  GPT2RecConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.seq_len = 6;
  c.items = 30;
  c.negatives = K;
  c.loss = loss;
  return c;
}

TEST(GPT2Rec, PlannedIsAllocatedAndTheArenaStaysInsideIt) {
  auto be = make_cpu_backend();
  for (const std::string loss : {"bpr", "ce"}) {
    for (bool cache : {true, false}) {
      if (loss == "ce" && !cache) continue;
      for (Recompute rc : {Recompute::none, Recompute::block}) {
        const GPT2RecConfig c = small(loss);
        PlanShape s;
        s.micro_batch = 3;
        s.eval_batch = 4;
        s.recompute = rc;
        s.item_cache = cache;
        GPT2Rec m(c);
        const MemoryPlan p = runtime_plan(m, *be, s);
        std::set<std::string> names;
        for (const auto& buf : p.buffers) EXPECT_TRUE(names.insert(buf.name).second) << buf.name;
        EXPECT_EQ(names.count("r.item_table"), cache ? 1u : 0u);
        EXPECT_EQ(names.count("r.item_reprs"), cache ? 0u : 1u);
        EXPECT_EQ(validate_plan(p), "");
        Harness h(*be, c, s);
        EXPECT_EQ(h.rt->plan().total_bytes, p.total_bytes);
        RecBatch rb = random_batch(c, 3, 1);
        h.rt->zero_grads();
        h.rt->forward_backward(rb.batch(c), 0.1f);
        RecBatch eb = random_batch(c, 4, 2);
        h.rt->eval_loss(eb.batch(c));
        std::vector<uint32_t> hist{3, 4, 5};
        std::vector<std::span<const uint32_t>> hs{hist};
        std::vector<float> scores(static_cast<size_t>(c.items + 1));
        h.model.score_next(hs, scores.data());
        EXPECT_LE(h.rt->arena().high_water_bytes(), p.total_bytes) << loss << " cache " << cache;
      }
    }
  }
}

// Loss sum of one micro-batch at the current parameters (the gradient is a by-product).
double loss_at(Harness& h, const Batch& b) {
  h.rt->zero_grads();
  return h.rt->forward_backward(b, 1.0f);
}

void check_finite_differences(const GPT2RecConfig& c, bool cache) {
  auto be = make_cpu_backend();
  PlanShape s;
  s.micro_batch = 2;
  s.eval_batch = 2;
  s.item_cache = cache;
  Harness h(*be, c, s);
  RecBatch rb = random_batch(c, 2, 3);
  const Batch b = rb.batch(c);
  loss_at(h, b);
  const std::vector<float> g = h.grads();
  std::vector<float> p = h.params();
  const ParamTable& t = h.model.param_table();
  // a few coordinates of every kind of parameter: item rows that occur, the head, a block, positions
  std::vector<int64_t> coords;
  for (const char* name : {"item_w", "item_b", "qkvw", "fcprojw", "lnfw", "wpe"}) {
    const ParamEntry& e = t.at(name);
    for (int64_t k : {int64_t{0}, e.count / 3, e.count - 1}) coords.push_back(e.offset + k);
  }
  const ParamEntry& wte = t.at("wte");
  for (int32_t item : {rb.targets[0], rb.tokens[1], c.loss == "bpr" ? rb.negatives[0] : rb.targets[1]})
    for (int64_t k : {int64_t{0}, int64_t{c.n_embd - 1}}) coords.push_back(wte.offset + item * c.n_embd + k);
  const float eps = 3e-3f;
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
    EXPECT_NEAR(g[static_cast<size_t>(i)], fd, 2e-3 + 2e-2 * std::fabs(fd))
        << c.loss << " cache " << cache << " parameter " << i;
  }
}

TEST(GPT2Rec, WholeModelGradientsMatchFiniteDifferences) {
  check_finite_differences(small("bpr", 2), true);
  check_finite_differences(small("bpr", 2), false);
  check_finite_differences(small("ce"), true);
}

TEST(GPT2Rec, ItemTableOnAndOffGiveTheSameLossesAndGradients) {
  auto be = make_cpu_backend();
  const GPT2RecConfig c = small("bpr", 3);
  std::vector<float> g[2];
  double loss[2];
  for (int on = 0; on < 2; ++on) {
    PlanShape s;
    s.micro_batch = 4;
    s.item_cache = on == 1;
    Harness h(*be, c, s);
    RecBatch rb = random_batch(c, 4, 9);
    h.rt->zero_grads();
    loss[on] = h.rt->forward_backward(rb.batch(c), 0.05f);
    // a second micro-batch accumulates (GradWrite::add) into the first's gradients
    RecBatch rb2 = random_batch(c, 4, 10);
    loss[on] += h.rt->forward_backward(rb2.batch(c), 0.05f);
    g[on] = h.grads();
  }
  EXPECT_NEAR(loss[0], loss[1], 1e-4 * std::fabs(loss[1]));
  double d = 0, n = 0;
  for (size_t i = 0; i < g[0].size(); ++i) d += (g[0][i] - g[1][i]) * (g[0][i] - g[1][i]), n += g[1][i] * g[1][i];
  EXPECT_LT(std::sqrt(d / n), 1e-5);
}

TEST(GPT2Rec, GradReadyHookReportsEveryParameterOnce) {
  auto be = make_cpu_backend();
  for (bool cache : {true, false}) {
    const GPT2RecConfig c = small();
    PlanShape s;
    s.micro_batch = 2;
    s.item_cache = cache;
    Harness h(*be, c, s);
    std::vector<int> covered(static_cast<size_t>(h.model.num_params()), 0);
    std::vector<std::vector<std::pair<int64_t, int64_t>>> calls[2];  // each backward's reports
    RecBatch rb = random_batch(c, 2, 4);
    h.rt->zero_grads();
    h.rt->forward_backward(rb.batch(c), 0.1f, [&](std::span<const ParamRange> rs) {
      calls[0].emplace_back();
      for (const ParamRange& r : rs) {
        calls[0].back().emplace_back(r.offset, r.count);
        for (int64_t i = r.offset; i < r.offset + r.count; ++i) covered[static_cast<size_t>(i)]++;
      }
    });
    EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int k) { return k == 1; })) << "cache " << cache;
    // Other users and items, adding to the gradients: the same reports in the same calls (a
    // rank whose backward failed replays the last step's reports: GradReducer::drain).
    RecBatch other = random_batch(c, 2, 11);
    h.rt->forward_backward(other.batch(c), 0.1f, [&](std::span<const ParamRange> rs) {
      calls[1].emplace_back();
      for (const ParamRange& r : rs) calls[1].back().emplace_back(r.offset, r.count);
    });
    EXPECT_EQ(calls[0], calls[1]) << "cache " << cache;
  }
}

// The recommender's forward (GPT-2's blocks, its item head) names each parameter before an op
// reads it (ZeRO-1's gatherer waits only for what was named: models/param_need_check.h).
TEST(GPT2Rec, ReadsEachParameterOnlyAfterTheForwardNamedIt) {
  auto be = make_cpu_backend();
  for (bool cache : {true, false}) {
    const GPT2RecConfig c = small();
    PlanShape s;
    s.micro_batch = 2;
    s.item_cache = cache;
    Harness h(*be, c, s);
    RecBatch rb = random_batch(c, 2, 9);
    testing::expect_reads_only_named_params(*h.rt, rb.batch(c), std::string("item cache ") + (cache ? "on" : "off"));
  }
}

TEST(GPT2Rec, RankerScoresAreTheOnesTheLossUses) {
  auto be = make_cpu_backend();
  const GPT2RecConfig c = small("bpr", 1);
  PlanShape s;
  s.micro_batch = 1;
  s.eval_batch = 2;
  Harness h(*be, c, s);
  // Three histories (more than one rank batch), one longer than T (cut to its last T items).
  std::vector<std::vector<uint32_t>> hist = {{5, 6, 7}, {1}, {2, 3, 4, 5, 6, 7, 8, 9}};
  std::vector<std::span<const uint32_t>> spans(hist.begin(), hist.end());
  std::vector<float> scores(hist.size() * static_cast<size_t>(c.items + 1));
  h.model.score_next(spans, scores.data());
  for (size_t u = 0; u < hist.size(); ++u) {
    EXPECT_TRUE(std::isinf(scores[u * (c.items + 1)]));
    std::vector<uint32_t> ctx = hist[u];
    if (ctx.size() > static_cast<size_t>(c.seq_len)) ctx.erase(ctx.begin(), ctx.end() - c.seq_len);
    // eval loss of (ctx -> pos 11, neg 12) must be -log sigmoid(s11 - s12) from the same scores
    RecBatch rb;
    rb.b = 1;
    rb.tokens.assign(static_cast<size_t>(c.seq_len), 0);
    rb.targets.assign(static_cast<size_t>(c.seq_len), -1);
    rb.negatives.assign(static_cast<size_t>(c.seq_len), 1);
    for (size_t t = 0; t < ctx.size(); ++t) rb.tokens[t] = static_cast<int32_t>(ctx[t]);
    rb.targets[ctx.size() - 1] = 11;
    rb.negatives[ctx.size() - 1] = 12;
    const double loss = h.rt->eval_loss(rb.batch(c));
    const double x = scores[u * (c.items + 1) + 11] - scores[u * (c.items + 1) + 12];
    EXPECT_NEAR(loss, std::log1p(std::exp(-x)), 1e-4) << "history " << u;
  }
  // the same history scores the same whatever it is batched with
  std::vector<std::span<const uint32_t>> one{spans[2]};
  std::vector<float> alone(static_cast<size_t>(c.items + 1));
  h.model.score_next(one, alone.data());
  for (int i = 1; i <= c.items; ++i) EXPECT_NEAR(alone[i], scores[2 * (c.items + 1) + i], 1e-5);
}

TEST(GPT2Rec, FitterDropsTheItemTableWhenItCostsAccumulation) {
  auto be = make_cpu_backend();
  GPT2RecConfig c = small();
  c.items = 200000;  // a large catalogue: the table is 2 x 200k x 16 floats
  GPT2Rec m(c);
  PlanFunction fn = [&](const PlanShape& s) { return runtime_plan(m, *be, s); };
  PlanShape base;
  base.precision = Precision::fp32;
  FitRequest req;
  req.global_batch = 64;
  req.has_item_cache = true;
  PlanShape off = base;
  off.micro_batch = 64;
  off.item_cache = false;
  req.budget = fn(off).total_bytes;  // exactly what the whole batch needs without the table
  FitResult r = fit_batch(fn, base, req);
  EXPECT_FALSE(r.shape.item_cache);
  EXPECT_EQ(r.shape.micro_batch, 64);
  req.budget *= 4;  // room for the table too: kept
  r = fit_batch(fn, base, req);
  EXPECT_TRUE(r.shape.item_cache);
  req.item_cache = false;  // an explicit choice is kept
  EXPECT_FALSE(fit_batch(fn, base, req).shape.item_cache);
}

TEST(GPT2Rec, ConfigurationRoundTripsAndNamesWhatIsWrong) {
  const GPT2RecConfig c = small("ce");
  auto m = make_model(c.to_json(), "ckpt.ftc");
  EXPECT_EQ(m->family(), "gpt2rec");
  EXPECT_EQ(m->config(), c.to_json());
  auto expect_error = [](nlohmann::json j, const std::string& needle) {
    try {
      make_model(j, "ckpt.ftc");
      ADD_FAILURE() << "no error for " << j.dump();
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("ckpt.ftc"), std::string::npos) << e.what();
    }
  };
  nlohmann::json j = c.to_json();
  j["loss"] = "hinge";
  expect_error(j, "--rec-loss must be bpr or ce");
  j = c.to_json();
  j["negatives"] = 0;
  expect_error(j, "--negatives");
  j = c.to_json();
  j.erase("items");
  expect_error(j, "lacks 'items'");
  j = c.to_json();
  j["vocab_size"] = 3;
  expect_error(j, "unknown recommender setting 'vocab_size'");
}

}  // namespace
}  // namespace ft
