// Helpers shared by the commands in trainer.cpp and commands.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "models/gpt2_plan.h"
#include "train/config.h"

namespace ft {

struct DataFiles {
  std::vector<std::string> train, val;
  std::string description;  // e.g. "built-in corpus (results/data)"
};
// --data-path / --val-data-path resolved; with no --data-path the built-in corpus is
// written (deterministically) to <results-dir>/data and used.
DataFiles resolve_data(const RunConfig& rc);

// Mean loss per token over up to max_batches evaluation batches (0: all), in order.
class GPT2;
double evaluate(GPT2& model, const TokenDataset& data, int64_t eval_batch, int64_t max_batches);

// Unigram entropy (nats per token) of the first max_tokens tokens: the loss of a model that
// knows only token frequencies, printed beside the validation loss.
double unigram_entropy(const TokenDataset& data, uint64_t max_tokens);

}  // namespace ft
