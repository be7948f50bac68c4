// prepare_text: turn plain-text files into tokenized train/val shards.
//
// Each input file is one document: its tokens, then the tokenizer's end-of-text token
// (ByteTokenizer by default: the bytes, then ByteTokenizer::kEndOfText). With 10 or
// more documents the split is by document (a seeded random val_fraction of the documents,
// at least one, go to val), so no document straddles train and val; with fewer, the last
// val_fraction of the concatenated token stream is val. Shards are written as
// out_dir/train_000000.bin, train_000001.bin, ... and val_000000.bin, ... with at most
// max_shard_tokens tokens each; stale train_NNNNNN.bin / val_NNNNNN.bin files (and packed
// train_NNNNNN.pairs / val_NNNNNN.pairs, data/prepare_pairs.h) from an earlier run in out_dir
// are removed first so that a folder spec never mixes two runs.
//
// A SentencePiece tokenizer is recorded beside the shards (the shard format is unchanged):
// its model copied as out_dir/tokenizer.model and out_dir/tokenizer.json with its identity,
// vocabulary size and model type (data/tokenizer.h, TokenizerRecord). Training refuses a
// model whose vocabulary is smaller, and `sample` decodes with it. The byte tokenizer
// writes no record, and removes one left by an earlier run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace ft {

struct PrepareReport {
  uint64_t documents = 0;
  uint64_t val_documents = 0;       // 0 when split by token tail
  bool split_by_documents = false;
  uint64_t train_tokens = 0;
  uint64_t val_tokens = 0;
  std::vector<std::string> train_files;
  std::vector<std::string> val_files;  // empty when val_tokens == 0
};

inline constexpr uint64_t kDefaultMaxShardTokens = 100'000'000;

// UserError when an input is missing, unreadable or empty, when val_fraction is outside
// [0, 1), or when out_dir cannot be created.
PrepareReport prepare_text(const std::vector<std::string>& input_files, const std::string& out_dir,
                           double val_fraction = 0.1, uint64_t seed = 0,
                           uint64_t max_shard_tokens = kDefaultMaxShardTokens,
                           const Tokenizer* tokenizer = nullptr);  // null: ByteTokenizer

// Shared with prepare_pairs: creates out_dir and removes the shards of an earlier run
// ((train|val)_NNNNNN.bin and .pairs); writes (or, for the byte tokenizer, removes) the
// tokenizer record. UserError naming the folder when it cannot be created.
void prepare_out_dir(const std::string& out_dir);
void record_tokenizer(const Tokenizer& tok, const std::string& out_dir);

}  // namespace ft
