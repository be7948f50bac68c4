// Automatic batch fitting: the chosen plan always fits, the fewest accumulation steps that
// fit with the batch spread evenly over them, recompute only when needed or (with a GPU's
// speed model) clearly faster, and the errors state what would fit.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "models/gpt2_lm.h"
#include "plan/fit.h"
#include "train/runtime.h"

namespace ft {
namespace {

struct FitFixture : ::testing::Test {
  std::unique_ptr<Backend> be = make_cpu_backend();
  GPT2LM model{GPT2Config{2, 2, 32, 16, 100}};
  PlanShape base() const { return PlanShape{}; }
  PlanFunction fn() {
    return [this](const PlanShape& s) { return runtime_plan(model, *be, s); };
  }
  size_t total(int64_t mb, Recompute rc, int64_t eb = 1) {
    PlanShape s = base();
    s.micro_batch = mb;
    s.eval_batch = eb;
    s.recompute = rc;
    return fn()(s).total_bytes;
  }
};

TEST_F(FitFixture, PlanGrowsWithMicroBatchAndRecomputeSaves) {
  EXPECT_LT(total(1, Recompute::none), total(2, Recompute::none));
  EXPECT_LT(total(8, Recompute::block), total(8, Recompute::none));
  EXPECT_EQ(validate_plan(fn()([&] { auto s = base(); s.micro_batch = 4; return s; }())), "");
}

// Random budgets and batches, half of them with a GPU's speed model: the plan always fits, the
// batch is spread evenly over the fewest steps the chosen settings allow, and recompute comes
// only when nothing fits without it or when it is predicted clearly faster.
TEST_F(FitFixture, RandomBudgetsAlwaysFitWithTheFewestStepsSpreadEvenly) {
  Rng rng(123);
  const size_t lo = total(1, Recompute::block) * 9 / 10, hi = total(48, Recompute::none) * 11 / 10;
  int fitted = 0, recomputed = 0, for_speed = 0, refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    FitRequest req;
    if (trial % 2) req.speed = {model.rows_per_sample(), kGpuHalfRateRows, model.recompute_cost()};  // a GPU's
    req.global_batch = 1 + static_cast<int64_t>(rng.next_u64() % 48);
    req.budget = lo + rng.next_u64() % (hi - lo);
    req.budget_source = "test";
    try {
      FitResult r = fit_batch(fn(), base(), req);
      ++fitted;
      EXPECT_LE(r.plan.total_bytes, req.budget);
      EXPECT_EQ(validate_plan(r.plan), "");
      // The global batch is kept exactly: full micro-batches plus the last one.
      EXPECT_EQ((r.grad_accum - 1) * r.shape.micro_batch + r.last_micro_batch, req.global_batch);
      EXPECT_GE(r.last_micro_batch, 1);
      EXPECT_LE(r.last_micro_batch, r.shape.micro_batch);
      // The largest fitting micro-batch sets the fewest steps; the batch is spread evenly
      // over them: the last micro-batch is smaller by less than the number of steps.
      const int64_t most = r.max_fitting_micro_batch, steps = (r.per_rank_batch + most - 1) / most;
      ASSERT_GE(most, r.shape.micro_batch) << "trial " << trial;
      if (most < r.per_rank_batch)
        EXPECT_GT(total(most + 1, r.shape.recompute), req.budget) << "trial " << trial;
      EXPECT_EQ(r.grad_accum, steps) << "trial " << trial;
      EXPECT_EQ(r.shape.micro_batch, (r.per_rank_batch + steps - 1) / steps) << "trial " << trial;
      EXPECT_LT(r.shape.micro_batch - r.last_micro_batch, steps) << "trial " << trial;
      if (r.micro_batch_without_recompute > 0) {
        // Recompute for speed: memory alone would have run the largest micro-batch without
        // it, and recompute's is predicted clearly faster.
        ++for_speed;
        const int64_t none = r.micro_batch_without_recompute, none_steps = (r.per_rank_batch + none - 1) / none;
        EXPECT_TRUE(req.speed.on()) << "trial " << trial;
        EXPECT_EQ(r.shape.recompute, Recompute::block) << "trial " << trial;
        EXPECT_LE(total(none, Recompute::none), req.budget) << "trial " << trial;
        EXPECT_GT(total(none + 1, Recompute::none), req.budget) << "trial " << trial;
        EXPECT_GT(none_steps, steps) << "trial " << trial;
        EXPECT_DOUBLE_EQ(r.predicted_time_ratio,
                         req.speed.time_per_sample(true, double(r.per_rank_batch) / steps) /
                             req.speed.time_per_sample(false, double(r.per_rank_batch) / none_steps));
        EXPECT_LE(r.predicted_time_ratio, 1 - kRecomputeMinGain) << "trial " << trial;
      } else if (r.shape.recompute == Recompute::block) {
        ++recomputed;
        EXPECT_GT(total(1, Recompute::none), req.budget);  // recompute only when needed
      }
      EXPECT_GE(r.shape.eval_batch, 1);
    } catch (const UserError& e) {
      ++refused;
      EXPECT_GT(total(1, Recompute::block), req.budget);
      EXPECT_NE(std::string(e.what()).find("nothing fits"), std::string::npos);
    }
  }
  EXPECT_GT(fitted, 100);
  EXPECT_GT(recomputed, 0);
  EXPECT_GT(for_speed, 0);
  EXPECT_GT(refused, 0);
}

// A per-rank batch of 16 where 15 fit: two steps either way, of 8 + 8 rather than 15 + 1.
TEST_F(FitFixture, TheBatchIsSpreadEvenlyOverTheFewestSteps) {
  // The fit of `global` samples with a budget where `largest` fit and one more does not.
  auto fit_where_largest_fits = [&](int64_t global, int64_t largest) {
    FitRequest req;
    req.global_batch = global;
    req.budget = total(largest, Recompute::none, 8);
    req.budget_source = "test";
    EXPECT_GT(total(largest + 1, Recompute::none), req.budget);
    const FitResult r = fit_batch(fn(), base(), req);
    EXPECT_EQ(r.max_fitting_micro_batch, largest);
    return r;
  };
  const FitResult r = fit_where_largest_fits(16, 15);
  EXPECT_EQ(r.shape.micro_batch, 8);
  EXPECT_EQ(r.grad_accum, 2);
  EXPECT_EQ(r.last_micro_batch, 8);
  EXPECT_EQ(r.shape.recompute, Recompute::none);
  EXPECT_LT(r.plan.total_bytes, total(15, Recompute::none, r.shape.eval_batch));
  // 17 over 3 steps (8 fit): 6 + 6 + 5.
  const FitResult q = fit_where_largest_fits(17, 8);
  EXPECT_EQ(q.shape.micro_batch, 6);
  EXPECT_EQ(q.grad_accum, 3);
  EXPECT_EQ(q.last_micro_batch, 5);
}

// With recompute at auto and a GPU's speed model, micro-batch 1 without recompute gives way to
// recompute with a larger micro-batch when that is predicted clearly faster (GPT-2 XL on 2
// H200s at 20GiB: 78.5k -> 87.0k tokens/s); pinned settings and a model without a speed
// model keep the old rule (recompute only when nothing fits without it).
TEST_F(FitFixture, RecomputeIsTakenForSpeedOnlyWhenItsLargerMicroBatchIsPredictedClearlyFaster) {
  const SpeedModel gpu{model.rows_per_sample(), kGpuHalfRateRows, model.recompute_cost()};
  ASSERT_TRUE(gpu.on());
  FitRequest req;
  req.global_batch = 16;
  req.budget = total(2, Recompute::none) - 1;
  req.budget_source = "test";
  ASSERT_GT(total(2, Recompute::none), req.budget);
  ASSERT_LE(total(3, Recompute::block), req.budget) << "recompute fits a larger micro-batch here";

  const FitResult by_memory = fit_batch(fn(), base(), req);  // no speed model: the old rule
  EXPECT_EQ(by_memory.shape.recompute, Recompute::none);
  EXPECT_EQ(by_memory.shape.micro_batch, 1);
  EXPECT_EQ(by_memory.micro_batch_without_recompute, 0);

  req.speed = gpu;
  const FitResult fast = fit_batch(fn(), base(), req);
  EXPECT_EQ(fast.shape.recompute, Recompute::block);
  EXPECT_EQ(fast.micro_batch_without_recompute, 1);
  EXPECT_LE(fast.plan.total_bytes, req.budget);
  const int64_t steps = (16 + fast.max_fitting_micro_batch - 1) / fast.max_fitting_micro_batch;
  EXPECT_EQ(fast.grad_accum, steps);
  EXPECT_EQ(fast.shape.micro_batch, (16 + steps - 1) / steps);
  EXPECT_EQ((fast.grad_accum - 1) * fast.shape.micro_batch + fast.last_micro_batch, 16);
  EXPECT_DOUBLE_EQ(fast.predicted_time_ratio,
                   gpu.time_per_sample(true, 16.0 / steps) / gpu.time_per_sample(false, 1));
  EXPECT_LE(fast.predicted_time_ratio, 1 - kRecomputeMinGain);

  // Pinned: --recompute none, or an explicit micro-batch, is what runs.
  FitRequest pinned = req;
  pinned.recompute = Recompute::none;
  EXPECT_EQ(fit_batch(fn(), base(), pinned).shape.recompute, Recompute::none);
  pinned = req;
  pinned.micro_batch = 1;
  EXPECT_EQ(fit_batch(fn(), base(), pinned).shape.recompute, Recompute::none);

  // A gain under kRecomputeMinGain is not worth recompute: without it 8 fit (2 steps of 8),
  // and a micro-batch of 8 rows already runs near the large-batch rate in this model.
  FitRequest near = req;
  near.budget = total(8, Recompute::none);
  near.speed.half_rate_rows = static_cast<double>(model.rows_per_sample());
  const FitResult stays = fit_batch(fn(), base(), near);
  EXPECT_EQ(stays.shape.recompute, Recompute::none);
  EXPECT_EQ(stays.shape.micro_batch, 8);
  EXPECT_EQ(stays.micro_batch_without_recompute, 0);
}

TEST_F(FitFixture, NothingFitsStatesTheSmallestBudgetThatWould) {
  FitRequest req;
  req.global_batch = 8;
  req.budget = 1000;
  req.budget_source = "--memory-limit 1000";
  try {
    fit_batch(fn(), base(), req);
    FAIL();
  } catch (const UserError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(std::to_string(total(1, Recompute::block))), std::string::npos) << m;
    EXPECT_NE(m.find("--memory-limit"), std::string::npos) << m;
  }
  req.budget = total(1, Recompute::block);  // the stated budget really fits
  EXPECT_NO_THROW(fit_batch(fn(), base(), req));
}

