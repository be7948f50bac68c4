// prepare_pairs: prompt/response data (JSONL, plain text, Parquet) -> packed .pairs shards
// (data/packed_dataset.h: rows of T positions, whole samples, loss mask, positions).
//
// Inputs, by extension unless `input_format` says otherwise:
//   .jsonl / .json   JSON Lines: one object per line with string fields prompt_field and
//                    response_field (other fields are ignored). A line that is not a JSON
//                    object, lacks a field or has a non-string one is a UserError naming
//                    file:line.
//   .parquet         the string columns prompt_field and response_field, row group by row
//                    group (data/parquet.h). A null is a UserError naming file, row group
//                    and row.
//   .txt / .tsv      one pair per line: PROMPT<TAB>RESPONSE, exactly one unescaped TAB; in
//                    both parts \t is a TAB, \n a newline, \r a carriage return, \\ a
//                    backslash; any other backslash sequence is an error naming file:line.
// In JSONL and text, blank lines are skipped and a trailing \r (CRLF files) is ignored. The
// same pairs in any of the three give byte-identical shards.
//
// A sample is encode(prompt) ++ encode(response) ++ [end_of_text]. An empty prompt gives a
// sample whose every target counts (its first response token is not predicted: nothing
// comes before it); an empty response gives a sample whose only loss target is the
// end-of-text after the prompt; a pair with both empty is left out and counted (`empty`).
// A sample longer than T+1 tokens is cut to its first T+1 tokens and has no end-of-text
// (`truncated`; `prompt_only` counts those of them cut inside the prompt, which keep no
// response token and, with loss_on = response, no loss).
//
// Split: with val_inputs, every sample of `inputs` is train and every sample of
// `val_inputs` val. Otherwise sample k (in input order, over all inputs) is val when a
// seeded hash of (seed, k) falls below val_fraction: a seeded random share of the samples,
// decided while streaming.
//
// Packing: each split keeps at most `open_rows` rows open; a sample goes into the first
// open row (oldest first) with room for its n-1 positions, else into a new row, closing the
// oldest when `open_rows` are open; a row that is exactly full closes at once. Rows are
// written in the order they close; the result depends only on the input and the options,
// never on the thread count. A shard closes after max_shard_positions / T rows or
// max_shard_samples samples: out_dir/train_NNNNNN.pairs, val_NNNNNN.pairs.
//
// Streaming: lines are read in batches of batch_lines and parsed and tokenized by all OpenMP
// threads, while one helper thread packs and writes the batch before, in order. Peak memory,
// independent of the input size:
//   the read buffer (8 MiB, or twice the longest line)
//   + 2 x batch_lines x (a line's text + its tokens x 4 bytes)  (2 x 64 Ki lines: ~40 MiB
//                                                                 for short chat pairs)
//   + 2 splits x open_rows x 2T x 4 bytes                          (T=1024: 128 KiB)
//   + a shard's tables in the writer: 8 bytes x max_shard_samples (32 MiB) + 20 bytes a row
//   + Parquet only: one row group's prompt and response strings.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/packed_dataset.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace ft {

enum class PairFormat { kJsonl, kText, kParquet };

// The format of `path`: by extension when `format` is "auto", else jsonl | text | parquet.
// UserError naming --input-format, or the file when its extension says nothing.
PairFormat pair_input_format(const std::string& path, const std::string& format);
// True when `path` is prompt/response data whatever the flags say (JSONL or Parquet, by
// extension or `format`): such an input switches `prepare` to pair mode.
bool implies_pairs(const std::string& path, const std::string& format);

inline constexpr int kDefaultPairsSeqLen = 1024;

struct PreparePairsOptions {
  std::vector<std::string> inputs;
  std::vector<std::string> val_inputs;  // empty: a val_fraction share of `inputs`
  std::string out_dir;
  std::string input_format = "auto";
  std::string prompt_field = "prompt", response_field = "response";
  LossOn loss_on = LossOn::kResponse;
  int seq_len = kDefaultPairsSeqLen;
  double val_fraction = 0.1;
  uint64_t seed = 0;
  uint64_t max_shard_positions = kDefaultMaxShardTokens;
  uint64_t max_shard_samples = 4'000'000;
  size_t batch_lines = 65536;
  int open_rows = 8;
  const Tokenizer* tokenizer = nullptr;  // null: ByteTokenizer
  bool overwrite = true;  // false: refuse an out_dir that holds a preparation (StagedPrepare)
};

struct PairsSplitReport {
  uint64_t samples = 0, rows = 0;
  uint64_t positions = 0;    // positions holding sample tokens (the rest is padding)
  uint64_t loss_tokens = 0;  // targets >= 0
  std::vector<std::string> files;
  double efficiency(int seq_len) const {
    return rows == 0 ? 0.0 : static_cast<double>(positions) / (static_cast<double>(rows) * seq_len);
  }
};

struct PreparePairsReport {
  PairsSplitReport train, val;
  uint64_t truncated = 0, prompt_only = 0, empty = 0;
  uint64_t longest = 0;  // tokens of the longest sample before truncation
};

// UserError on bad options (naming the flag), unreadable or malformed input (naming the file
// and line), an output folder that cannot be written, or a train split that would train
// nothing: no pair (all of them sent to val by val_fraction, or none in the input) or no loss
// token (every train sample cut inside its prompt by seq_len); out_dir is then left as it was.
PreparePairsReport prepare_pairs(const PreparePairsOptions& opt);

}  // namespace ft
