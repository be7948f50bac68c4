// The training step's numerics guard: a step whose loss or gradient norm is not finite is not
// applied. The weights and the optimizer state stay as they were (AdamW is not called), the
// batch is consumed (data cursor, step counter and learning-rate schedule move on), the step is
// logged naming the first parameter tensor whose gradient is not finite (scanned on the host
// only on such a step, so a healthy step costs nothing) and the metrics file gets a row. After
// `--max-bad-steps` such steps in a row the run stops (exit 2).
//
// Checkpoints and bad streaks. While the run is in a streak of bad steps no checkpoint of the
// current step is written. Because no update was applied during the streak, the weights and
// optimizer state in memory are exactly those after the last good step; the guard keeps that
// step's TrainState (step, data cursor, loss scaler, ...). A periodic checkpoint due during a
// streak is skipped; a checkpoint that must be written during a streak (a signal, the end of
// the run, the stop after --max-bad-steps) is that pre-streak state, written under the
// pre-streak step's name (unless that file exists already). So the newest checkpoint is
// always from before the first bad step of a streak.
//
// fp16: the dynamic loss scaler's overflow handling is unchanged (a non-finite gradient norm
// halves the scale and skips the step). Such a skip counts as a bad step only when the scale
// is already at its floor and cannot back off any further. A non-finite loss is a bad step
// in every precision (the loss scale cannot fix the forward pass).
//
// Test hooks (environment variables, read once when training starts; for tests only, never
// needed in a real run):
//   FT_TEST_NAN_AT_STEP=k       after micro-batch 0 of step k (1-based, as logged), write NaN
//                               into one gradient element (flat index FT_TEST_NAN_INDEX,
//                               default the middle of the parameter buffer)
//   FT_TEST_NAN_AT_STEP=k+      the same at every step from k on
//   FT_TEST_SKIP_UPDATE_AT_STEP=k  skip step k's update as a bad step would, without any NaN
//   FT_TEST_OOM_AT=K or K@R     an allocation failure (OutOfMemoryError) in step K, on rank R only:
//                               inside its last backward, right after the first gradient report,
//                               when gradients are reduced over ranks; else before its first
//                               micro-batch; once (not again in the run it re-plans)
//   FT_TEST_EVAL_OOM_AT=K or K@R  an allocation failure in the evaluation at step K (this
//                               rank's first loss batch), on rank R only; once
//   FT_TEST_FAIL_AT=K or K@R    an error that is not about memory at the start of step K (the
//                               rank's process ends: the job must end, naming it)
//   FT_TEST_HANG_AT=K or K@R    the rank stops answering at step K (sleeps until killed): the
//                               others' collectives time out (--comm-timeout)
//   FT_TEST_CPU_MEMORY_AFTER_PLAN=B or B@R  once planned, the CPU backend has B bytes of
//                               memory (on rank R only), as if another process had taken the
//                               rest between planning and allocation (Session::allocate)
// In fp32/bf16 a run with the first hook ends bit-identical to one with the second (fp16
// instead treats the NaN as a loss-scale overflow).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/tensor.h"
#include "models/param_table.h"
#include "optim/loss_scaler.h"
#include "train/model_io.h"

namespace ft {

class ModelRuntime;

struct StepTestHooks {
  int64_t nan_step = 0;      // 0: off
  bool nan_onward = false;   // every step from nan_step on
  int64_t nan_index = -1;    // flat gradient element (-1: the middle)
  int64_t skip_step = 0;     // 0: off
  // The "K or K@R" hooks: K (a step, or bytes), on rank R only (-1: every rank); 0: off.
  struct AtRank {
    int64_t value = 0;
    int rank = -1;
    bool on(int r) const { return value > 0 && (rank < 0 || r == rank); }
    bool at(int64_t step, int r) const { return on(r) && step == value; }
  };
  AtRank oom;                // FT_TEST_OOM_AT
  AtRank eval_oom;           // FT_TEST_EVAL_OOM_AT
  AtRank fail;               // FT_TEST_FAIL_AT
  AtRank hang;               // FT_TEST_HANG_AT
  AtRank device_fault;       // FT_TEST_DEVICE_FAULT_AT (Backend::fault_for_test)
  AtRank memory_after_plan;  // FT_TEST_CPU_MEMORY_AFTER_PLAN (bytes)