// With a pinned --eval-batch-size the budget named is training's beside that evaluation batch,
// to the byte (it was training's beside an evaluation batch of 1, refused again for the
// evaluation batch), and a pinned --recompute's "at auto it fits" is said only when it does.
TEST_F(FitFixture, NothingFitsWithAPinnedEvalBatchNamesTheBudgetForBoth) {
  FitRequest req;
  req.global_batch = 8;
  req.eval_batch = 64;
  req.budget = total(1, Recompute::block) - 1;  // nothing fits: the smallest training is 1 byte short
  req.budget_source = "--memory-limit";
  const size_t both = total(1, Recompute::block, 64);
  ASSERT_GT(both, req.budget);
  try {
    fit_batch(fn(), base(), req);
    FAIL();
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("(" + std::to_string(both) + " bytes) would fit with --eval-batch-size 64"), std::string::npos) << m;
  }
  req.recompute = Recompute::none;  // pinned: auto's recompute fits training, not the evaluation
  req.budget = total(1, Recompute::block) + 1;
  ASSERT_GT(total(1, Recompute::none), req.budget);
  try {
    fit_batch(fn(), base(), req);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()).find("at auto it fits"), std::string::npos) << e.what();
  }
  req.recompute = std::nullopt;
  req.budget = both;  // the budget named fits
  EXPECT_NO_THROW(fit_batch(fn(), base(), req));
  req.budget = both - 1;
  EXPECT_THROW(fit_batch(fn(), base(), req), UserError);
}

