// Session: what every command shares before its first step — the model configuration from
// preset and flags, the backend, the budget, the fitted memory plan, the arena and the model.
// `fittrain plan` stops after fit(); train/test/sample go on to allocate().
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "core/arena.h"
#include "models/gpt2.h"
#include "plan/fit.h"
#include "train/config.h"

namespace ft {

// Preset + explicit flags. vocab_hint: the data's vocabulary when the preset leaves it open.
GPT2Config resolve_model_config(const RunConfig& rc);

struct Budget {
  size_t device_bytes = 0;  // what the arena may take
  size_t host_bytes = 0;    // what host buffers may take (on the CPU: shared with the arena)
  std::string source;       // how device_bytes was set, for messages
  std::string host_source;
  size_t device_free = 0, device_total = 0;
};

class Session {
 public:
  // training: plan grads/optimizer and the training step; otherwise evaluation only.
  Session(const RunConfig& rc, bool training);

  const RunConfig& run() const { return rc_; }
  const GPT2Config& model_config() const { return model_cfg_; }
  Backend& backend() { return *backend_; }
  DeviceKind device() const { return backend_->device(); }
  Precision precision() const { return precision_; }
  const Budget& budget() const { return budget_; }

  // Fit batch and memory (pure planning; nothing allocated yet).
  const FitResult& fit();
  const HostPlan& host() const { return host_plan_; }
  // Allocate the arena (exactly the plan) and bind the model.
  void allocate();
  Arena& arena() { return *arena_; }
  GPT2& model() { return *model_; }
  // Bytes the device reported in use by the arena (cudaMemGetInfo before/after on CUDA,
  // the arena size on the CPU).
  size_t measured_arena_bytes() const { return measured_arena_bytes_; }

  // Multi-line human-readable plan (the `fittrain plan` table) and its JSON form.
  std::string plan_table() const;
  std::string plan_json() const;
  size_t marginal_sample_bytes() const;

 private:
  RunConfig rc_;
  bool training_;
  GPT2Config model_cfg_;
  std::unique_ptr<Backend> backend_;
  Precision precision_ = Precision::fp32;
  Budget budget_;
  std::optional<FitResult> fit_;
  HostPlan host_plan_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<GPT2> model_;
  size_t measured_arena_bytes_ = 0;
};

int64_t parse_auto_int(const std::string& text, const std::string& flag);  // "auto" -> 0

}  // namespace ft
