// The flag checks every command shares: each numeric setting of a RunConfig in its
// meaningful range, sizes without overflow. train, plan, test and sample call it first, so a
// bad value is refused the same way whichever command it is given to, before any data is
// opened or memory allocated (exit 2, the message names the flag). Checks that need the
// model (batches whose plan would overflow, fitting) are the Session's.
#pragma once
#include <initializer_list>
#include <optional>
#include <string>

#include "optim/ema.h"
#include "train/config.h"
#include "train/model_io.h"

namespace ft {

void check_run_config(const RunConfig& rc);
// UserError when an lm run on the built-in corpus (no --data-path) has a vocabulary below its
// 257 byte tokens, naming where it came from (--vocab-size, --init-from, the preset);
// vocab_size 0: the preset's, not checked here.
void check_builtin_corpus_vocab(const RunConfig& rc, uint32_t vocab_size);

// --ema-decay resolved: -1 (auto) is 0.995 for --task diffusion (CDEIT's), 0 (off) otherwise.
double effective_ema_decay(const RunConfig& rc);
// Whether a training run keeps an EMA of the weights (planned: PlanShape::ema), and its schedule.
inline bool ema_enabled(const RunConfig& rc) { return effective_ema_decay(rc) > 0; }
EmaSchedule ema_schedule(const RunConfig& rc);

// The name of the first of `flags` given (a value other than its default), or nullptr: what
// a command or task that does not read them refuses, naming it.
struct GivenFlag {
  bool given;
  const char* name;
};
inline const char* first_given(std::initializer_list<GivenFlag> flags) {
  for (const GivenFlag& f : flags)
    if (f.given) return f.name;
  return nullptr;
}

// The first prompt/response flag given (--loss-on, --prompt-field, --response-field), or
// null: what the preparations of other data (text documents, ratings, EIT sets) refuse.
const char* first_pair_flag(const RunConfig& rc);

// UserError naming the first flag given (a value other than its default) that rc.task does
// not read: the chat task's BLEU settings, the recommender's ranking and item table, the
// diffusion task's sampling and images, the EMA's schedule without an EMA, --negatives
// beside --rec-loss ce. (They were accepted and ignored without a word.)
void check_task_flags(const RunConfig& rc);

// The first flag whose value in `here` (RunConfig::settings of a rank) differs from `rank0`
// (rank 0's), as "--lr 0.002 (rank 0: 0.001)"; "" when they agree or either is empty. The
// ranks of one run must be given the same flags: other values of the model, the batch, the
// data or the seed on some rank would train another model there, or reduce gradients of
// other shapes.
std::string first_setting_apart(const std::string& here, const std::string& rank0);

// A resumed run's checkpoint `st` (from `resume_from`) against this run: UserError when its
// --global-seed or its data's tokenizer differs (either would change what the rest of the run
// reads); a warning when the global batch differs (the run continues at the same sample) or
// the training data has another number of samples than the checkpoint's (its cursor then
// points into other data).
void check_resumed_state(const TrainState& st, const RunConfig& rc, const std::string& resume_from,
                         const std::optional<TokenizerRecord>& data_tokenizer, uint64_t train_samples);

}  // namespace ft
