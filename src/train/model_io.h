// Model state <-> checkpoint files. A checkpoint holds the parameters (in their training
// dtype), fp32 master weights when mixed precision has them, Adam m and v and the fp32 EMA of
// the weights when the run keeps one (section "ema"; all unsharded, so a run can resume on a
// different number of devices), and JSON metadata: model family and
// configuration, task, step, data cursor, seed, batch settings, the last validation
// loss (for keep-best-K), the run id (train/results_dir.h) and the data's tokenizer. Format "fittrain" (checkpoints of format "fittrain-gpt2", written
// before models were generic, are read as family gpt2 and task lm).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "data/sampler.h"
#include "data/tokenizer.h"
#include "train/session.h"

namespace ft {

class CheckpointReader;

class Progress;  // train/progress.h

struct TrainState {
  int64_t step = 0;         // optimizer steps completed
  DataCursor cursor;        // where the sampler continues
  uint64_t tokens_seen = 0;
  double val_loss = -1;     // last evaluation (< 0: none yet)
  int64_t val_loss_step = -1;  // the step it measured: a checkpoint of another step records none
  double loss_scale = 0;    // fp16 dynamic loss scale (0: not fp16)
  int64_t scale_clean_steps = 0, scale_skipped_steps = 0;
  int64_t global_batch_size = 0;  // of the run that saved it (0: unknown)
  std::optional<uint64_t> global_seed;  // of the run that saved it (nullopt: unknown)
  // Updates skipped for a non-finite loss or gradient norm (train/step_guard.h) that the
  // fp16 loss scaler did not count: AdamW's step t counts applied updates only.
  int64_t skipped_updates = 0;
  std::string run_id;             // the run it belongs to (train/results_dir.h; "": written before run ids)
  // The tokenizer the training data recorded (data/tokenizer.h); nullopt: the byte tokenizer.
  // Saved as meta "tokenizer": {kind, identity, vocab_size, model_type, path}.
  std::optional<TokenizerRecord> tokenizer;
  // The EMA of the weights (optim/ema.h): its settings, saved as meta "ema" for people
  // (the buffer itself is section "ema"), and whether a resume found the section.
  nlohmann::json ema_settings;
  bool ema_loaded = false;
  // The training data: --data-path made absolute ("" for the built-in corpus) and its sample
  // count (0: unknown, older checkpoints). Saved as meta "data": `test` evaluates that data
  // when given none, and a resume on other data says so.
  std::string data_path;
  uint64_t train_samples = 0;
};

// --data-path with every comma-separated part made absolute ("" stays "").
std::string absolute_data_path(const std::string& data_path);
// The training data a checkpoint records (absolute --data-path, "" for the built-in corpus),
// or nullopt when it records none (older checkpoints, Hugging Face folders).
std::optional<std::string> checkpoint_data_path(const std::string& path);

// Throws UserError naming the file when the checkpoint's model (family and configuration)
// differs from `model`'s.
void check_model_config(const nlohmann::json& meta, const Model& model, const std::string& path);
// The model configuration a checkpoint was saved with (for test/sample, which need no model
// flags). UserError naming the file when it has none.
// The task a checkpoint was trained for ("lm" for checkpoints older than tasks): `test` and
// `sample` evaluate and generate for that task.
std::string checkpoint_task(const std::string& path);
nlohmann::json checkpoint_model_config(const std::string& path);

// The tokenizer a checkpoint records (nullopt: none, i.e. the byte tokenizer). UserError
// naming the file when the record is malformed.
std::optional<TokenizerRecord> checkpoint_tokenizer(const std::string& path);

// Writes atomically (see train/checkpoint.h). Optimizer state included when training.
void save_checkpoint(Session& s, const std::string& path, const TrainState& st, bool with_optimizer);
// Training's save: `st` (when not null) to the run's checkpoint folder, then the old ones
// pruned (--keep-checkpoints / --keep-best), and a line through `progress` (or stdout). Every
// rank calls it at the same points (a collective: ZeRO-1's state is gathered from all ranks);
// rank 0 decides and writes.
void save_and_prune(Session& s, const RunConfig& rc, const TrainState* st, Progress* progress = nullptr);
// Loads parameters (and optimizer state when with_optimizer); returns the saved state.
TrainState load_checkpoint(Session& s, const std::string& path, bool with_optimizer);
// With several ranks, a collective: every rank's open checkpoint against rank 0's (metadata
// and section CRCs, not the path); UserError on a rank that opened another one, naming both.
// load_checkpoint calls it; `test` also before it builds anything from the file.
void agree_on_checkpoint(Session& s, const CheckpointReader& r);
// A Hugging Face folder's GPT-2 weights (--init-from) into the session's parameters, a tensor
// at a time (hf_interchange.h); the optimizer state is left as it is.
void load_hf_weights(Session& s, const std::string& dir);
// Evaluation sessions (test, sample): loads the checkpoint's EMA weights (section "ema") into
// the parameters and returns true; false (nothing changed) when it has none.
bool load_ema_weights(Session& s, const std::string& path);
// "auto": newest valid checkpoint in results_dir/checkpoints (warnings printed); else a path.
// Returns "" when auto finds none.
std::string find_checkpoint(const std::string& spec, const std::string& results_dir, bool required);

}  // namespace ft