  static StepTestHooks from_env();
  bool poison_at(int64_t step) const { return nan_step > 0 && (step == nan_step || (nan_onward && step > nan_step)); }
  bool skip_at(int64_t step) const { return skip_step > 0 && step == skip_step; }
};

// Index of the first non-finite element of n host values of `dtype` (f32, bf16, f16); -1 when
// all are finite (and for other dtypes).
int64_t first_nonfinite(const void* host, DType dtype, int64_t n);
// The same for a tensor in device memory, copied through `scratch` (resized to at most
// `chunk_bytes`) one chunk at a time.
int64_t first_nonfinite_on_device(Backend& be, Tensor t, std::vector<char>& scratch, size_t chunk_bytes = 1u << 20);
// The parameter a flat index falls in: "wte", "qkvw (layer 3)" (layers counted from 0);
// "element i" past the table.
std::string param_name_at(const ParamTable& table, int64_t index);
// Test hook: writes NaN (in the gradient's dtype) into grads[index].
void poison_gradient(Backend& be, Tensor grads, int64_t index);

// What to do with one step's update.
struct StepVerdict {
  bool apply = true;        // run AdamW
  bool bad = false;         // counts toward the bad streak (and is logged by report_bad)
  bool scaler_skip = false; // fp16 loss-scale overflow: skipped, counted by the scaler
  bool no_units = false;    // the global batch holds no loss unit: nothing to learn, not bad
  std::string reason;       // why not applied
};

class StepGuard {
 public:
  // UserError when max_bad_steps < 1.
  StepGuard(int64_t max_bad_steps, StepTestHooks hooks);

  const StepTestHooks& hooks() const { return hooks_; }
  // Test hook: call after micro-batch 0 of step `step` (1-based).
  void after_first_micro_batch(ModelRuntime& rt, int64_t step) const;

  // Judges step `step` (1-based) from its loss and the sum of squares of its (scaled)
  // gradients; `scaler` is the fp16 loss scaler (null otherwise) and is updated as before.
  // `before` is the state after the previous step: kept as the pre-streak state when this
  // step starts a streak. `no_units`: no loss unit in the whole global batch (every row of a
  // chat batch cut inside its prompt by prepare's --seq-len), so its mean loss is undefined
  // and its gradient zero: the update is skipped (the device skips it by the same flag), the
  // step is not bad and the streak and the scaler are left as they were.
  StepVerdict judge(int64_t step, double loss, double scaled_sum_squares, DynamicLossScaler* scaler,
                    const TrainState& before, bool no_units = false);
  // For a no-units verdict: prints the line and returns the metrics row.
  nlohmann::json report_no_units(int64_t step, double lr) const;
  // For a bad verdict: scans the gradients for the first non-finite tensor, prints the line
  // and returns the metrics row.
  nlohmann::json report_bad(ModelRuntime& rt, int64_t step, double loss, double grad_norm, double lr,
                            const StepVerdict& v);

  int64_t streak() const { return streak_; }
  int64_t first_bad_step() const { return first_bad_; }
  bool in_streak() const { return streak_ > 0; }
  bool should_stop() const { return streak_ >= max_bad_; }
  int64_t max_bad_steps() const { return max_bad_; }
  // The state a checkpoint written now must carry: `current`, or the pre-streak state.
  const TrainState& checkpoint_state(const TrainState& current) const { return in_streak() ? pre_streak_ : current; }
  // For a checkpoint that must be written now (signal, end of run, stop): the state to save,
  // or null when nothing is to be written (printing why): in a streak, when the pre-streak
  // state's file exists in `ckdir` already, or when no step has been applied at all and
  // `have_start_checkpoint` is false (a fresh run whose every step was bad).
  const TrainState* state_to_save(const TrainState& current, const std::string& ckdir,
                                  bool have_start_checkpoint) const;
  // The message of the stop after --max-bad-steps (the caller throws it as a UserError).
  std::string stop_message(int64_t step, const std::string& ckdir) const;

 private:
  int64_t max_bad_;
  StepTestHooks hooks_;
  int64_t streak_ = 0, first_bad_ = 0;
  TrainState pre_streak_;
  std::vector<char> scratch_;  // host chunk for the gradient scan (bad steps only)
};

}  // namespace ft
