// Language modelling on token shards: samples are windows of T+1 tokens (inputs and the
// same window shifted by one as targets); the loss unit is a token; evaluation reports
// perplexity; `sample` continues a prompt with the data's tokenizer (the byte tokenizer
// unless the shards were prepared with --tokenizer: data/prepare.h).
#pragma once
#include <memory>
#include <string>

#include "data/dataset.h"
#include "train/task.h"

namespace ft {

struct DataFiles {
  std::vector<std::string> train, val;
  std::string description;  // e.g. "built-in corpus (results/data)"
};
// --data-path / --val-data-path resolved; with no --data-path the built-in corpus is
// written (deterministically) to <results-dir>/data and used.
DataFiles resolve_data(const RunConfig& rc);

// Unigram entropy (nats per token) of the first max_tokens tokens: the loss of a model that
// knows only token frequencies, printed beside the validation loss.
double unigram_entropy(const TokenDataset& data, uint64_t max_tokens);

// The tokenizer recorded beside the data files (every folder holding one of the train or val
// files must record the same one, or none). UserError naming the flag of the files that
// disagree with the first (train_flag's, or val_flag's for a validation file).
std::optional<TokenizerRecord> data_tokenizer(const std::vector<std::string>& train, const std::string& train_flag,
                                              const std::vector<std::string>& val, const std::string& val_flag);

// The prompts `fittrain sample` continues: every --prompt, then the lines of
// --prompts-file; rc.prompt alone when there are none.
std::vector<std::string> sample_prompts(const RunConfig& rc);

// `fittrain sample` for language models: continues sample_prompts(rc) with `tok` as one batch
// (Generator::generate, chunks of its batch), needing no data. Prints each prompt with its
// continuation (several: numbered, a blank line between).
int sample_language_model(ModelRuntime& rt, const RunConfig& rc, const Tokenizer& tok);

class LanguageModelTask final : public Task {
 public:
  // seq_len and vocab_size come from the model; need_train as in make_task().
  LanguageModelTask(const RunConfig& rc, int seq_len, uint32_t vocab_size, bool need_train);
  std::string name() const override { return "lm"; }
  std::string describe_data() const override;
  const SampleSource& train_data() const override { return *train_; }
  const SampleSource* val_data() const override { return val_.get(); }
  double loss_units(const SampleSource& src, std::span<const uint64_t> samples) const override;
  std::vector<Metric> metrics(double mean_loss) const override;
  std::string data_summary() const override;
  int sample(ModelRuntime& rt, const RunConfig& rc) const override;
  std::optional<TokenizerRecord> tokenizer() const override { return tokenizer_; }
  std::string test_split() const override { return test_split_; }

 private:
  int seq_len_;
  std::string description_, test_split_;
  std::unique_ptr<TokenDataset> train_, val_;
  std::optional<TokenizerRecord> tokenizer_;
};

}  // namespace ft
