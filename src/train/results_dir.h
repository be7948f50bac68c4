// A results folder belongs to one training run.
//
// `fittrain train` owns its --results-dir for the life of the process, before anything in
// it is touched (stale .tmp files, the built-in corpus, checkpoints):
//  - the folder is checked first: created when missing, refused (UserError naming
//    --results-dir and the path) when it is not a directory or a probe file cannot be
//    written and removed in it;
//  - an exclusive flock on <results-dir>/.lock, holding the owner's pid, refuses a second
//    process naming that pid and the folder. The kernel drops it when the process ends,
//    however it ends, so a crashed run never leaves the folder locked;
//  - the run identity, <results-dir>/run.json ({"run_id": 32 hex digits}), is written
//    atomically just before a run new to the folder saves its first checkpoint there, and
//    every checkpoint's metadata carries the id (`run_id`). (Not earlier: a run that stops
//    before saving anything, e.g. on bad input, leaves no progress to protect, and must not
//    make the next `--resume none` in the default folder fail.) A fresh run (`--resume none`) into a folder that holds any checkpoint
//    file (valid or not) or a run identity is refused; `--resume auto` adopts the folder's
//    run; pruning deletes only checkpoints of this run (checkpoint_dir.h).
//  - `--resume auto` over checkpoints of which none is valid is refused, listing each file
//    and why, and nothing in the folder is written (their parameters may be recoverable).
//
// The folder's run is the id in run.json; without run.json (folders written by versions
// before run identities), the id in the metadata of the newest checkpoint that has one;
// without either, the folder's checkpoints are all its run's, and resuming gives that run
// a new id. Checkpoints without an id (older versions) count as the folder's run.
//
// `test` and `sample` only read the folder and take no lock.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/folder_lock.h"
#include "train/config.h"

namespace ft {

struct TrainState;

// Created when missing; UserError naming --results-dir and the path when it is not a
// directory, cannot be created, or a probe file cannot be written and removed in it (or in
// its checkpoints/ folder, when that exists).
void check_results_dir(const std::string& results_dir);

// An exclusive advisory lock (flock) on <results_dir>/.lock, held until destroyed or the
// process ends. The holder's pid is written into the file.
class ResultsDirLock : public FolderLock {
 public:
  // UserError naming the folder and the holder's pid when another open file description
  // (another process, or another lock in this one) holds it.
  explicit ResultsDirLock(const std::string& results_dir)
      : FolderLock(results_dir, ".lock", "--results-dir", "fittrain train") {}
};

// What the process holding <results_dir>/.lock wrote there (core/folder_lock.h: its pid, its
// machine and 64 random bits; "" when the file is not there or holds nothing): what the ranks
// of a run compare to know they see one folder.
std::string results_dir_holder(const std::string& results_dir);
// For messages: "the lock of pid 12 on host-a", or "no lock file".
std::string describe_holder(const std::string& holder);

// <results_dir>/run.json
std::string run_identity_path(const std::string& results_dir);
// The id in run.json; nullopt when there is none; UserError naming the file when damaged.
std::optional<std::string> read_run_id(const std::string& results_dir);
// Writes run.json atomically (tmp, fsync, rename, fsync the folder).
void write_run_id(const std::string& results_dir, const std::string& run_id);
// Before each checkpoint save: writes run.json when missing; InternalError when it names
// another run (the folder changed under a run holding its lock).
void ensure_run_identity(const std::string& results_dir, const std::string& run_id);
// 128 random bits as 32 hex digits.
std::string new_run_id();
// The folder's run (see above), or nullopt when neither run.json nor any checkpoint names one.
std::optional<std::string> folder_run_id(const std::string& results_dir);

struct ResumeDecision {
  std::string checkpoint;  // what to load; "" starts at step 0
  std::string run_id;      // this run's id, recorded in run.json and each checkpoint
};

// What `train --resume <resume>` does with the folder. Reads only (checkpoints are verified).
// UserError (exit 2) when a fresh run would mix with what the folder holds, when auto finds
// checkpoints but none of this folder's run is valid (listing each and why), and when an
// explicit checkpoint belongs to another run than the folder's. Warnings about skipped
// checkpoints go to *warnings.
ResumeDecision decide_resume(const std::string& resume, const std::string& results_dir,
                             std::vector<std::string>* warnings = nullptr);

// What `train` does first: check_results_dir, take the lock, decide_resume (warnings printed).
// The lock lives in *lock, which the caller keeps across re-plans: a run that re-plans after
// running out of memory holds the folder from its first plan to its end (a second `train
// --resume auto` started in between would otherwise take it). An already held lock is kept.
class ResultsDir {
 public:
  ResultsDir(const RunConfig& rc, std::optional<ResultsDirLock>& lock);
  // "" for a run starting at step 0.
  const std::string& resume_from() const { return decision_.checkpoint; }
  const std::string& run_id() const { return decision_.run_id; }
  // Called when training starts (after the model is loaded or initialised): records the run
  // id in st, hence in every checkpoint (and run.json, by ensure_run_identity at each save).
  void start(TrainState& st) const;

 private:
  std::string results_dir_;
  ResumeDecision decision_;
};

}  // namespace ft