// With several ranks the ladder tries ZeRO-1 before ZeRO-0, so its last rung (recompute,
// ZeRO-0) is not its smallest: the refusal names the smallest rung and its size, and that
// budget really fits.
TEST_F(FitFixture, NothingFitsOnSeveralRanksNamesTheSmallestRung) {
  PlanShape two = base();
  two.world_size = 2;
  auto need = [&](int zero) {
    PlanShape s = two;
    s.micro_batch = 1;
    s.recompute = Recompute::block;
    s.zero_stage = zero;
    return fn()(s).total_bytes;
  };
  // fit_batch's refusal ("" and a test failure when it fits).
  auto refusal = [&](const FitRequest& req) -> std::string {
    try {
      fit_batch(fn(), two, req);
    } catch (const UserError& e) {
      return e.what();
    }
    ADD_FAILURE() << "fit_batch did not refuse a budget of " << req.budget;
    return "";
  };
  ASSERT_LT(need(1), need(0));
  FitRequest req;
  req.global_batch = 8;
  req.budget = 1000;
  req.budget_source = "--memory-limit 1000";
  std::string m = refusal(req);
  EXPECT_NE(m.find("recompute block, ZeRO stage 1) needs"), std::string::npos) << m;
  EXPECT_NE(m.find("(" + std::to_string(need(1)) + " bytes)"), std::string::npos) << m;
  req.budget = need(1);
  FitResult r = fit_batch(fn(), two, req);
  EXPECT_EQ(r.shape.zero_stage, 1);
  EXPECT_EQ(r.shape.micro_batch, 1);
  // Pinned to ZeRO-0, the same budget is refused, saying that auto would fit.
  req.zero_stage = 0;
  m = refusal(req);
  EXPECT_NE(m.find("ZeRO stage 0) needs"), std::string::npos) << m;
  EXPECT_NE(m.find("With --recompute and --zero-stage at auto it fits (micro-batch 1, recompute block, ZeRO stage 1"),
            std::string::npos) << m;
  req.budget = 1000;  // nothing fits either way: no such hint
  m = refusal(req);
  EXPECT_EQ(m.find("at auto it fits"), std::string::npos) << m;
}

