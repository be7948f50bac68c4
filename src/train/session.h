// Session: what every command shares before its first step — the model (registry preset,
// flags, or a checkpoint's configuration), the backend, the communicator, the budget, the
// fitted memory plan and then the runtime (arena, model and optimizer bound to it).
// `fittrain plan` stops after fit(); train/test/sample go on to allocate().
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "models/model.h"
#include "plan/fit.h"
#include "train/config.h"
#include "train/runtime.h"

namespace ft {

// The model configuration of a run: the preset's, with the explicit flags (--n-layer, ...)
// laid over it. UserError naming the flag for a bad value.
nlohmann::json resolve_model_config(const RunConfig& rc);

struct Budget {
  size_t device_bytes = 0;   // what the whole process may hold on the device (arena + runtime)
  size_t runtime_bytes = 0;  // held outside the arena: CUDA context, library handles, lazily
                             // loaded kernels (measured at start; 0 on the CPU), NCCL's buffers
  size_t comm_estimate_bytes = 0;  // part of runtime_bytes: NCCL's buffers estimated, not measured
                                   // (`plan --ranks N` in one process; nccl_device_bytes_estimate)
  size_t host_bytes = 0;     // what the process may hold in host memory: its runtime and host buffers
                             // (on the CPU the arena takes its budget from the same memory)
  size_t host_runtime_bytes = 0;  // the process's resident set when planning (libraries, CUDA's and
                                  // NCCL's host side): the host plan's runtime
  size_t host_comm_estimate_bytes = 0;  // NCCL's host side estimated (`plan --ranks N` in one
                                        // process; nccl_host_bytes_estimate)
  int local_ranks = 1;       // ranks started on this machine: each plans for its share of its
                             // host memory (and on the CPU of the arena's memory)
  std::string source;        // how device_bytes was set, for messages
  std::string host_source;
  size_t device_free = 0, device_total = 0;
  size_t arena_bytes() const { return device_bytes > runtime_bytes ? device_bytes - runtime_bytes : 0; }
  size_t measured_runtime_bytes() const { return runtime_bytes - comm_estimate_bytes; }
};

class Session {
 public:
  // training: plan grads/optimizer and the training step; otherwise evaluation only.
  // model_config: use this configuration (e.g. a checkpoint's) instead of preset + flags.
  Session(const RunConfig& rc, bool training, const nlohmann::json* model_config = nullptr);

  const RunConfig& run() const { return rc_; }
  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  Backend& backend() { return *backend_; }
  Communicator& comm() { return *comm_; }
  // Rank 0 prints and writes the results folder. Any other rank: its stdout goes to /dev/null,
  // and the config returned (rc, on rank 0) only reads the folder (RunConfig::results_read_only).
  RunConfig quiet_unless_rank0(const RunConfig& rc);
  const RankPlacement& placement() const { return placement_; }
  DeviceKind device() const { return backend_->device(); }
  Precision precision() const { return precision_; }
  const Budget& budget() const { return budget_; }

  // Fit batch and memory (pure planning; nothing allocated yet).
  const FitResult& fit();
  const HostPlan& host() const { return host_plan_; }
  // The device bytes the whole process is planned to hold: the arena plus the runtime.
  size_t planned_process_bytes() const { return fit_->plan.total_bytes + budget_.runtime_bytes; }
  // Allocate the arena (exactly the plan) and bind the model.
  void allocate();
  ModelRuntime& runtime() { return *runtime_; }
  Arena& arena() { return runtime_->arena(); }
  // Bytes the device reported in use by the arena (cudaMemGetInfo before/after on CUDA,
  // the arena size on the CPU).
  size_t measured_arena_bytes() const { return measured_arena_bytes_; }

  // Every rank's memory so far, for rank 0's log line (a collective: one reduction).
  struct RankMemory {
    std::vector<double> arena_peaks;   // each rank's arena high-water mark (the plan is the same on all)
    std::vector<double> host_planned;  // each rank's host plan (its runtime part measured by each)
    std::vector<double> host_peaks;    // each rank's peak resident set (VmHWM)
    size_t arena_peak = 0;             // the largest of arena_peaks
  };
  RankMemory memory_over_ranks();

  // Multi-line human-readable plan (the `fittrain plan` table) and its JSON form.
  std::string plan_table() const;
  std::string plan_json() const;
  size_t marginal_sample_bytes() const;

  // With several ranks, a collective every rank calls at the same point: `mine` against rank
  // 0's through `apart(mine, rank0)`, "" when they agree, else what differs as a phrase after
  // "this rank (R of N) ". A rank that differs exits with UserError "this rank (R of N)
  // <apart>: <why>"; the others wait to be ended with it, so its message is not cut off.
  // Nothing with one rank.
  void agree_with_rank0(const std::string& mine,
                        const std::function<std::string(const std::string& here, const std::string& rank0)>& apart,
                        const std::string& why);

 private:
  // With several ranks: UserError on a rank given other flags than rank 0 (RunConfig::settings).
  void agree_on_settings();
  // With several ranks: every rank takes the smallest evaluation batch of any (re-planned).
  void agree_on_eval_batch(const PlanFunction& fn, size_t budget);
  // `fit_here` (a fit of the user's flags for this rank's budget) on every rank. With several
  // ranks, a refusal on any of them ends every rank, and what it names is what every rank
  // takes (FitRefused): the refused ranks say so; the others wait to be ended with them.
  FitResult fit_on_every_rank(const std::function<FitResult()>& fit_here);
  // A rank that passed a check some other rank failed: waits in a collective the failed ranks
  // never join, so that they print why before the launcher ends the job.
  [[noreturn]] void wait_to_be_ended_with_refused_ranks();
  // The host bytes reading --init-from's folder holds at once (0 without --init-from).
  size_t init_from_bytes() const;
  // The arena's budget from the device's free memory: less the margin, and on the CPU (host
  // memory) this rank's share of it (Budget::local_ranks).
  size_t free_memory_budget(size_t free_bytes, size_t total_bytes) const;
  RunConfig rc_;
  bool training_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
  RankPlacement placement_;
  std::unique_ptr<Communicator> comm_;
  Precision precision_ = Precision::fp32;
  Budget budget_;
  std::optional<FitResult> fit_;
  HostPlan host_plan_;
  std::unique_ptr<ModelRuntime> runtime_;
  size_t measured_arena_bytes_ = 0;
};

int64_t parse_auto_int(const std::string& text, const std::string& flag);  // "auto" -> 0

}  // namespace ft
