// Prompt/response pretraining ("chat"): the data are packed prompt/response shards
// (data/packed_dataset.h, made by `fittrain prepare` from JSONL, Parquet or text pairs). A row
// holds whole samples, each token carrying its position inside its own sample, so the model
// keeps attention (and position embeddings) inside a sample; targets are -1 wherever no loss
// counts (prompt tokens with --loss-on response, padding). The loss unit is a target token,
// counted over the whole global batch by the trainer, so packing and ragged accumulation do
// not bias the mean. Evaluation reports perplexity and, by generating greedy responses to
// the first --bleu-samples validation prompts with the model's KV-cache generator, corpus
// BLEU-4 against the references (sacrebleu's definition: train/bleu.h).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "data/packed_dataset.h"
#include "train/bleu.h"
#include "train/task.h"

namespace ft {

// sacrebleu's tokenize= name ("13a", "zh", "none") as BleuTokenize; UserError naming `flag`.
BleuTokenize parse_bleu_tokenize(const std::string& name, const std::string& flag);

// What evaluating responses gives: BLEU and what it was computed on.
struct ResponseEval {
  BleuResult bleu;
  int64_t pairs = 0;            // prompts answered
  // Pairs passed over because prepare cut them to --seq-len: their stored reference is cut
  // short (or empty), which would score a full answer as wrong.
  int64_t truncated_left_out = 0;
  int64_t generated_tokens = 0;
  double seconds = 0;
};

// Greedy responses of `gen` to the first max_pairs (0: all) prompts of `data` whose pairs were
// stored whole (truncated ones are counted and left out), scored against their references with
// BLEU-4, decoded with `tok`; stops a response at tok's end-of-text.
ResponseEval evaluate_responses(Generator& gen, const PackedDataset& data, const Tokenizer& tok,
                                int64_t max_pairs, int64_t max_new_tokens, BleuTokenize bleu_tok,
                                const EvalShard& shard = {});

class ChatTask final : public Task {
 public:
  // seq_len and vocab_size come from the model; need_train as in make_task().
  ChatTask(const RunConfig& rc, int seq_len, uint32_t vocab_size, bool need_train);
  std::string name() const override { return "chat"; }
  std::string describe_data() const override { return description_; }
  std::string test_split() const override { return test_split_; }
  const SampleSource& train_data() const override { return *train_; }
  const SampleSource* val_data() const override { return val_.get(); }
  double loss_units(const SampleSource& src, std::span<const uint64_t> samples) const override;
  std::vector<Metric> metrics(double mean_loss) const override;
  std::vector<Metric> model_metrics(ModelRuntime& rt, const SampleSource& data) const override;
  std::string data_summary() const override;
  int sample(ModelRuntime& rt, const RunConfig& rc) const override;
  std::optional<TokenizerRecord> tokenizer() const override { return tokenizer_; }

 private:
  std::string description_, test_split_;
  std::unique_ptr<PackedDataset> train_, val_;
  std::optional<TokenizerRecord> tokenizer_;
  std::unique_ptr<Tokenizer> tok_;
  int64_t bleu_samples_, max_new_tokens_;
  BleuTokenize bleu_tok_;
};

}  // namespace ft