TEST_F(FitFixture, ExplicitMicroBatchThatDoesNotFitIsRefusedWithTheLargest) {
  FitRequest req;
  req.global_batch = 32;
  req.recompute = Recompute::none;
  req.budget = total(5, Recompute::none);
  req.micro_batch = 16;
  try {
    fit_batch(fn(), base(), req);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("largest micro-batch that fits is 5"), std::string::npos) << e.what();
  }
  req.micro_batch = 4;
  FitResult r = fit_batch(fn(), base(), req);
  EXPECT_EQ(r.shape.micro_batch, 4);
  EXPECT_EQ(r.grad_accum, 8);
}

// A micro-batch that --grad-accum-steps pinned is refused naming that flag and the fewest steps
// whose micro-batches fit and divide the batch (it named --micro-batch-size, which was at auto).
TEST_F(FitFixture, AccumulationWhoseMicroBatchDoesNotFitNamesTheFlagAndTheStepsThatWould) {
  FitRequest req;
  req.global_batch = 36;
  req.recompute = Recompute::none;
  req.budget = total(5, Recompute::none);
  req.grad_accum = 2;  // micro-batches of 18
  try {
    fit_batch(fn(), base(), req);
    FAIL();
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--grad-accum-steps 2 gives micro-batches of 18"), std::string::npos) << m;
    EXPECT_NE(m.find("largest micro-batch that fits is 5"), std::string::npos) << m;
    EXPECT_NE(m.find("pass --grad-accum-steps 9"), std::string::npos) << m;  // 36 / 9 = 4 <= 5; 8 does not divide
    EXPECT_EQ(m.find("--micro-batch-size"), std::string::npos) << m;
  }
  req.grad_accum = 9;
  EXPECT_EQ(fit_batch(fn(), base(), req).shape.micro_batch, 4);
}

