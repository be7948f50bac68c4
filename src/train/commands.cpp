// The commands besides training: plan, test, sample, prepare, tokenizer train, report.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"
#include "core/rng.h"
#include "data/prepare.h"
#include "data/prepare_pairs.h"
#include "data/tokenizer.h"
#include "models/gpt2_lm.h"
#include "train/checkpoint.h"
#include "train/hf_interchange.h"
#include "train/safetensors.h"
#include "train/lm_task.h"
#include "train/model_io.h"
#include "train/prepare_eit.h"
#include "train/prepare_rec.h"
#include "train/report.h"
#include "train/run_checks.h"
#include "train/session.h"
#include "train/task.h"
#include "train/trainer.h"

namespace ft {

int run_plan(const RunConfig& rc) {
  // train's command line planned: refused where train refuses it (the flags of another task
  // too); the flags that only steer a run (--resume, --metrics-file, --log-every ...) do not
  // change the plan.
  check_run_config(rc);
  check_task_flags(rc);
  Session s(rc, true);
  s.fit();  // under mpirun: every rank (they agree on one plan), printed by rank 0
  if (s.comm().rank() != 0) return 0;
  if (rc.json) std::printf("%s\n", s.plan_json().c_str());
  else std::printf("%s", s.plan_table().c_str());
  return 0;
}

namespace {

// Prompt/response pairs -> packed .pairs shards (data/prepare_pairs.h).
int run_prepare_pairs(const RunConfig& rc, const Tokenizer& tok) {
  PreparePairsOptions o;
  o.inputs = rc.inputs;
  o.val_inputs = rc.val_inputs;
  o.out_dir = rc.out_dir;
  o.overwrite = rc.overwrite;
  o.input_format = rc.input_format;
  o.prompt_field = rc.prompt_field;
  o.response_field = rc.response_field;
  o.loss_on = parse_loss_on(rc.loss_on);
  o.seq_len = rc.seq_len == 0 ? kDefaultPairsSeqLen : rc.seq_len;
  o.val_fraction = rc.val_fraction;
  o.seed = rc.global_seed;
  o.tokenizer = &tok;
  const PreparePairsReport r = prepare_pairs(o);
  const auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  const uint64_t samples = r.train.samples + r.val.samples;
  std::printf("prepared   %llu prompt/response samples into rows of T=%d (--loss-on %s) under %s\n", u(samples),
              o.seq_len, loss_on_name(o.loss_on), rc.out_dir.c_str());
  for (const auto* s : {&r.train, &r.val}) {
    std::printf("%-10s %llu samples in %llu rows, %zu shard(s); packing %.1f%% (real positions / rows x T); "
                "%llu loss tokens\n",
                s == &r.train ? "train" : "val", u(s->samples), u(s->rows), s->files.size(),
                100.0 * s->efficiency(o.seq_len), u(s->loss_tokens));
  }
  std::printf("split      %s\n", !o.val_inputs.empty() ? "val = --val-input"
                                   : o.val_fraction > 0  ? "seeded random --val-fraction of the samples"
                                                         : "none (--val-fraction 0)");
  std::printf("truncated  %llu sample(s) longer than T+1=%d tokens were cut (no end-of-text)%s; longest %llu tokens\n",
              u(r.truncated), o.seq_len + 1,
              r.prompt_only > 0 ? detail::concat(", ", r.prompt_only, " of them inside the prompt (no response left)").c_str()
                                : "",
              u(r.longest));
  if (r.empty > 0)
    std::printf("empty      %llu pair(s) with an empty prompt and response were left out\n", u(r.empty));
  // prepare_pairs refuses a train split without one; a validation split without one is kept
  // (the training data is good) but train refuses it as validation data, so it is said now.
  if (r.val.samples > 0 && r.val.loss_tokens == 0)
    std::printf("warning: the val split has no loss token (its %llu pair(s) were cut inside their prompt): train "
                "refuses it as validation data; prepare again with a longer --seq-len or --loss-on all\n",
                u(r.val.samples));
  if (tok.kind() != "byte")
    std::printf("tokenizer  %s %s, %u tokens, recorded in %s/%s: train with --vocab-size %u or more\n",
                tok.kind().c_str(), tok.identity().c_str(), tok.vocab_size(), rc.out_dir.c_str(), kTokenizerRecordFile,
                tok.vocab_size());
  return 0;
}

namespace fs = std::filesystem;

// The pair-mode checks of --val-input: validation files are another set than --input's, and
// they replace --val-fraction's share (which was silently ignored beside them).
void check_val_inputs(const RunConfig& rc) {
  if (rc.val_inputs.empty()) return;
  FT_USER_CHECK(rc.val_fraction == RunConfig{}.val_fraction || rc.val_fraction == 0, "--val-input and --val-fraction ",
                rc.val_fraction, ": give one (with --val-input every --input sample is train)");
  for (const std::string& v : rc.val_inputs)
    for (const std::string& in : rc.inputs) {
      std::error_code ec;
      const bool same = v == in || fs::equivalent(v, in, ec);
      FT_USER_CHECK(!same, "--val-input ", v, " is also an --input (", in, "): validation would equal training; ",
                    "give held-out pairs, or leave --val-input out and use --val-fraction");
    }
}

}  // namespace

int run_prepare(const RunConfig& rc) {
  if (rc.synthetic == "eit") return run_prepare_eit(rc);
  // The EIT set's flags, anywhere else, are named rather than ignored.
  FT_USER_CHECK(rc.synthetic_train < 0 && rc.synthetic_valid < 0 && rc.synthetic_test < 0 && rc.image_size == 0,
                rc.image_size ? "--image-size" : "--train/--valid/--test", " applies to --synthetic eit only");
  if (prepares_interactions(rc)) return run_prepare_interactions(rc);
  FT_USER_CHECK(!rc.inputs.empty(), "--input: give at least one text file");
  FT_USER_CHECK(!rc.out_dir.empty(), "--out: give the folder for the shards");
  FT_USER_CHECK(rc.val_fraction >= 0 && rc.val_fraction < 1, "--val-fraction must be in [0, 1), got ",
                rc.val_fraction);
  // The interactions' flags (train/prepare_rec.cpp refuses the text flags beside them).
  const RunConfig d;
  const char* rec_flag = first_given({{rc.synthetic_users != d.synthetic_users, "--users"},
                                      {rc.synthetic_items != d.synthetic_items, "--items"}});
  FT_USER_CHECK(!rec_flag, rec_flag ? rec_flag : "", " applies to --synthetic movielens only (--input prepares text ",
                "or prompt/response files)");
  FT_USER_CHECK(rc.ratings_format == d.ratings_format, "--ratings-format applies to --ratings only (--input's ",
                "format is --input-format)");
  // A bad value named as such first: "csv" read as "a format of pairs: add --pairs".
  if (rc.input_format != "auto") pair_input_format("", rc.input_format);
  // Pair mode: asked for, or implied by an input (or a validation input) that can only be pairs.
  bool pairs = rc.pairs;
  for (const auto* list : {&rc.inputs, &rc.val_inputs})
    for (const std::string& f : *list) pairs = pairs || implies_pairs(f, rc.input_format);
  if (!pairs) {
    FT_USER_CHECK(rc.val_inputs.empty(), "--val-input applies to prompt/response data: add --pairs (text ",
                  "documents' validation share comes from --val-fraction, or pass a validation folder to train's ",
                  "--val-data-path)");
    FT_USER_CHECK(rc.seq_len == 0, "--seq-len applies to prompt/response data: add --pairs (text documents are "
                                   "cut into windows at training time)");
    FT_USER_CHECK(rc.input_format == "auto", "--input-format ", rc.input_format,
                  " reads prompt/response data: add --pairs");
    const char* pair_flag = first_pair_flag(rc);
    FT_USER_CHECK(!pair_flag, pair_flag ? pair_flag : "", " applies to prompt/response data: add --pairs (text ",
                  "documents have no prompt or response)");
  }
  if (pairs) check_val_inputs(rc);
  // Shards already there are another preparation's: replaced only when asked. Refused here
  // before any input is read, and again under the folder's lock (StagedPrepare).
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(rc.tokenizer, "--tokenizer");
  check_out_dir_unprepared(rc.out_dir, *tok, rc.overwrite);
  if (pairs) return run_prepare_pairs(rc, *tok);
  const PrepareReport r = prepare_text(rc.inputs, rc.out_dir, rc.val_fraction, rc.global_seed, kDefaultMaxShardTokens,
                                       tok.get(), rc.overwrite);
  std::printf("prepared %llu documents: %llu train tokens in %zu shard(s), %llu val tokens in %zu shard(s) under %s\n",
              static_cast<unsigned long long>(r.documents), static_cast<unsigned long long>(r.train_tokens),
              r.train_files.size(), static_cast<unsigned long long>(r.val_tokens), r.val_files.size(),
              rc.out_dir.c_str());
  if (tok->kind() != "byte")
    std::printf("tokenizer  %s %s, %u tokens, recorded in %s/%s: train with --vocab-size %u or more\n",
                tok->kind().c_str(), tok->identity().c_str(), tok->vocab_size(), rc.out_dir.c_str(),
                kTokenizerRecordFile, tok->vocab_size());
  return 0;
}

int run_tokenizer_train(const SentencePieceTrainOptions& opt) {
  const SentencePieceTrainReport r = train_sentencepiece(opt);
  std::printf("tokenizer  %s %s: %u pieces from %llu lines (%llu sentences; trained on a sample of at most %lld)\n",
              opt.model_type.c_str(), r.identity.c_str(), r.vocab_size, static_cast<unsigned long long>(r.lines),
              static_cast<unsigned long long>(r.sentences), static_cast<long long>(opt.sample_sentences));
  if (r.split_lines > 0)
    std::printf("split      %llu line(s) longer than %zu bytes were cut into pieces (SentencePiece skips longer "
                "ones)\n",
                static_cast<unsigned long long>(r.split_lines), kMaxSentenceBytes);
  if (r.reserved_chars_removed > 0)
    std::printf("removed    U+2047 from %llu line(s) (SentencePiece reserves it and skips lines holding it)\n",
                static_cast<unsigned long long>(r.reserved_chars_removed));
  if (r.vocab_size != static_cast<uint32_t>(opt.vocab_size))
    std::printf("note       the input supports %u pieces, fewer than --vocab-size %d\n", r.vocab_size, opt.vocab_size);
  std::printf("wrote      %s and %s\n", r.model_path.c_str(), r.record_path.c_str());
  return 0;
}

int run_report(const ReportOptions& opt) {
  const ReportFiles files = write_report(opt);
  std::printf("report     %s\n", files.html.c_str());
  for (const std::string& p : files.images) std::printf("chart      %s\n", p.c_str());
  return 0;
}

namespace {

// The task `command` (test, sample) runs a checkpoint for: the one it was trained for; --task,
// when given, must name it.
std::string trained_task(const RunConfig& rc, const std::string& path, const char* command) {
  const std::string task = checkpoint_task(path);
  FT_USER_CHECK(!rc.task_given || rc.task == task, "--task ", rc.task, ": ", path,
                " was trained for task ", task, ", which `", command, "` runs it for (leave --task out)");
  return task;
}

// The tokenizer `sample` decodes with: the one the checkpoint records (the file it names, or
// --tokenizer), whose identity must be the recorded one; the byte tokenizer when none is
// recorded (unless --tokenizer names one).
std::unique_ptr<Tokenizer> sample_tokenizer(const std::string& checkpoint, const std::string& flag_value) {
  const std::optional<TokenizerRecord> rec = checkpoint_tokenizer(checkpoint);
  if (!rec) return load_tokenizer(flag_value, "--tokenizer");
  const std::string spec = flag_value.empty() ? rec->model_path : flag_value;
  std::error_code ec;
  FT_USER_CHECK(!flag_value.empty() || std::filesystem::exists(spec, ec), checkpoint, ": the checkpoint's tokenizer ",
                rec->identity, " was ", spec, ", which no longer exists: pass --tokenizer DIR_OR_MODEL");
  std::unique_ptr<Tokenizer> tok = load_tokenizer(spec, flag_value.empty() ? checkpoint + ": tokenizer" : "--tokenizer");
  FT_USER_CHECK(tok->identity() == rec->identity, checkpoint, ": trained with tokenizer ", rec->identity, " but ",
                spec, " is tokenizer ", tok->identity(),
                flag_value.empty() ? " (replaced since): pass --tokenizer with the original model" : "");
  return tok;
}

// `test --dump-logits FILE`: the logits of the first evaluation batch (its first b windows,
// b = the evaluation micro-batch or fewer) as a NumPy .npy of fp32 [b, T, V], so another
// implementation can be compared value by value (scripts/check_hf_export.py).
void dump_logits(Session& s, const SampleSource& data, const std::string& path) {
  auto* lm = dynamic_cast<GPT2LM*>(&s.model());
  FT_USER_CHECK(lm, "--dump-logits: model family ", s.model().family(), " has no token logits");
  const int64_t T = lm->gpt2_config().seq_len, V = lm->gpt2_config().vocab_size;
  const int64_t b = std::min<int64_t>(s.fit().shape.eval_batch, static_cast<int64_t>(data.num_samples()));
  const std::vector<FieldSpec> fields = data.fields();
  std::vector<std::vector<char>> bufs(fields.size());
  std::vector<void*> dst;
  for (size_t f = 0; f < fields.size(); ++f) {
    bufs[f].resize(fields[f].sample_bytes());
    dst.push_back(bufs[f].data());
  }
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < b; ++i) {
    data.read(static_cast<uint64_t>(i), dst);
    for (size_t f = 0; f < fields.size(); ++f)
      if (fields[f].name == "tokens" && fields[f].dtype == DType::i32) {
        const auto* p = reinterpret_cast<const int32_t*>(bufs[f].data());
        tokens.insert(tokens.end(), p, p + fields[f].per_sample);
      }
  }
  FT_CHECK(tokens.size() == static_cast<size_t>(b * T), "--dump-logits: the data has no tokens field");
  std::vector<float> logits(static_cast<size_t>(b * T * V));
  lm->eval_logits(tokens.data(), b, logits.data());
  // .npy version 1.0: magic, header length, a Python dict padded with spaces to 64 bytes.
  std::string header = detail::concat("{'descr': '<f4', 'fortran_order': False, 'shape': (", b, ", ", T, ", ", V,
                                      "), }");
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += '\x01';
  bytes += '\x00';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float));
  write_file_atomic(path, bytes);
  std::printf("logits     %s: fp32 [%lld, %lld, %lld] of the first %lld windows\n", path.c_str(),
              static_cast<long long>(b), static_cast<long long>(T), static_cast<long long>(V),
              static_cast<long long>(b));
}

}  // namespace

