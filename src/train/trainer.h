// The training loop and the evaluation commands built on a Session.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "data/sentencepiece_tokenizer.h"
#include "train/config.h"
#include "train/report.h"

namespace ft {

namespace testing {
// Test hook: called before each training step with its number (1-based); may throw, e.g. an
// OutOfMemoryError to simulate an allocation failure mid-run.
extern std::function<void(int64_t)> before_train_step;
// Test hook: called by run_train between a plan that ran out of memory and the next, with
// the results folder.
extern std::function<void(const std::string&)> between_replans;
// Test hook: called once the run is set up (plan, data, weights), just before it looks for a
// signal that arrived during the start.
extern std::function<void()> start_done;
}  // namespace testing

// `fittrain train`: returns the process exit status (0, or 130 after a signal stopped it
// cleanly with a checkpoint; on one rank a signal during the start stops it before step 1,
// with nothing new to save).
// An allocation failure mid-run (ft::OutOfMemoryError from any op) saves the last completed
// step, re-plans below the plan that ran out (same global batch) and continues, up to 3 times.
// With several ranks a failure inside a step's forward/backward or an evaluation on any rank
// re-plans every rank together (a step's update is skipped everywhere); one elsewhere (the
// update, a checkpoint: neither allocates) stops the job saying what to do.
int run_train(const RunConfig& rc);
// `fittrain test`: loss and perplexity of a checkpoint on data.
int run_test(const RunConfig& rc);
// `fittrain sample`: text generated from a checkpoint.
int run_sample(const RunConfig& rc);
// `fittrain plan`: the memory plan, without training.
int run_plan(const RunConfig& rc);
// `fittrain prepare`: text files to token shards (rc.tokenizer: which tokenizer).
int run_prepare(const RunConfig& rc);
// `fittrain tokenizer train`: a SentencePiece model from text files.
int run_tokenizer_train(const SentencePieceTrainOptions& opt);
// `fittrain report RUN_DIR`: report.html and PNG charts of a run (train/report.h).
int run_report(const ReportOptions& opt);

}  // namespace ft