TEST_F(FitFixture, AccumulationAndWorldChecks) {
  FitRequest req;
  req.global_batch = 12;
  req.budget = 1ull << 34;
  req.grad_accum = 3;
  FitResult r = fit_batch(fn(), base(), req);
  EXPECT_EQ(r.shape.micro_batch, 4);
  req.grad_accum = 5;
  EXPECT_THROW(fit_batch(fn(), base(), req), UserError);
  req.grad_accum = 0;
  PlanShape b = base();
  b.world_size = 5;
  r = fit_batch(fn(), b, req);  // 12 over 5 ranks: shares 3 3 2 2 2, planned for 3
  EXPECT_EQ(r.per_rank_batch, 3);
  req.global_batch = 4;
  EXPECT_THROW(fit_batch(fn(), b, req), UserError);  // fewer samples than ranks
}

// A global batch that does not divide by the ranks: the plan is the largest share's, and every
// rank runs as many micro-steps, a smaller share one sample fewer (from its last micro-batch,
// or its first when the last has one; in micro-batches of 1 that first one is empty).
TEST_F(FitFixture, SharesThatDoNotDivideRunTheSameMicroSteps) {
  PlanShape b = base();
  b.world_size = 2;
  FitRequest req;
  req.budget = 1ull << 34;
  req.global_batch = 11;  // shares 6 and 5
  req.micro_batch = 3;
  FitResult r = fit_batch(fn(), b, req);
  EXPECT_EQ(r.per_rank_batch, 6);
  EXPECT_EQ(r.grad_accum, 2);
  EXPECT_EQ(micro_batch_sizes(r, 6), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(micro_batch_sizes(r, 5), (std::vector<int64_t>{3, 2}));
  req.global_batch = 9;  // shares 5 and 4 in micro-batches of 4: 4 + 1, and 3 + 1
  req.micro_batch = 4;
  r = fit_batch(fn(), b, req);
  EXPECT_EQ(micro_batch_sizes(r, 5), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(micro_batch_sizes(r, 4), (std::vector<int64_t>{3, 1}));
  req.micro_batch = 1;  // nothing to spare a sample from: the smaller share's first micro-step is empty
  r = fit_batch(fn(), b, req);
  EXPECT_EQ(r.grad_accum, 5);
  EXPECT_EQ(micro_batch_sizes(r, 5), (std::vector<int64_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(micro_batch_sizes(r, 4), (std::vector<int64_t>{0, 1, 1, 1, 1}));
  req.micro_batch = 0;  // the same through --grad-accum-steps 5 (5 steps of the largest share 5)
  req.grad_accum = 5;
  r = fit_batch(fn(), b, req);
  EXPECT_EQ(r.shape.micro_batch, 1);
  EXPECT_EQ(micro_batch_sizes(r, 4), (std::vector<int64_t>{0, 1, 1, 1, 1}));
  auto refused_with = [](const FitResult& fit, int64_t share) {
    try {
      micro_batch_sizes(fit, share);
    } catch (const InternalError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // A share two samples short is no rank's.
  EXPECT_NE(refused_with(r, 3).find("a rank's share of 3 samples next to the largest, 5"), std::string::npos);
  // One micro-step of one sample has none to give: a share of 0 is no rank's either (the
  // global batch is at least the world), and the step's backward would join no reduction.
  FitResult one = r;
  one.per_rank_batch = 1;
  one.grad_accum = 1;
  one.last_micro_batch = 1;
  EXPECT_NE(refused_with(one, 0).find("a share of 0 samples in 1 micro-steps"), std::string::npos)
      << refused_with(one, 0);
  EXPECT_EQ(micro_batch_sizes(one, 1), (std::vector<int64_t>{1}));
  req.grad_accum = 0;
  req.micro_batch = 1;
  req.global_batch = 8;  // it divides: micro-batch 1 is fine
  EXPECT_EQ(fit_batch(fn(), b, req).grad_accum, 4);
}

TEST_F(FitFixture, EvalBatchFitsBesideTraining) {
  FitRequest req;
  req.global_batch = 8;
  req.budget = total(8, Recompute::none, 8);
  FitResult r = fit_batch(fn(), base(), req);
  EXPECT_EQ(r.shape.micro_batch, 8);
  EXPECT_EQ(r.shape.eval_batch, 8);
  EXPECT_LE(r.plan.total_bytes, req.budget);
  req.eval_batch = 1000;
  EXPECT_THROW(fit_batch(fn(), base(), req), UserError);
}

TEST(HostPlanTest, CountsStagingBuffers) {
  PlanShape s;
  s.micro_batch = 4;
  s.eval_batch = 2;
  // a sample of tokens + targets, int32 x 16 each; 16 loss values per sample
  HostPlan h = host_plan(1000, 2 * 16 * 4, 16, s);
  EXPECT_EQ(h.total(), 2u * 2 * 4 * 16 * 4 + 2 * 2 * 16 * 4 + 4 * 16 * 4 + kStepScalarBytes + 1000 * 6);  // blocks of the model's size
  s.training = false;  // evaluation: no step sums, no training staging
  EXPECT_EQ(host_plan(1000, 2 * 16 * 4, 16, s).total(), 2u * 2 * 16 * 4 + 2 * 16 * 4 + 1000 * 6);
}

// The weights reach the device, and a checkpoint the file, through blocks of kWeightsBlock
// elements (train/runtime.cpp, model_io.cpp), whatever the model's size: GPT-2 XL's ranks
// used to stage the whole fp32 layout (5.8 GiB) at the start and at every checkpoint. A
// Hugging Face folder's weights (--init-from) pass a tensor at a time. The phases never
// overlap, so the total counts the largest staging once, plus the runtime the process held
// when planning.
TEST(HostPlanTest, StagingBuffersCountOnceAndTheRuntimeIsAdded) {
  PlanShape s;
  s.micro_batch = 4;
  s.eval_batch = 2;
  const int64_t xl = 1'557'611'200;  // GPT-2 XL's parameters
  auto staging = [](const HostPlan& h, size_t* others) {
    size_t staged = 0, items = 0;
    *others = 0;
    for (const HostItem& i : h.items) {
      if (i.one_at_a_time) {
        staged = std::max(staged, i.bytes);
        ++items;
      } else {
        *others += i.bytes;
      }
    }
    EXPECT_EQ(items, h.items.size() - 5);  // all but the batch, eval, loss, step sums and ring
    return staged;
  };
  size_t others = 0;
  HostPlan h = host_plan(xl, 2 * 16 * 4, 16, s, /*upload_ring_bytes=*/256);
  EXPECT_EQ(staging(h, &others), size_t{72} << 20);  // 16 Mi fp32 drawn, 4 Mi rounded: not the model's size
  EXPECT_EQ(others, 2u * 2 * 4 * 16 * 4 + 2 * 2 * 16 * 4 + 4 * 16 * 4 + kStepScalarBytes + 256);
  EXPECT_EQ(h.total(), others + weights_block_bytes(xl));
  h.runtime_bytes = 12345;
  EXPECT_EQ(h.total(), others + weights_block_bytes(xl) + 12345);
  h.runtime_bytes = SIZE_MAX - 10;  // saturates instead of wrapping
  EXPECT_EQ(h.total(), SIZE_MAX);

  // --init-from reads a Hugging Face folder a tensor at a time: GPT-2 XL's largest is wte,
  // 50257 x 1600 fp32, counted once beside the blocks.
  const size_t wte = size_t{50257} * 1600 * 4;
  HostPlan hf = host_plan(xl, 2 * 16 * 4, 16, s, 256, 0, /*init_from_bytes=*/wte);
  EXPECT_EQ(staging(hf, &others), wte);
  EXPECT_EQ(hf.total(), others + wte);
}

TEST(HostPlanTest, RanksOnOneMachineShareItsMemoryAfterTheMargin) {
  const size_t gib = size_t{1} << 30;
  EXPECT_EQ(shared_host_budget(20 * gib, 100 * gib, 1), default_budget(20 * gib, 100 * gib));
  EXPECT_EQ(shared_host_budget(20 * gib, 100 * gib, 4), (20 * gib - 2 * gib) / 4);  // margin 2% of 100 GiB
  EXPECT_EQ(shared_host_budget(20 * gib, 100 * gib, 0), default_budget(20 * gib, 100 * gib));
  EXPECT_EQ(shared_host_budget(gib, 100 * gib, 8), 0u);  // less than the margin: nothing
}

}  // namespace
}  // namespace ft
