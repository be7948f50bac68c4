// Automatic batch fitting: choose micro-batch, gradient accumulation, activation recompute
// and optimizer sharding so that the requested global batch is kept exactly and the plan
// fits the budget. Model-agnostic: it only needs a function from a candidate shape to its
// memory plan (models/*_plan.h provide one per model).
//
// Order of preference (fastest first): no recompute with the largest micro-batch that fits,
// with ZeRO-1 optimizer sharding when there are several ranks (measured faster than
// replicated state, and smaller); without it if it cannot apply; then per-block recompute
// (a second forward pass). One exception, for speed (SpeedModel): with recompute at auto, a
// micro-batch too small to keep a GPU busy without recompute gives way to recompute with a
// larger one when that is predicted clearly faster. The accumulation steps are the fewest
// the largest fitting micro-batch (capped at the per-rank batch) allows, and the per-rank
// batch is spread evenly over them: micro-batch ceil(per-rank / steps). When that does not
// divide the per-rank batch, the last micro-batch of each step is smaller (by less than the
// number of steps), and every token is weighted by 1/(global batch tokens), so the update
// equals one big batch.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "plan/memory_plan.h"
#include "plan/shape.h"

namespace ft {

using PlanFunction = std::function<MemoryPlan(const PlanShape&)>;

// How the step's speed depends on the micro-batch, for the one choice memory leaves open: with
// recompute at auto, no recompute at a small micro-batch against recompute at a larger one.
// Time per sample is taken as (1 + recompute_cost if recompute) x (1 + half_rate_rows / rows),
// rows = the average micro-batch x rows_per_sample (GPT-2: its tokens): a step that is mostly
// fixed costs (weights read once per micro-batch, launches, products with few rows) at small
// micro-batches. Recompute is taken when that predicts at least kRecomputeMinGain less time.
// Off (any field 0: the CPU, whose rate hardly depends on the micro-batch, or a model without
// a measured recompute cost), recompute is only taken when nothing fits without it.
struct SpeedModel {
  int64_t rows_per_sample = 0;
  double half_rate_rows = 0;   // rows of a micro-batch at which it runs at half the large-batch rate
  double recompute_cost = 0;   // recompute's extra time, a fraction of the step without it
  bool on() const { return rows_per_sample > 0 && half_rate_rows > 0 && recompute_cost > 0; }
  double time_per_sample(bool recompute, double micro_batch) const {
    return (1 + (recompute ? recompute_cost : 0)) * (1 + half_rate_rows / (micro_batch * rows_per_sample));
  }
};
// Measured on 2 H200s (docs/PERFORMANCE.md, session 37; GPT-2 XL, T=1024, bf16, global batch 64,
// --memory-limit 20GiB): recompute at micro-batches 2 and 11 ran 75.2k and 87.0k tokens/s,
// none at 1 78.5k; the form above fits all three with 407 rows and a recompute cost of 0.22,
// and predicts 2 GPUs without recompute at 32 within 1% of one GPU's measured 55.5k x 2 x 0.97.
inline constexpr double kGpuHalfRateRows = 400;
inline constexpr double kRecomputeMinGain = 0.05;

struct FitRequest {
  int64_t global_batch = 1;            // over all ranks
  int64_t micro_batch = 0;             // 0: auto
  int64_t grad_accum = 0;              // 0: derived
  std::optional<Recompute> recompute;  // nullopt: auto
  int zero_stage = -1;                 // -1: auto
  // The model's item table (PlanShape::item_cache): only for models that have one. nullopt:
  // auto, which keeps the table unless dropping it takes fewer accumulation steps (a larger
  // micro-batch) or is the only way anything fits.
  bool has_item_cache = false;
  std::optional<bool> item_cache;
  // PlanShape::keep_level: at most this level (Model::max_keep_level(); 0: none), the highest
  // that fits the budget beside the chosen batch (a higher level keeps more bytes, though its
  // plan may be smaller).
  int max_keep_level = 0;
  int64_t eval_batch = 0;              // 0: auto (largest that fits, capped at eval_cap)
  int64_t eval_cap = 0;                // 0: the per-rank global batch
  size_t budget = 0;                   // bytes the arena may take on each device
  std::string budget_source;           // for messages, e.g. "--memory-limit 16GiB"
  // When the flag behind the budget also pays for what grows beside the arena (the CPU's host
  // buffers and runtime under --host-memory-limit): the flag's value under which an arena of
  // the given bytes fits, with a spare for what the next process measures (the runtime is a
  // measured resident set). "Nothing fits" then names that value, rounded up to a MiB, not the
  // arena's budget alone; 0 when no value of the flag fits it (the memory available bounds the
  // arena before the flag does).
  std::function<size_t(size_t)> limit_for_arena;
  std::string budget_flag;             // that flag, e.g. "--host-memory-limit"
  SpeedModel speed;                    // off: recompute only when nothing fits without it
};

struct FitResult {
  PlanShape shape;              // micro_batch, eval_batch, recompute, zero_stage, item_cache, keep_level filled in
  int64_t per_rank_batch = 0;   // the largest rank's share: ceil(global / world) (core/batch.h: rank_share)
  int64_t grad_accum = 0;       // micro-steps per optimizer step
  int64_t last_micro_batch = 0; // size of the last micro-step (== micro_batch when it divides)
  int64_t max_fitting_micro_batch = 0;  // largest that fits with the chosen settings
  // Recompute taken for speed (SpeedModel): the largest micro-batch without it, and the
  // predicted time per sample with recompute against without; 0 otherwise.
  int64_t micro_batch_without_recompute = 0;
  double predicted_time_ratio = 0;
  MemoryPlan plan;
  size_t budget = 0;
  std::string budget_source;    // FitRequest::budget_source: how the budget was set
};

// A fit refused for this rank's budget, naming a value that would do: the largest micro- or
// evaluation batch that fits, or the memory limit that fits. The ranks of one run have
// budgets of their own (each GPU's free memory, what each process holds), so a value one
// rank names could be refused by another; Session names the one every rank takes, the
// least batch or the most memory: `with_value` is this refusal naming that value.
class FitRefused : public UserError {
 public:
  // What the value is, and so how the ranks' values combine (each kind on its own): the least
  // micro-batch, the least evaluation batch, the most memory; none: no value named.
  enum class Take { none, least_micro_batch, least_eval_batch, most_memory };
  using Compose = std::function<std::string(int64_t)>;  // the message naming a value
  FitRefused(Compose compose, int64_t value, Take take)
      : UserError(compose(value)), compose_(std::move(compose)), value_(value), take_(take) {}
  explicit FitRefused(const std::string& message) : UserError(message) {}
  int64_t value() const { return value_; }
  Take take() const { return take_; }
  FitRefused with_value(int64_t v) const { return take_ == Take::none ? *this : FitRefused(compose_, v, take_); }

