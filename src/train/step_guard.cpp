#include "train/step_guard.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/half.h"
#include "train/checkpoint_dir.h"
#include "train/runtime.h"

namespace ft {

namespace {

int64_t env_int(const char* name, std::string* rest = nullptr) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  FT_USER_CHECK(end != v && x >= 0, name, "=", v, ": expected a step number (test hook)");
  if (rest) *rest = end;
  else FT_USER_CHECK(*end == '\0', name, "=", v, ": expected a number (test hook)");
  return static_cast<int64_t>(x);
}

std::string describe(double x) { return std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf"); }

nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

}  // namespace

StepTestHooks StepTestHooks::from_env() {
  StepTestHooks h;
  std::string rest;
  h.nan_step = env_int("FT_TEST_NAN_AT_STEP", &rest);
  FT_USER_CHECK(rest.empty() || rest == "+", "FT_TEST_NAN_AT_STEP: expected k or k+ (test hook)");
  h.nan_onward = rest == "+";
  if (std::getenv("FT_TEST_NAN_INDEX")) h.nan_index = env_int("FT_TEST_NAN_INDEX");
  h.skip_step = env_int("FT_TEST_SKIP_UPDATE_AT_STEP");
  // K or K@R: a step (or bytes), on one rank or on every rank (-1).
  auto at_rank = [&](const char* name, StepTestHooks::AtRank* hook) {
    std::string rest;
    hook->value = env_int(name, &rest);
    if (rest.empty()) return;
    char* end = nullptr;
    hook->rank = rest[0] == '@' ? static_cast<int>(std::strtol(rest.c_str() + 1, &end, 10)) : -1;
    FT_USER_CHECK(rest[0] == '@' && end && *end == '\0' && hook->rank >= 0, name, ": expected K or K@R (test hook)");
  };
  at_rank("FT_TEST_OOM_AT", &h.oom);
  at_rank("FT_TEST_EVAL_OOM_AT", &h.eval_oom);
  at_rank("FT_TEST_FAIL_AT", &h.fail);
  at_rank("FT_TEST_DEVICE_FAULT_AT", &h.device_fault);
  at_rank("FT_TEST_HANG_AT", &h.hang);
  at_rank("FT_TEST_CPU_MEMORY_AFTER_PLAN", &h.memory_after_plan);
  return h;
}

int64_t first_nonfinite(const void* host, DType dtype, int64_t n) {
  if (dtype == DType::f32) {
    const float* p = static_cast<const float*>(host);
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i])) return i;
    return -1;
  }
  if (dtype == DType::bf16 || dtype == DType::f16) {
    // All exponent bits set: inf or NaN.
    const uint16_t mask = dtype == DType::bf16 ? 0x7f80 : 0x7c00;
    const uint16_t* p = static_cast<const uint16_t*>(host);
    for (int64_t i = 0; i < n; ++i)
      if ((p[i] & mask) == mask) return i;
  }
  return -1;
}

int64_t first_nonfinite_on_device(Backend& be, Tensor t, std::vector<char>& scratch, size_t chunk_bytes) {
  const size_t esz = dtype_size(t.dtype);
  const int64_t n = t.numel();
  if (n == 0) return -1;
  const int64_t chunk = static_cast<int64_t>(std::max<size_t>(1, chunk_bytes / esz));
  scratch.resize(static_cast<size_t>(std::min(chunk, n)) * esz);
  be.synchronize();
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t len = std::min(chunk, n - start);
    be.copy_to_host(scratch.data(), static_cast<const char*>(t.data) + static_cast<size_t>(start) * esz,
                    static_cast<size_t>(len) * esz);
    const int64_t i = first_nonfinite(scratch.data(), t.dtype, len);
    if (i >= 0) return start + i;
  }
  return -1;
}

std::string param_name_at(const ParamTable& table, int64_t index) {
  for (const ParamEntry& e : table.entries()) {
    if (index < e.offset || index >= e.offset + e.count) continue;
    if (e.per_layer && !e.shape.empty() && e.shape[0] > 0) {
      const int64_t layer = (index - e.offset) / (e.count / e.shape[0]);
      return e.name + " (layer " + std::to_string(layer) + ")";
    }
    return e.name;
  }
  return "element " + std::to_string(index);
}

void poison_gradient(Backend& be, Tensor grads, int64_t index) {
  FT_CHECK(index >= 0 && index < grads.numel(), "FT_TEST_NAN_INDEX ", index, " outside the ", grads.numel(),
           " gradients");
  const size_t esz = dtype_size(grads.dtype);
  const float nan32 = std::nanf("");
  const uint16_t nan16 = grads.dtype == DType::f16 ? uint16_t{0x7e00} : uint16_t{0x7fc0};
  be.synchronize();
  be.copy_to_device(static_cast<char*>(grads.data) + static_cast<size_t>(index) * esz,
                    grads.dtype == DType::f32 ? static_cast<const void*>(&nan32) : static_cast<const void*>(&nan16),
                    esz);
}

StepGuard::StepGuard(int64_t max_bad_steps, StepTestHooks hooks) : max_bad_(max_bad_steps), hooks_(hooks) {
  FT_USER_CHECK(max_bad_steps >= 1, "--max-bad-steps must be >= 1, got ", max_bad_steps);
}

void StepGuard::after_first_micro_batch(ModelRuntime& rt, int64_t step) const {
  if (!hooks_.poison_at(step)) return;
  const int64_t index = hooks_.nan_index >= 0 ? hooks_.nan_index : rt.grads().numel() / 2;
  poison_gradient(rt.backend(), rt.grads(), index);
}

