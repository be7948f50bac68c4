#include "train/chat_task.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "data/dataset.h"
#include "train/lm_task.h"
#include "train/runtime.h"

namespace ft {

BleuTokenize parse_bleu_tokenize(const std::string& name, const std::string& flag) {
  if (name == "13a") return BleuTokenize::t13a;
  if (name == "zh") return BleuTokenize::zh;
  if (name == "none") return BleuTokenize::none;
  throw UserError(flag + ": unknown BLEU tokenization '" + name + "' (13a, zh or none: sacrebleu's tokenize=)");
}

ResponseEval evaluate_responses(Generator& gen, const PackedDataset& data, const Tokenizer& tok,
                                int64_t max_pairs, int64_t max_new_tokens, BleuTokenize bleu_tok,
                                const EvalShard& shard) {
  ResponseEval r;
  // The first max_pairs pairs stored whole, the same list on every rank; a pair cut to the
  // context keeps only the start of its reference (none when its prompt filled the row).
  std::vector<uint64_t> chosen;
  for (uint64_t i = 0; i < data.num_pairs() && (max_pairs <= 0 || chosen.size() < static_cast<uint64_t>(max_pairs));
       ++i) {
    if (data.pair_truncated(i)) ++r.truncated_left_out;
    else chosen.push_back(i);
  }
  std::vector<uint64_t> mine;  // the pairs this rank answers
  for (uint64_t k = 0; k < chosen.size(); ++k)
    if (shard.mine(k)) mine.push_back(chosen[k]);
  const size_t n = mine.size();
  std::vector<std::vector<int32_t>> prompts(n);
  std::vector<std::string> refs(n), hyps(n);
  std::vector<int32_t> response;
  auto text = [&](const std::vector<int32_t>& ids) {
    std::vector<uint32_t> u(ids.begin(), ids.end());
    return tok.decode(u);
  };
  const int64_t ctx = gen.context_length();
  for (size_t i = 0; i < n; ++i) {
    data.pair(mine[i], prompts[i], response);
    refs[i] = text(response);
    // A prompt that fills the context leaves no room to answer: keep its most recent tokens.
    if (static_cast<int64_t>(prompts[i].size()) > ctx - 1)
      prompts[i].erase(prompts[i].begin(), prompts[i].end() - (ctx - 1));
    if (prompts[i].empty()) prompts[i].push_back(static_cast<int32_t>(tok.end_of_text()));
  }
  GenerateOptions opt;
  opt.max_new_tokens = max_new_tokens;
  opt.temperature = 0;  // greedy: BLEU of the model's best guess, reproducible
  opt.stop_token = static_cast<int32_t>(tok.end_of_text());
  opt.vocab_limit = std::min(gen.vocab_size(), static_cast<int64_t>(tok.vocab_size()));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> out;
  shard.part([&] {
    if (n > 0) out = gen.generate(prompts, opt);
  });
  r.seconds = shard.max(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  // Corpus BLEU is a function of counts summed over the segments: this rank's, summed over
  // the ranks (exact: integers far below 2^53), score the whole split.
  constexpr size_t kN = 4;
  double sums[2 * kN + 4] = {};
  if (shard.failed.empty()) {  // else the sums below make every rank throw
    for (size_t i = 0; i < n; ++i) hyps[i] = text(out[i]);
    const BleuResult part = corpus_bleu(hyps, refs, bleu_tok);
    for (size_t k = 0; k < kN; ++k) sums[k] = static_cast<double>(part.correct[k]), sums[kN + k] = static_cast<double>(part.total[k]);
    sums[2 * kN] = static_cast<double>(part.hyp_len);
    sums[2 * kN + 1] = static_cast<double>(part.ref_len);
    for (const auto& o : out) sums[2 * kN + 2] += static_cast<double>(o.size());
    sums[2 * kN + 3] = static_cast<double>(n);
  }
  shard.sum(sums);
  std::array<int64_t, kN> correct{}, total{};
  for (size_t k = 0; k < kN; ++k) correct[k] = std::llround(sums[k]), total[k] = std::llround(sums[kN + k]);
  r.bleu = bleu_from_counts(correct, total, std::llround(sums[2 * kN]), std::llround(sums[2 * kN + 1]));
  r.generated_tokens = std::llround(sums[2 * kN + 2]);
  r.pairs = std::llround(sums[2 * kN + 3]);
  return r;
}

ChatTask::ChatTask(const RunConfig& rc, int seq_len, uint32_t vocab_size, bool need_train)
    : bleu_samples_(rc.bleu_samples),
      max_new_tokens_(rc.eval_max_new_tokens),
      bleu_tok_(parse_bleu_tokenize(rc.bleu_tokenize, "--bleu-tokenize")) {
  FT_USER_CHECK(!rc.data_path.empty(), "--task chat needs --data-path: a folder of prompt/response shards "
                "made by `fittrain prepare --input pairs.jsonl --out DIR --seq-len ", seq_len, "`");
  const std::string flag = "--data-path";
  const std::vector<std::string> train_files = resolve_split(rc.data_path, "train", flag, ".pairs");
  std::vector<std::string> val_files = rc.val_data_path.empty()
                                           ? resolve_split(rc.data_path, "val", flag, ".pairs")
                                           : resolve_data_files(rc.val_data_path, "--val-data-path", ".pairs");
  tokenizer_ = data_tokenizer(train_files, flag, val_files, rc.val_data_path.empty() ? flag : "--val-data-path");
  FT_USER_CHECK(!tokenizer_ || vocab_size >= tokenizer_->vocab_size, flag, " ", rc.data_path,
                ": the shards were made by tokenizer ", tokenizer_ ? tokenizer_->identity : "", " with ",
                tokenizer_ ? tokenizer_->vocab_size : 0, " tokens, but the model's vocabulary is ", vocab_size,
                ": pass --vocab-size ", tokenizer_ ? tokenizer_->vocab_size : 0, " (or more)");
  tok_ = load_tokenizer(tokenizer_ ? tokenizer_->model_path : std::string(), flag);
  description_ = rc.data_path + " (prompt/response pairs, packed)";
  test_split_ = token_test_split(!val_files.empty(), !rc.val_data_path.empty());
  const std::string vflag = rc.val_data_path.empty() ? flag : "--val-data-path";
  if (need_train) {
    train_ = std::make_unique<PackedDataset>(train_files, seq_len, vocab_size, flag);
    if (!val_files.empty()) val_ = std::make_unique<PackedDataset>(val_files, seq_len, vocab_size, vflag);
  } else {
    val_ = std::make_unique<PackedDataset>(val_files.empty() ? train_files : val_files, seq_len, vocab_size,
                                           val_files.empty() ? flag : vflag);
  }
}

double ChatTask::loss_units(const SampleSource& src, std::span<const uint64_t> samples) const {
  // Only targets >= 0 count (response tokens, or every real token with --loss-on all).
  const auto* packed = dynamic_cast<const PackedDataset*>(&src);
  FT_CHECK(packed, "chat task: loss units of data that is not packed pairs");
  return static_cast<double>(packed->loss_tokens(samples));
}

std::vector<Metric> ChatTask::metrics(double mean_loss) const {
  return {Metric{"perplexity", std::exp(mean_loss)}};
}

std::vector<Metric> ChatTask::model_metrics(ModelRuntime& rt, const SampleSource& data) const {
  if (bleu_samples_ == 0) return {};
  Generator* gen = rt.model().generator();
  FT_USER_CHECK(gen, "--task chat: model family ", rt.model().family(), " does not generate tokens (BLEU needs it)");
  const auto* packed = dynamic_cast<const PackedDataset*>(&data);
  FT_CHECK(packed, "chat task: evaluation data is not packed pairs");
  const ResponseEval r =
      evaluate_responses(*gen, *packed, *tok_, bleu_samples_, max_new_tokens_, bleu_tok_, eval_shard(rt));
  std::vector<Metric> m = {
      Metric{"bleu4", r.bleu.score}, Metric{"bleu_bp", r.bleu.bp},
      Metric{"gen_tokens_per_s", r.seconds > 0 ? static_cast<double>(r.generated_tokens) / r.seconds : 0.0}};
  if (r.truncated_left_out > 0) m.push_back(Metric{"bleu_truncated_left_out", static_cast<double>(r.truncated_left_out)});
  return m;
}

std::string ChatTask::data_summary() const {
  const PackedDataset* d = train_ ? train_.get() : val_.get();
  char line[256];
  std::snprintf(line, sizeof line, "data       %llu prompt/response pairs packed into %llu rows%s\n",
                static_cast<unsigned long long>(d->num_pairs()), static_cast<unsigned long long>(d->num_samples()),
                val_ && train_ ? detail::concat(" (validation: ", val_->num_pairs(), " pairs)").c_str() : "");
  return line;
}

int ChatTask::sample(ModelRuntime& rt, const RunConfig& rc) const { return sample_language_model(rt, rc, *tok_); }

}  // namespace ft