 private:
  Compose compose_;
  int64_t value_ = 0;
  Take take_ = Take::none;
};

// Throws FitRefused when nothing fits (stating the smallest budget that would) or when an
// explicit --micro-batch-size, --grad-accum-steps or --eval-batch-size does not fit (stating
// the largest batch that would).
FitResult fit_batch(const PlanFunction& plan_fn, PlanShape base, const FitRequest& req);

// The micro-batch sizes of a rank whose share of the global batch is `share` samples (the
// largest, fit.per_rank_batch, or one fewer: core/batch.h's rank_share): fit.grad_accum of
// them on every rank, the largest share's micro_batch x (grad_accum - 1) + last_micro_batch,
// a smaller share's one fewer (from its last micro-batch, or its first when the last has one:
// in micro-batches of 1 that first one is empty, 0, and the rank skips it).
std::vector<int64_t> micro_batch_sizes(const FitResult& fit, int64_t share);

// Largest micro-batch in [1, cap] whose plan fits `budget` (0 if none), by bisection: plan
// size grows monotonically with the micro-batch.
int64_t largest_fitting(const PlanFunction& plan_fn, PlanShape shape, int64_t cap, size_t budget,
                        bool vary_eval);

// The largest batch (micro or evaluation) whose plan can be computed without a size
// overflowing: every buffer is affine in the batch (c + b*k bytes, c, k >= 0), so at batch b
// it is at most b times its size at batch 1, and b times the sum of those sizes is kept
// below 2^62 bytes (products of element counts and dtype sizes, offsets plus sizes: all far
// from int64/size_t overflow). Any budget fits only far smaller batches (budgets are at most
// kMaxBudgetBytes), so this refuses nothing a device could run. A model with an item table
// (has_item_cache) is measured with it and without, whichever needs more.
int64_t max_plannable_batch(const PlanFunction& plan_fn, PlanShape shape, bool has_item_cache = false);
inline constexpr size_t kMaxPlannableBytes = size_t{1} << 62;

// Host memory the run needs beside the device arena: batch staging, loss and step-sums
// read-back, and the blocks the weights and checkpoints pass through. sample_bytes: one
// sample's host bytes as the task stores it (every field); loss_floats: per-sample floats
// the model reads back (per-token losses).
// A training step's sums and update control, read back each step (train/runtime.h
// StepSums: f64 [5] loss, stop, gradient sum of squares, units ahead, ranks out of memory;
// f32 [2] control). The same bytes sit in the arena (the pinned buffer "step_scalars").
inline constexpr int64_t kStepSums = 5;
inline constexpr size_t kStepScalarBytes = kStepSums * sizeof(double) + 2 * sizeof(float);
// Elements of the fp32 layout the host holds at once when weights load or go to a checkpoint
// (train/runtime.cpp, train/model_io.cpp): 16 MiB of fp32, 8 MiB rounded to 16 bits beside
// them. The start draws kWeightsDrawBlock at once, so that 16 of ParamTable's random streams
// (a kInitBlock each) run in parallel: drawn 4 Mi at a time, GPT-2 XL's start on 2 H200s
// took 16 s longer than drawn whole (session 39). No rank stages the whole layout (GPT-2 XL:
// 5.8 GiB a rank); a Hugging Face folder's weights (--init-from) pass one tensor at a time.
inline constexpr int64_t kWeightsBlock = int64_t{1} << 22;
inline constexpr int64_t kWeightsDrawBlock = 4 * kWeightsBlock;
inline size_t weights_block_bytes(int64_t num_params) {  // smaller models: their size
  return static_cast<size_t>(std::min(num_params, kWeightsDrawBlock)) * 4 +
         static_cast<size_t>(std::min(num_params, kWeightsBlock)) * 2;
}
struct HostItem {
  std::string name;
  size_t bytes = 0;
  // A staging buffer that lives only inside its phase (the weights' start or a load, a
  // checkpoint's write), and no two phases overlap, so only the largest counts.
  bool one_at_a_time = false;
};
struct HostPlan {
  std::vector<HostItem> items;
  // What the process held before any of these (libraries, the CUDA context's and NCCL's
  // host side): its resident set when the plan was made, measured (0: not measured).
  size_t runtime_bytes = 0;
  size_t total() const;  // runtime + the other items + the largest one-at-a-time item; SIZE_MAX rather than wrapping
};
// upload_ring_bytes: the backend's page-locked staging for uploads (Backend::upload_staging_bytes);
// first_step_bytes: what its libraries take at the first step (Backend::first_step_host_allowance);
// init_from_bytes: what reading a Hugging Face folder's weights (--init-from) holds at once
// (0: none read).
HostPlan host_plan(int64_t num_params, size_t sample_bytes, size_t loss_floats, const PlanShape& s,
                   size_t upload_ring_bytes = 0, size_t first_step_bytes = 0, size_t init_from_bytes = 0);

// The share of host memory one rank may plan for when `local_ranks` ranks start on the same
// machine at once (fittrain's workers, or mpirun's ranks on one node): each reads the
// machine's available memory before the others have taken theirs, so each plans for its part
// of it, the margin taken first: default_budget(available, total) / local_ranks.
size_t shared_host_budget(size_t available_bytes, size_t total_bytes, int local_ranks);

// Budget: the device's free memory less a safety margin (max(256 MiB, 2%)). The free memory
// is read after the CUDA context and library handles exist, so they are already out of it;
// the margin covers what libraries load lazily at the first step and other processes.
size_t default_budget(size_t free_bytes, size_t total_bytes);
constexpr size_t kMinSafetyMargin = 256ull << 20;

}  // namespace ft