StepVerdict StepGuard::judge(int64_t step, double loss, double scaled_sum_squares, DynamicLossScaler* scaler,
                             const TrainState& before, bool no_units) {
  StepVerdict v;
  if (no_units) {
    v.apply = false;
    v.no_units = true;
    v.reason = "no loss unit in the global batch (each row's response was cut by prepare's --seq-len)";
    return v;
  }
  if (!std::isfinite(loss)) {
    // The scaler is not consulted: a loss that overflowed in the forward pass is no
    // loss-scale problem (and it never saw such a step before, when they stopped the run).
    v.bad = true;
    v.reason = "non-finite loss (" + describe(loss) + ")";
  } else if (scaler) {
    const double scale_before = scaler->scale();
    if (!scaler->update(scaled_sum_squares)) {
      v.scaler_skip = true;
      if (scaler->scale() >= scale_before) {
        v.bad = true;
        v.reason = "non-finite gradient norm (" + describe(scaled_sum_squares) + ") at the minimum fp16 loss scale " +
                   std::to_string(scaler->scale());
      }
    }
  } else if (!std::isfinite(scaled_sum_squares)) {
    v.bad = true;
    v.reason = "non-finite gradient norm (" + describe(scaled_sum_squares) + ")";
  }
  if (!v.bad && !v.scaler_skip && hooks_.skip_at(step)) {
    v.bad = true;
    v.reason = "update skipped by FT_TEST_SKIP_UPDATE_AT_STEP (test hook)";
  }
  v.apply = !v.bad && !v.scaler_skip;
  if (v.bad) {
    if (streak_ == 0) {
      pre_streak_ = before;
      first_bad_ = step;
    }
    ++streak_;
  } else if (v.apply) {
    streak_ = 0;
  }
  return v;
}

nlohmann::json StepGuard::report_bad(ModelRuntime& rt, int64_t step, double loss, double grad_norm, double lr,
                                     const StepVerdict& v) {
  std::string where;
  if (!std::isfinite(grad_norm)) {
    const int64_t i = first_nonfinite_on_device(rt.backend(), rt.grads(), scratch_);
    where = i >= 0 ? param_name_at(rt.model().param_table(), i) + ", flat element " + std::to_string(i)
                   : "none found by the host scan";
  }
  std::printf("step %6lld: %s%s%s; update skipped, weights and optimizer state unchanged (%lld bad step%s in a row, "
              "--max-bad-steps %lld)\n",
              static_cast<long long>(step), v.reason.c_str(), where.empty() ? "" : ", first non-finite gradient in ",
              where.c_str(), static_cast<long long>(streak_), streak_ == 1 ? "" : "s",
              static_cast<long long>(max_bad_));
  std::fflush(stdout);
  nlohmann::json row = {{"step", step},         {"skipped_update", true}, {"reason", v.reason},
                        {"loss", finite_or_null(loss)}, {"grad_norm", finite_or_null(grad_norm)},
                        {"lr", lr},             {"bad_streak", streak_}};
  if (!where.empty()) row["first_nonfinite_grad"] = where;
  return row;
}

nlohmann::json StepGuard::report_no_units(int64_t step, double lr) const {
  std::printf("step %6lld: update skipped: %s\n", static_cast<long long>(step),
              "no loss unit in the global batch (each row's response was cut by prepare's --seq-len)");
  std::fflush(stdout);
  return {{"step", step}, {"skipped_update", true}, {"reason", "no loss unit in the global batch"}, {"lr", lr}};
}

const TrainState* StepGuard::state_to_save(const TrainState& current, const std::string& ckdir,
                                           bool have_start_checkpoint) const {
  if (!in_streak()) return &current;
  if (pre_streak_.step == 0 && !have_start_checkpoint) {
    std::printf("checkpoint not written: in a streak of %lld bad steps since step %lld, and no step was applied "
                "before it\n",
                static_cast<long long>(streak_), static_cast<long long>(first_bad_));
    return nullptr;
  }
  const std::string path = checkpoint_path(ckdir, pre_streak_.step);
  if (std::filesystem::exists(path)) {
    std::printf("checkpoint not written: in a streak of %lld bad steps since step %lld; the newest checkpoint is %s, "
                "the state before it\n",
                static_cast<long long>(streak_), static_cast<long long>(first_bad_), path.c_str());
    return nullptr;
  }
  std::printf("checkpoint of step %lld's state: in a streak of %lld bad steps since step %lld no update was applied, "
              "so the weights are those after step %lld\n",
              static_cast<long long>(pre_streak_.step), static_cast<long long>(streak_),
              static_cast<long long>(first_bad_), static_cast<long long>(pre_streak_.step));
  return &pre_streak_;
}

std::string StepGuard::stop_message(int64_t step, const std::string& ckdir) const {
  std::vector<CheckpointFile> cks = list_checkpoints(ckdir);
  std::string newest = "there is no checkpoint";
  if (!cks.empty()) newest = "the newest checkpoint is " + cks.back().path + " (step " + std::to_string(cks.back().step) + ")";
  return detail::concat("training stopped at step ", step, ": ", streak_,
                        " steps in a row had a non-finite loss or gradient norm (steps ", first_bad_, "..", step,
                        ", --max-bad-steps ", max_bad_, "); no update of them was applied and ", newest,
                        ", from before step ", first_bad_,
                        ". Resume with --resume auto and a lower --lr (or raise --max-bad-steps)");
}

}  // namespace ft
