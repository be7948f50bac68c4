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
// are replaced by the new ones once all are written (StagedPrepare, below), so that a folder
// spec never mixes two runs and a failed run loses nothing.
//
// A SentencePiece tokenizer is recorded beside the shards (the shard format is unchanged):
// its model copied as out_dir/tokenizer.model and out_dir/tokenizer.json with its identity,
// vocabulary size and model type (data/tokenizer.h, TokenizerRecord). Training refuses a
// model whose vocabulary is smaller, and `sample` decodes with it. The byte tokenizer
// writes no record, and removes one left by an earlier run.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "data/prepared_folder.h"
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
                           const Tokenizer* tokenizer = nullptr,  // null: ByteTokenizer
                           bool overwrite = true);  // false: refuse a folder that holds a preparation

// Shared with prepare_pairs. A preparation writes its shards and tokenizer record into a
// staging folder inside out_dir (kStagingDir, made anew) and replaces the earlier run's only
// once every input has been read and every shard written: a missing input, a bad record deep in
// a file or an interruption leaves the earlier preparation as it was (its shards, record and
// model). commit() removes the earlier run's shards ((train|val)_NNNNNN.bin and .pairs) and,
// when this run has none, its tokenizer record (byte shards must not carry one; a model file
// stays), then renames the staged files in; the destructor of an uncommitted staging removes
// it. The folder's PrepareLock is taken before the staging folder is touched and held until
// the destructor has removed it. UserError naming the folder when it cannot be created, or
// when another preparation holds its lock, or (unless overwrite) holds an earlier one
// (check_out_dir_unprepared, under the lock).
inline constexpr const char* kStagingDir = ".prepare-staging";
class StagedPrepare {
 public:
  StagedPrepare(const std::string& out_dir, const Tokenizer& tok, bool overwrite);
  ~StagedPrepare();
  StagedPrepare(const StagedPrepare&) = delete;
  StagedPrepare& operator=(const StagedPrepare&) = delete;
  const std::string& dir() const { return staging_; }  // where the shards are written
  // Moves the staged files into out_dir; `files` (staged paths) become their final paths.
  void commit(std::initializer_list<std::vector<std::string>*> files);

 private:
  std::string out_dir_, staging_;
  std::optional<PrepareLock> lock_;  // taken first (it creates out_dir); released after the staging is gone
  bool committed_ = false;
};
void record_tokenizer(const Tokenizer& tok, const std::string& dir);


// Refuses (UserError naming --out and the file), unless `overwrite`, a preparation that would
// replace or remove a tokenizer out_dir already holds: a tokenizer.model of another identity
// than `tok`'s (a folder of `tokenizer train`, or of an earlier preparation), or a record
// (tokenizer.json) that byte shards would remove.
void check_out_dir_tokenizer(const std::string& out_dir, const Tokenizer& tok, bool overwrite);

// UserError naming --out when out_dir holds another kind of preparation (ratings, an EIT set:
// check_no_other_preparation) and, unless overwrite, when it holds another preparation's
// shards or a tokenizer that preparing with `tok` would replace or remove (check_out_dir_tokenizer).
// StagedPrepare checks under the folder's lock (a preparation finishing meanwhile is seen);
// `prepare` also before reading its inputs, to refuse at once.
void check_out_dir_unprepared(const std::string& out_dir, const Tokenizer& tok, bool overwrite);

}  // namespace ft