// Evaluation-only sessions take the model from the checkpoint, so `test` and `sample` need
// no model flags.
// With --init-from DIR, test evaluates a Hugging Face folder's weights instead (the same
// numbers transformers computes for them: scripts/check_hf_export.py).
int run_test(const RunConfig& rc0) {
  check_run_config(rc0);
  const bool hf = !rc0.init_from.empty();
  FT_USER_CHECK(!hf || rc0.checkpoint == "auto", "--init-from ", rc0.init_from, " and --checkpoint ", rc0.checkpoint,
                ": give one (test evaluates either)");
  const std::string path = hf ? rc0.init_from : find_checkpoint(rc0.checkpoint, rc0.results_dir, true);
  const nlohmann::json model_cfg = hf ? init_from_model_config(rc0) : checkpoint_model_config(path);
  // A checkpoint is evaluated for the task it was trained for (a chat model on packed pairs).
  RunConfig rc = rc0;
  if (!hf) {
    rc.task = trained_task(rc0, path, "test");
    // No --data-path: the data it was trained on (the built-in corpus only when that was it).
    const std::optional<std::string> trained_on = rc0.data_path.empty() ? checkpoint_data_path(path) : std::nullopt;
    if (trained_on && !trained_on->empty()) {
      for (const std::string& part : data_path_parts(*trained_on))
        FT_USER_CHECK(has_glob_chars(part) || std::filesystem::exists(part), path, " was trained on --data-path ",
                      *trained_on, ", and ", part, " is not there now: pass --data-path");
      rc.data_path = *trained_on;
    }
  }
  Session s(rc, false, &model_cfg);
  // Several ranks (mpirun) split the evaluation (EvalShard). Rank 0 alone prints and writes
  // (the built-in corpus, regenerated by make_task); the others wait for it and only read.
  Communicator& comm = s.comm();
  const bool rank0 = comm.rank() == 0;
  const RunConfig rc_rank = s.quiet_unless_rank0(rc);
  // Each rank found the checkpoint in its own view of the folder (and took its task and data
  // from it): one that found another is refused for that, before anything is built from it.
  if (!hf && comm.world_size() > 1) agree_on_checkpoint(s, CheckpointReader(path));
  if (rc.data_path != rc0.data_path)
    std::printf("data       %s, which %s was trained on\n", rc.data_path.c_str(), path.c_str());
  std::unique_ptr<Task> task;
  if (rank0) task = make_task(rc, s.model(), false);
  comm.barrier_without_timeout();  // rank 0 makes the built-in corpus: as long as that takes
  if (!rank0) task = make_task(rc_rank, s.model(), false);
  if (comm.world_size() > 1) s.agree_with_rank0(data_identity_of(*task, rc, false), data_apart, same_data_reason(false));
  check_loss_units(*task, *task->val_data(), eval_samples(rc), "--data-path", false);
  s.fit();
  s.allocate();
  TrainState st;
  if (hf) {
    load_hf_weights(s, path);
  } else {
    st = load_checkpoint(s, path, false);
  }
  // A run that kept an EMA of the weights is evaluated on it, as its training evaluations were.
  const bool ema = !hf && load_ema_weights(s, path);
  const SampleSource& data = *task->val_data();
  const double loss = evaluate(s.runtime(), *task, data, s.fit().shape.eval_batch, eval_samples(rc));
  std::string extra;
  std::vector<Metric> ms = task->metrics(loss);
  for (Metric& m : task->model_metrics(s.runtime(), data)) ms.push_back(std::move(m));
  for (const Metric& m : ms) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " | %s %.3f", m.name.c_str(), m.value);
    extra += buf;
  }
  // What was evaluated, counted: the first --eval-batches batches of --global-batch-size
  // samples, or everything; and how many at a time (what fits beside the weights).
  const uint64_t n = data.num_samples(), cap = eval_samples(rc), used = cap > 0 ? std::min(n, cap) : n;
  const int ranks = eval_shard(s.runtime()).world;
  const std::string scope =
      (used < n ? detail::concat(used, " of ", n, " samples (", rc.eval_batches, " batches of ", rc.global_batch_size,
                                 "; --eval-batches 0 evaluates all)")
                : detail::concat("all ", n, " samples")) +
      detail::concat(", ", s.fit().shape.eval_batch, " at a time") +
      (ranks > 1 ? detail::concat(", split over ", ranks, " ranks") : std::string());
  if (!rc.dump_logits.empty() && rank0) dump_logits(s, data, rc.dump_logits);
  const std::string what = hf ? path + " (Hugging Face weights)"
                               : detail::concat(path, " (step ", st.step, ema ? ", EMA weights)" : ")");
  std::printf("test       %s on %s: loss %.4f%s | %s\n", what.c_str(),
              task->test_split().c_str(), loss, extra.c_str(),
              scope.c_str());
  return 0;
}

