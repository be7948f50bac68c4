// The checkpoint directory of a run: <results-dir>/checkpoints/ckpt_step_%08d.ftc.
//
// Resuming picks the newest checkpoint that fully verifies, so a crash while writing (a
// stale .tmp) or a damaged newest file costs the steps since the previous checkpoint, never
// the run. Pruning keeps the last K (or the best K by a metric in the metadata) and never
// deletes the newest. These functions assume one writer per directory (rank 0), and
// clean_stale_tmp is meant for startup, before that writer runs: `train` holds the results
// folder's lock (train/results_dir.h) before it calls any of them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft {

struct CheckpointFile {
  int64_t step = 0;
  std::string path;
};

// <results_dir>/checkpoints
std::string checkpoint_dir(const std::string& results_dir);
// <dir>/ckpt_step_%08d.ftc (more digits past step 99999999; the step is parsed, not sorted
// as text).
std::string checkpoint_path(const std::string& dir, int64_t step);

// Regular files named ckpt_step_<digits>.ftc, sorted by step ascending. A missing directory
// gives an empty list.
std::vector<CheckpointFile> list_checkpoints(const std::string& dir);

// The newest checkpoint that opens and passes verify_all(), or nullopt. Each skipped file
// adds one line to *warnings (when given) saying why, for the caller to print.
std::optional<CheckpointFile> latest_valid_checkpoint(const std::string& dir,
                                                      std::vector<std::string>* warnings = nullptr);

// Pruning deletes only checkpoints of one run: those whose metadata has "run_id" equal to
// run_id, and those with no run id (written before run identities: they count as the
// folder's run, see train/results_dir.h). Another run's checkpoints, and files whose
// metadata cannot be read (whose run is unknown and whose parameters may be recoverable),
// are never deleted, nor counted; each unreadable one adds a line to *warnings. With
// written_step >= 0 (the checkpoint just written), checkpoints of later steps are neither
// counted nor deleted: a later part of the run it did not continue from (a damaged file
// --resume auto skipped, or one left by a resume from an earlier file); the one just written
// is then always the newest, and so always kept.

// The run's checkpoints as pruning counts them (above), ascending by step, each with its
// metadata; an unreadable one adds a line to *warnings.
struct RunCheckpoint {
  CheckpointFile file;
  nlohmann::json meta;
};
std::vector<RunCheckpoint> run_checkpoints(const std::string& dir, const std::string& run_id,
                                           std::vector<std::string>* warnings = nullptr, int64_t written_step = -1);

// Deletes the oldest of this run's checkpoints beyond its newest keep_last_k; keep_last_k <= 0
// keeps all. Returns the deleted paths.
std::vector<std::string> prune_checkpoints(const std::string& dir, int keep_last_k,
                                           std::vector<std::string>* warnings = nullptr,
                                           const std::string& run_id = {}, int64_t written_step = -1);

// Keeps the keep_k checkpoints with the lowest meta[metric_name] (a JSON pointer when it
// starts with '/') plus the newest keep_last_k (at least the newest; keep_last_k <= 0: all, so
// nothing is deleted): --keep-best beside --keep-checkpoints. Deletes the rest. Ties prefer the
// newer step.
// Checkpoints whose metadata lacks the metric (saved between evaluations) rank last; one whose
// metric is not a number also adds a line to *warnings.
// Only this run's checkpoints are ranked or deleted ("newest" is this run's newest).
// keep_k <= 0 keeps all. Returns the deleted paths.
std::vector<std::string> prune_checkpoints_best(const std::string& dir, int keep_k,
                                                const std::string& metric_name,
                                                std::vector<std::string>* warnings = nullptr,
                                                const std::string& run_id = {}, int64_t written_step = -1,
                                                int keep_last_k = 1);

// Removes *.tmp files left in dir by a crash during write_checkpoint. Returns their paths.
std::vector<std::string> clean_stale_tmp(const std::string& dir);

}  // namespace ft
