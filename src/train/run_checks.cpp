// Flag checks shared by every command; see run_checks.h.
#include "train/run_checks.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "core/error.h"
#include "data/tokenizer.h"
#include "plan/memory_plan.h"
#include "train/session.h"

namespace ft {

const char* first_pair_flag(const RunConfig& rc) {
  const RunConfig d;
  return first_given({{rc.loss_on != d.loss_on, "--loss-on"},
                      {rc.prompt_field != d.prompt_field, "--prompt-field"},
                      {rc.response_field != d.response_field, "--response-field"}});
}

void check_builtin_corpus_vocab(const RunConfig& rc, uint32_t vocab_size) {
  // The built-in corpus is bytes: a smaller vocabulary fails on its shards' first token, and
  // that message could only point at the folder the corpus was written to.
  if (rc.task != "lm" || !rc.data_path.empty() || vocab_size == 0 || vocab_size >= ByteTokenizer::kVocabSize) return;
  // Named where it came from: --vocab-size only when that flag set it (--init-from's folder
  // fixes it, and a --vocab-size other than its config's is refused there).
  const bool from_flag = rc.vocab_size > 0 && static_cast<uint32_t>(rc.vocab_size) == vocab_size;
  const std::string what =
      from_flag              ? detail::concat("--vocab-size ", vocab_size)
      : !rc.init_from.empty() ? detail::concat("--init-from ", rc.init_from, ": a vocabulary of ", vocab_size, " tokens")
                              : detail::concat("the model's vocabulary of ", vocab_size, " tokens");
  throw UserError(detail::concat(what, ": the built-in corpus is byte-level text (", ByteTokenizer::kVocabSize,
                                 " tokens): ", from_flag ? detail::concat("pass --vocab-size ", ByteTokenizer::kVocabSize,
                                                                          " or more, or ")
                                                         : std::string("pass "),
                                 "--data-path with shards of a smaller vocabulary"));
}

void check_run_config(const RunConfig& rc) {
  check_builtin_corpus_vocab(rc, static_cast<uint32_t>(rc.vocab_size));  // plan's too (it opens no data)
  // batch and memory
  FT_USER_CHECK(rc.global_batch_size >= 1, "--global-batch-size must be >= 1, got ", rc.global_batch_size);
  FT_USER_CHECK(rc.grad_accum_steps >= 0, "--grad-accum-steps must be >= 0, got ", rc.grad_accum_steps);
  FT_USER_CHECK(rc.grad_accum_steps <= rc.global_batch_size, "--grad-accum-steps ", rc.grad_accum_steps,
                " is more than the --global-batch-size ", rc.global_batch_size, " samples to accumulate");
  parse_auto_int(rc.micro_batch_size, "--micro-batch-size");
  parse_auto_int(rc.eval_batch_size, "--eval-batch-size");
  if (!rc.memory_limit.empty()) parse_bytes(rc.memory_limit, "--memory-limit");
  if (!rc.host_memory_limit.empty()) parse_bytes(rc.host_memory_limit, "--host-memory-limit");
  FT_USER_CHECK(rc.num_workers >= 0, "--num-workers must be >= 0, got ", rc.num_workers);
  FT_USER_CHECK(rc.plan_ranks >= 0, "--ranks must be >= 1, got ", rc.plan_ranks);
  FT_USER_CHECK(std::isfinite(rc.comm_timeout) && rc.comm_timeout > 0,
                "--comm-timeout must be a positive number of seconds, got ", rc.comm_timeout);

  // optimisation (std::isfinite also refuses nan, which every comparison lets through)
  FT_USER_CHECK(std::isfinite(rc.lr) && rc.lr > 0, "--lr must be a positive finite number, got ", rc.lr);
  FT_USER_CHECK(std::isfinite(rc.min_lr_ratio) && rc.min_lr_ratio >= 0 && rc.min_lr_ratio <= 1,
                "--min-lr-ratio must be in [0, 1], got ", rc.min_lr_ratio);
  FT_USER_CHECK(std::isfinite(rc.weight_decay) && rc.weight_decay >= 0, "--weight-decay must be >= 0, got ",
                rc.weight_decay);
  FT_USER_CHECK(std::isfinite(rc.beta1) && rc.beta1 >= 0 && rc.beta1 < 1, "--beta1 must be in [0, 1), got ",
                rc.beta1);
  FT_USER_CHECK(std::isfinite(rc.beta2) && rc.beta2 >= 0 && rc.beta2 < 1, "--beta2 must be in [0, 1), got ",
                rc.beta2);
  FT_USER_CHECK(std::isfinite(rc.eps) && rc.eps > 0, "--eps must be a positive finite number, got ", rc.eps);
  FT_USER_CHECK(rc.warmup_steps >= 0, "--warmup-steps must be >= 0, got ", rc.warmup_steps);
  FT_USER_CHECK(std::isfinite(rc.grad_clip) && rc.grad_clip >= 0, "--grad-clip must be >= 0 (0: off), got ",
                rc.grad_clip);

  // loop
  FT_USER_CHECK(rc.max_steps >= 0, "--max-steps must be >= 0, got ", rc.max_steps);
  FT_USER_CHECK(rc.epochs >= 1 || rc.max_steps > 0, "--epochs must be >= 1, got ", rc.epochs);
  FT_USER_CHECK(rc.log_every >= 1, "--log-every must be >= 1, got ", rc.log_every);
  FT_USER_CHECK(rc.eval_every >= 0, "--eval-every must be >= 0, got ", rc.eval_every);
  FT_USER_CHECK(rc.eval_batches >= 0, "--eval-batches must be >= 0 (0: the whole validation set), got ",
                rc.eval_batches);
  FT_USER_CHECK(rc.ckpt_every >= 0, "--ckpt-every must be >= 0, got ", rc.ckpt_every);
  FT_USER_CHECK(rc.keep_checkpoints >= 0, "--keep-checkpoints must be >= 0 (0: all), got ", rc.keep_checkpoints);
  FT_USER_CHECK(rc.keep_best >= 0, "--keep-best must be >= 0 (0: off), got ", rc.keep_best);
  FT_USER_CHECK(rc.bleu_samples >= 0, "--bleu-samples must be >= 0 (0: no BLEU), got ", rc.bleu_samples);
  FT_USER_CHECK(rc.rank_users >= 0, "--rank-users must be >= 0 (0: all), got ", rc.rank_users);
  FT_USER_CHECK(rc.item_cache == "auto" || rc.item_cache == "on" || rc.item_cache == "off",
                "--item-cache must be auto, on or off, got '", rc.item_cache, "'");
  FT_USER_CHECK(rc.eval_max_new_tokens >= 1, "--eval-max-new-tokens must be >= 1, got ", rc.eval_max_new_tokens);
  FT_USER_CHECK(rc.bleu_tokenize == "13a" || rc.bleu_tokenize == "zh" || rc.bleu_tokenize == "none",
                "--bleu-tokenize must be 13a, zh or none (sacrebleu's tokenize=), got '", rc.bleu_tokenize, "'");
  FT_USER_CHECK(rc.resume == "none" || rc.resume == "auto" || std::filesystem::exists(rc.resume),
                "--resume: '", rc.resume, "' is neither none, auto nor an existing checkpoint file");
  // A named checkpoint and a Hugging Face folder are two different starting weights: refused
  // rather than guessed. (--resume auto with --init-from is the re-runnable fine-tuning
  // command: the folder starts the run, the run's own checkpoints continue it.)
  FT_USER_CHECK(rc.init_from.empty() || rc.resume == "none" || rc.resume == "auto", "--init-from ", rc.init_from,
                " and --resume ", rc.resume, ": give one (--init-from starts a fresh run from a Hugging Face "
                "folder; --resume continues from a checkpoint)");

  // diffusion: DDIM and the EMA of the weights
  FT_USER_CHECK(rc.sample_steps >= 1 && rc.sample_steps <= 1000, "--sample-steps must be in [1, 1000] (the "
                "schedule's 1000 timesteps), got ", rc.sample_steps);
  FT_USER_CHECK(std::isfinite(rc.eta) && rc.eta >= 0 && rc.eta <= 1, "--eta must be in [0, 1] (0: deterministic "
                "DDIM, 1: CDEIT's), got ", rc.eta);
  FT_USER_CHECK(rc.eval_images >= 0, "--eval-images must be >= 0 (0: no reconstructions), got ", rc.eval_images);
  FT_USER_CHECK(rc.num_images >= 1, "--num-images must be >= 1, got ", rc.num_images);
  FT_USER_CHECK(std::isfinite(rc.ema_decay) && (rc.ema_decay == -1 || (rc.ema_decay >= 0 && rc.ema_decay < 1)),
                "--ema-decay must be in [0, 1) (0: no EMA) or -1 (auto: 0.995 with --task diffusion), got ",
                rc.ema_decay);
  FT_USER_CHECK(rc.ema_every >= 1, "--ema-every must be >= 1, got ", rc.ema_every);
  FT_USER_CHECK(rc.ema_warmup >= 0, "--ema-warmup must be >= 0, got ", rc.ema_warmup);
  FT_USER_CHECK(std::isfinite(rc.ema_power) && rc.ema_power >= 0, "--ema-power must be >= 0 (0: no ramp), got ",
                rc.ema_power);

  // test / sample
  FT_USER_CHECK(rc.max_new_tokens >= 0, "--max-new-tokens must be >= 0, got ", rc.max_new_tokens);
  FT_USER_CHECK(std::isfinite(rc.temperature) && rc.temperature >= 0,
                "--temperature must be a finite number >= 0 (0: greedy), got ", rc.temperature);
  FT_USER_CHECK(rc.top_k >= 0 && rc.top_k <= 2147483647, "--top-k must be >= 0 (0: no limit), got ", rc.top_k);
  FT_USER_CHECK(rc.top_p > 0 && rc.top_p <= 1, "--top-p must be in (0, 1] (1: no limit), got ", rc.top_p);
}

double effective_ema_decay(const RunConfig& rc) {
  if (rc.ema_decay >= 0) return rc.ema_decay;
  return rc.task == "diffusion" ? 0.995 : 0.0;
}

EmaSchedule ema_schedule(const RunConfig& rc) {
  EmaSchedule s;
  s.decay = effective_ema_decay(rc);
  s.every = rc.ema_every;
  s.warmup = rc.ema_warmup;
  s.power = rc.ema_power;
  return s;
}

void check_task_flags(const RunConfig& rc) {
  const RunConfig d;
  auto refuse_unless = [&](bool read, bool given, const char* flag, const char* reader) {
    FT_USER_CHECK(read || !given, flag, " applies to ", reader, ", not to --task ", rc.task);
  };
  const bool chat = rc.task == "chat", rec = rc.task == "rec", diffusion = rc.task == "diffusion";
  refuse_unless(chat, rc.bleu_samples != d.bleu_samples, "--bleu-samples", "--task chat (BLEU-4 of its responses)");
  refuse_unless(chat, rc.eval_max_new_tokens != d.eval_max_new_tokens, "--eval-max-new-tokens", "--task chat");
  refuse_unless(chat, rc.bleu_tokenize != d.bleu_tokenize, "--bleu-tokenize", "--task chat");
  refuse_unless(rec, rc.rank_users != d.rank_users, "--rank-users", "--task rec (its HR/NDCG ranking)");
  refuse_unless(rec, rc.item_cache != d.item_cache, "--item-cache", "--task rec (the recommender's item table)");
  refuse_unless(diffusion, rc.sample_steps != d.sample_steps, "--sample-steps", "--task diffusion (DDIM)");
  refuse_unless(diffusion, rc.eta != d.eta, "--eta", "--task diffusion (DDIM)");
  refuse_unless(diffusion, rc.eval_images != d.eval_images, "--eval-images", "--task diffusion");
  const char* ema_flag = first_given({{rc.ema_every != d.ema_every, "--ema-every"},
                                      {rc.ema_warmup != d.ema_warmup, "--ema-warmup"},
                                      {rc.ema_power != d.ema_power, "--ema-power"}});
  FT_USER_CHECK(!ema_flag || ema_enabled(rc), ema_flag ? ema_flag : "", " sets the schedule of an EMA of the weights, ",
                "which this run does not keep (--ema-decay ", effective_ema_decay(rc), "): pass --ema-decay too");
  FT_USER_CHECK(rc.rec_loss != "ce" || rc.negatives == 0, "--negatives ", rc.negatives,
                ": --rec-loss ce scores every item, so it samples no negatives (they are for --rec-loss bpr)");
}

void check_resumed_state(const TrainState& st, const RunConfig& rc, const std::string& resume_from,
                         const std::optional<TokenizerRecord>& data_tokenizer, uint64_t train_samples) {
  if (st.train_samples > 0 && st.train_samples != train_samples)
    std::printf("warning: %s was trained on %llu samples (%s), this run's data has %llu: the data position "
                "(sample %llu of epoch %llu) continues in this data's order\n",
                resume_from.c_str(), static_cast<unsigned long long>(st.train_samples),
                st.data_path.empty() ? "the built-in corpus" : ("--data-path " + st.data_path).c_str(),
                static_cast<unsigned long long>(train_samples), static_cast<unsigned long long>(st.cursor.sample_in_epoch),
                static_cast<unsigned long long>(st.cursor.epoch));
  // The seed orders the samples and draws negatives and noise: another would reorder the rest.
  FT_USER_CHECK(!st.global_seed || *st.global_seed == rc.global_seed, resume_from, " was trained with --global-seed ",
                st.global_seed.value_or(0), ", this run has ", rc.global_seed, ": pass --global-seed ",
                st.global_seed.value_or(0), " to continue it (another seed reorders the rest of its data)");
  // Token ids mean nothing under another tokenizer: a resumed run keeps its data's.
  const std::string have_id = st.tokenizer ? st.tokenizer->identity : "byte257";
  const std::string want_id = data_tokenizer ? data_tokenizer->identity : "byte257";
  FT_USER_CHECK(have_id == want_id, "--resume ", resume_from, ": the checkpoint was trained on tokenizer ", have_id,
                " but --data-path holds shards of tokenizer ", want_id);
  // An EMA of the weights is saved work: a run without one would drop it from its checkpoints.
  if (st.ema_settings.is_object() && !ema_enabled(rc)) {
    const double decay = st.ema_settings.value("decay", 0.0);
    FT_USER_CHECK(rc.ema_decay == 0, "--resume ", resume_from, " keeps an EMA of the weights (decay ", decay,
                  ") that this run has none of, so its checkpoints would drop it: pass --ema-decay ", decay,
                  " to continue it, or --ema-decay 0 to drop it");
    std::printf("warning: %s keeps an EMA of the weights; --ema-decay 0 drops it from this run's checkpoints\n",
                resume_from.c_str());
  }
  // The cursor counts samples, so another global batch starts at the very sample the old
  // batches stopped at.
  if (st.global_batch_size > 0 && st.global_batch_size != rc.global_batch_size)
    std::printf("warning: %s was trained with --global-batch-size %lld, this run uses %lld: continuing at "
                "sample %llu of epoch %llu\n",
                resume_from.c_str(), static_cast<long long>(st.global_batch_size),
                static_cast<long long>(rc.global_batch_size), static_cast<unsigned long long>(st.cursor.sample_in_epoch),
                static_cast<unsigned long long>(st.cursor.epoch));
}

std::string first_setting_apart(const std::string& here, const std::string& rank0) {
  if (here.empty() || rank0.empty() || here == rank0) return "";
  // "--flag\tvalue" lines (cli/cli_words.h: settings_text) as flag -> value.
  auto read = [](const std::string& text) {
    std::map<std::string, std::string> values;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      const size_t tab = line.find('\t');
      values[line.substr(0, tab)] = tab == std::string::npos ? "" : line.substr(tab + 1);
    }
    return values;
  };
  const auto mine = read(here), theirs = read(rank0);
  auto shown = [](const std::string& v) { return v.empty() ? std::string("\"\"") : v; };
  for (const auto& [flag, value] : mine) {
    const auto it = theirs.find(flag);
    if (it == theirs.end()) return flag + " " + shown(value) + " (rank 0 has no " + flag + ": another fittrain)";
    if (it->second != value) return flag + " " + shown(value) + " (rank 0: " + shown(it->second) + ")";
  }
  for (const auto& [flag, value] : theirs)
    if (!mine.count(flag)) return "no " + flag + " (rank 0: " + shown(value) + "; another fittrain)";
  return "";
}

}  // namespace ft