namespace {

// Flags of token generation that a recommender's or a diffusion model's `sample` does not
// read: refused naming the first given (they were ignored without a word). A recommender
// takes its users from --prompt / --prompts-file.
void refuse_generation_flags(const RunConfig& rc, const std::string& path, bool takes_prompts) {
  const RunConfig d;
  const char* given = first_given({{!takes_prompts && !rc.prompts.empty(), "--prompt"},
                                   {!takes_prompts && !rc.prompts_file.empty(), "--prompts-file"},
                                   {!rc.tokenizer.empty(), "--tokenizer"},
                                   {rc.max_new_tokens != d.max_new_tokens, "--max-new-tokens"},
                                   {rc.temperature != d.temperature, "--temperature"},
                                   {rc.top_k != d.top_k, "--top-k"},
                                   {rc.top_p != d.top_p, "--top-p"}});
  FT_USER_CHECK(!given, given ? given : "", ": ", path, " was trained for task ", rc.task, ", whose `sample` ",
                rc.task == "rec" ? "ranks items for users (--prompt USER_ID, --prompts-file of user ids)"
                                 : "reconstructs images from --data-path's conditions",
                "; it generates no tokens");
}

}  // namespace

int run_sample(const RunConfig& rc0) {
  check_run_config(rc0);
  const std::string path = find_checkpoint(rc0.checkpoint, rc0.results_dir, true);
  RunConfig rc = rc0;
  const nlohmann::json model_cfg = checkpoint_model_config(path);
  rc.task = trained_task(rc0, path, "sample");  // a chat model samples like a language model, unpacked
  if (rc.task == "diffusion" || rc.task == "rec") refuse_generation_flags(rc, path, rc.task == "rec");
  if (rc.task != "diffusion") {
    const RunConfig d;
    const char* image_flag = first_given({{rc.num_images != d.num_images, "--num-images"},
                                          {rc.sample_steps != d.sample_steps, "--sample-steps"},
                                          {rc.eta != d.eta, "--eta"}});
    FT_USER_CHECK(!image_flag, image_flag ? image_flag : "", ": ", path, " was trained for task ", rc.task,
                  ", whose `sample` makes no images");
  }
  if (rc.task == "diffusion") {
    // Images reconstructed from the data's conditions (train/diffusion_eval.cpp), all of them
    // in one evaluation batch when they fit, with the EMA weights when the run kept them.
    if (rc.eval_batch_size == "auto") rc.global_batch_size = rc.num_images;
    Session s(rc, false, &model_cfg);
    std::unique_ptr<Task> task = make_task(rc, s.model(), false);
    s.fit();
    s.allocate();
    const TrainState st = load_checkpoint(s, path, false);
    const bool ema = load_ema_weights(s, path);
    std::printf("checkpoint %s (step %lld, %s weights)\n", path.c_str(), static_cast<long long>(st.step),
                ema ? "EMA" : "training");
    return task->sample(s.runtime(), rc);
  }
  FT_USER_CHECK(rc.out_dir.empty(), "--out: `sample` writes files only for --task diffusion checkpoints; ", path,
                " was trained for task ", rc.task);
  // The evaluation batch is generation's batch: as many prompts as fit at once (at most all
  // of them), unless --eval-batch-size says.
  if (rc.eval_batch_size == "auto") rc.global_batch_size = static_cast<int64_t>(sample_prompts(rc).size());
  const std::unique_ptr<Tokenizer> tok = sample_tokenizer(path, rc.tokenizer);  // before the model is built
  Session s(rc, false, &model_cfg);
  s.fit();
  s.allocate();
  load_checkpoint(s, path, false);
  // A recommender recommends for users of its data (their histories): --prompt's user ids,
  // then --prompts-file's (the file was read, but only --prompt's were ranked).
  if (rc.task == "rec") {
    RunConfig users = rc;
    if (!rc.prompts_file.empty()) users.prompts = sample_prompts(rc);
    return make_task(users, s.model(), false)->sample(s.runtime(), users);
  }
  FT_USER_CHECK(rc.data_path.empty(), "--data-path: `sample` reads data only for recommenders (task rec) and "
                "diffusion models (task diffusion); ", path,
                " was trained for task ", rc.task);
  // Sampling needs no data: the task is only asked what to generate.
  FT_USER_CHECK(rc.task == "lm" || rc.task == "chat", path, ": trained for task ", rc.task,
                ": `sample` is defined for tasks lm, chat, rec and diffusion");
  FT_USER_CHECK(s.model().generator(), path, ": model family ", s.model().family(), " does not generate tokens");
  return sample_language_model(s.runtime(), rc, *tok);
}

}  // namespace ft
