// Task: what is being learned, separate from the model that learns it. A task
//  - opens its data (train and validation SampleSources) and says what a sample is (its
//    fields must include every field the model consumes: checked at start);
//  - counts loss units (tokens with a target, response tokens, images, triplets) so the mean
//    loss is normalised over the whole global batch of every rank: the trainer sums the
//    count over ranks and weights each unit by 1 / that sum;
//  - turns an evaluation's mean loss into the metrics it reports (perplexity, BLEU-4, ...);
//  - says what `fittrain sample` does for it.
// The trainer, evaluation, checkpoints (which record the task's name) and metrics are
// generic over tasks. Adding a task: docs/ADDING_A_MODEL.md.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/sample_source.h"
#include "data/tokenizer.h"
#include "models/model.h"
#include "train/config.h"

namespace ft {

class ModelRuntime;
class Communicator;

// This process's part of an evaluation. The ranks of a run split every evaluation: item i (a
// batch of the loss, an image to reconstruct, a prompt to answer, a chunk of users to rank)
// is rank i % world's, and each rank's sums over its part are then added over the ranks
// (sum()), so that every rank holds the whole split's metrics, one process's up to the order
// of the additions, in 1/world of the time. Every rank must call sum() and max() alike.
//
// A rank that runs out of memory in its part must still make those calls, or the others wait
// in them for ever: its part runs inside part(), which keeps the failure instead of throwing
// it (alone, it throws), and the next sum() tells every rank, each of which then throws
// RanksOutOfMemoryError (the trainer saves and re-plans them all together).
struct EvalShard {
  int rank = 0, world = 1;
  Communicator* comm = nullptr;  // null: this process alone
  mutable std::string failed;    // this rank's allocation failure inside part() ("" none)
  bool mine(uint64_t i) const { return world <= 1 || i % static_cast<uint64_t>(world) == static_cast<uint64_t>(rank); }
  template <class Fn>
  void part(Fn&& fn) const {
    try {
      fn();
    } catch (const OutOfMemoryError& e) {
      if (!comm || world <= 1) throw;
      failed = e.what();
      say_failed();
    }
  }
  void sum(std::span<double> values) const;  // in place, over the ranks
  double max(double value) const;            // over the ranks (to a microsecond: for timings)
  void say_failed() const;                   // "rank R: ..." on stderr (its stdout is silenced)
};

// Every rank of the run learned (in EvalShard::sum) that one of them ran out of memory in an
// evaluation: safe to save and re-plan together, as no rank waits in a collective.
struct RanksOutOfMemoryError : OutOfMemoryError {
  using OutOfMemoryError::OutOfMemoryError;
};

namespace testing {
// Test hook: the next evaluation's first loss batch on this rank fails to allocate (then clears).
extern bool fail_next_eval_batch;
}  // namespace testing
// The shard of the ranks rt runs with (one part of one when it runs alone).
EvalShard eval_shard(ModelRuntime& rt);

struct Metric {
  std::string name;  // e.g. "val_perplexity"
  double value = 0;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;  // recorded in checkpoints, e.g. "lm"
  virtual std::string describe_data() const = 0;
  virtual const SampleSource& train_data() const = 0;
  virtual const SampleSource* val_data() const = 0;  // null: no validation data
  // Loss units in these samples of `src` (the mean loss's denominator).
  virtual double loss_units(const SampleSource& src, std::span<const uint64_t> samples) const = 0;
  // Metrics of an evaluation with this mean loss per unit (the loss itself is reported by
  // the caller). Names are prefixed by the caller ("val_", "test_").
  virtual std::vector<Metric> metrics(double mean_loss) const = 0;
  // Metrics that need the model itself, after an evaluation's loss on `data` (the chat task
  // generates responses and scores their BLEU-4). Names are prefixed by the caller.
  virtual std::vector<Metric> model_metrics(ModelRuntime& /*rt*/, const SampleSource& /*data*/) const { return {}; }
  // One-time facts about the data printed before training (e.g. the unigram entropy).
  virtual std::string data_summary() const { return ""; }
  // The loss unit in the progress lines: plural name and rate abbreviation ("tokens", "tok":
  // 1,200 tok/s); a recommender counts positions, a diffusion model images.
  virtual const char* unit_name() const { return "tokens"; }
  virtual const char* unit_abbrev() const { return "tok"; }
  // What `fittrain test` evaluates (its val_data() when not training), for its report line:
  // every task says, as a run without a validation split evaluates the data itself.
  virtual std::string test_split() const = 0;
  // `fittrain sample`: what the task generates from a trained model (UserError if none).
  virtual int sample(ModelRuntime& rt, const RunConfig& rc) const = 0;
  // The tokenizer the data records (prepared with --tokenizer), saved in checkpoints so
  // that `sample` decodes with it; nullopt: none recorded (bytes, or not token data).
  virtual std::optional<TokenizerRecord> tokenizer() const { return std::nullopt; }
};

// The task named by --task for this model. UserError naming --task (unknown task) or the
// model (fields it needs that the task's data lacks). need_train: open the train split
// (training); else the evaluation data (test: validation split, or the data itself).
// test_split() of token data: the validation files (--val-data-path's, or the *val* files of
// --data-path), else the data itself.
inline std::string token_test_split(bool has_val, bool val_flag) {
  return !has_val ? "data (it has no validation split)" : val_flag ? "validation data (--val-data-path)" : "validation split";
}

std::unique_ptr<Task> make_task(const RunConfig& rc, const Model& model, bool need_train);

// Checks that `src` carries every field the model consumes, with the same type and size.
void check_fields(const SampleSource& src, const Model& model, const std::string& what);

// The mean loss per unit over the first max_samples samples of `data` (0: all), cut into
// batches of eval_batch split over the ranks (EvalShard). The samples depend on the flags
// alone (eval_samples), not on the memory or the number of ranks, which set eval_batch.
double evaluate(ModelRuntime& rt, const Task& task, const SampleSource& data, int64_t eval_batch,
                uint64_t max_samples);
// What an evaluation covers: --eval-batches batches of --global-batch-size samples (0: all).
uint64_t eval_samples(const RunConfig& rc);
// UserError naming `what` (the data's flag) when the first max_samples samples of `data` (0:
// all) hold no loss unit (chat rows whose response prepare's --seq-len cut): evaluated, their
// mean loss is undefined (an evaluation would report 0); trained on (training: the message
// says so), every update would be skipped. Checked before training or testing starts; stops
// at the first chunk of samples that holds one.
void check_loss_units(const Task& task, const SampleSource& data, uint64_t max_samples, const std::string& what,
                      bool training);

// What the ranks of a run compare of its data (data/data_identity.h), each part labelled by its
// flag and path: training, the training data and then the validation data when the task has
// any; else (`test`) the data the task evaluates. Compared with data_apart, refused with
// same_data_reason(training).
std::string data_identity_of(const Task& task, const RunConfig& rc, bool training);
std::string same_data_reason(bool training);
// "" when two data_identity_of texts agree, else "reads other data than rank 0: <what differs>"
// (first_data_difference).
std::string data_apart(const std::string& here, const std::string& rank0);
inline constexpr const char* kSameDataReason =
    "every rank must read the same data (over several machines, the same files at that path on each): the "
    "ranks draw every global batch from one order of its samples, and a rank reading another copy trains on "
    "other samples, or repeats some and skips others";

}  // namespace ft
