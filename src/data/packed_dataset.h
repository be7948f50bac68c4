// Packed prompt/response data: shards of rows of exactly T positions, each row holding
// whole samples, with a loss mask and per-sample positions. Written by prepare_pairs
// (data/prepare_pairs.h), read by PackedDataset as a SampleSource.
//
// A sample is encode(prompt) ++ encode(response) ++ [end_of_text]: n tokens, of which the
// first p are the prompt. As an LM sequence it fills n-1 positions: input j is token j,
// target j is token j+1 (j = 0..n-2). With loss_on = response a target counts only when it
// is a response token or the end-of-text (j+1 >= p); other targets are -1. With loss_on =
// all every target counts. A row lays its samples one after another; the rest is padding.
//
// Fields of one row (each int32 x T):
//   tokens     input token per position (padding: the end-of-text token)
//   targets    next token, or -1 (no loss: prompt tokens under loss_on=response, padding)
//   positions  position of the token inside its own sample: 0 at every sample's first
//              token, counting up; the padding is a segment of its own, again from 0.
// The model keeps attention inside a sample (query t sees keys t-positions[t] .. t) and
// uses positions as position ids, so positions restart at 0 exactly at sample boundaries.
//
// Example, T = 8, loss_on = response, end-of-text E, two samples [a b | c E] (p = 2) and
// [d | e E] (p = 1):  tokens    a  b  c  d  e  E  E  E
//                     targets  -1  c  E  e  E -1 -1 -1
//                     positions 0  1  2  0  1  0  1  2
//
// On disk (`*.pairs`, little-endian, version 1), one shard:
//   header, 64 bytes: magic "FTPAIRS\0", u32 version, u32 header bytes (64), u32 T,
//     u32 token bytes (2 or 4), u32 loss_on (0 response, 1 all), u32 end_of_text,
//     u64 rows, u64 samples, u64 tokens, u32 CRC-32C of the tables, u32 CRC-32C of the
//     header's first 60 bytes;
//   tokens: every sample's n tokens, row by row, samples in row order (u16 or u32);
//   zero padding to a multiple of 8 bytes;
//   sample table: samples x {u32 n, u32 p | 0x80000000 when the sample was truncated
//     (then it has no end-of-text)};
//   row tables: (rows+1) x u64 first token of each row, (rows+1) x u64 first sample of
//     each row, rows x u32 loss tokens (targets >= 0) of each row.
// So a row costs its real tokens plus 8 bytes per sample and 20 per row, not 3 x T int32.
// Every table is checked when a shard is opened (sizes, CRCs, monotone offsets, each row's
// samples fitting T, the loss counts), and every token against the vocabulary.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/sample_source.h"

namespace ft {

inline constexpr char kPairsMagic[8] = {'F', 'T', 'P', 'A', 'I', 'R', 'S', '\0'};
inline constexpr uint32_t kPairsVersion = 1;
inline constexpr size_t kPairsHeaderBytes = 64;
inline constexpr uint32_t kPairsTruncatedBit = 0x80000000u;

enum class LossOn : uint32_t { kResponse = 0, kAll = 1 };

// "response" / "all"; UserError naming --loss-on otherwise.
LossOn parse_loss_on(const std::string& s);
const char* loss_on_name(LossOn l);

// One sample as it is stored: its n tokens and the prompt length p (<= n).
struct PackedSample {
  std::span<const uint32_t> tokens;
  uint32_t prompt_len = 0;
  bool truncated = false;
};

// Targets >= 0 of a sample of n tokens and prompt length p.
inline uint32_t sample_loss_tokens(uint32_t n, uint32_t p, LossOn loss_on) {
  if (n < 2) return 0;
  if (loss_on == LossOn::kAll || p <= 1) return n - 1;
  return p >= n ? 0 : n - p;
}

// Writes one shard atomically (path.tmp, fsync, rename, fsync of the folder): tokens stream
// to the file as rows are added; the tables (8 bytes per sample, 20 per row) stay in memory
// until finish(). A writer destroyed without finish() removes its .tmp file.
class PackedShardWriter {
 public:
  PackedShardWriter(std::string path, uint32_t seq_len, uint32_t vocab_size, uint32_t end_of_text, LossOn loss_on);
  ~PackedShardWriter();
  PackedShardWriter(const PackedShardWriter&) = delete;
  PackedShardWriter& operator=(const PackedShardWriter&) = delete;

  // One row: whole samples whose positions (n-1 each) sum to at most T.
  void add_row(std::span<const PackedSample> samples);
  void finish();
  uint64_t rows() const { return row_tokens_.size() - 1; }
  uint64_t samples() const { return sample_table_.size() / 2; }
  const std::string& path() const { return path_; }

 private:
  void put(const void* p, size_t n);
  void drain();

  std::string path_, tmp_;
  uint32_t seq_len_, token_bytes_, end_of_text_;
  LossOn loss_on_;
  int fd_ = -1;
  std::vector<unsigned char> buf_;
  uint64_t tokens_ = 0;
  std::vector<uint32_t> sample_table_, row_loss_;
  std::vector<uint64_t> row_tokens_{0}, row_samples_{0};
};

// One mapped shard, validated at open. UserError naming the file when it is missing,
// truncated, has trailing data, a wrong magic, version or CRC, or inconsistent tables.
class PackedShard {
 public:
  explicit PackedShard(const std::string& path);
  ~PackedShard();
  PackedShard(PackedShard&& o) noexcept;
  PackedShard& operator=(PackedShard&&) = delete;
  PackedShard(const PackedShard&) = delete;
  PackedShard& operator=(const PackedShard&) = delete;

  const std::string& path() const { return path_; }
  uint32_t seq_len() const { return seq_len_; }
  uint64_t rows() const { return rows_; }
  uint64_t samples() const { return samples_; }
  uint64_t tokens() const { return tokens_; }
  int token_bytes() const { return static_cast<int>(token_bytes_); }
  LossOn loss_on() const { return loss_on_; }
  uint32_t end_of_text() const { return end_of_text_; }
  uint32_t max_token() const { return max_token_; }  // scanned at open

  uint32_t token(uint64_t i) const {
    return token_bytes_ == 2 ? reinterpret_cast<const uint16_t*>(tok_)[i] : reinterpret_cast<const uint32_t*>(tok_)[i];
  }
  uint64_t row_first_token(uint64_t r) const { return row_tokens_[r]; }
  uint64_t row_first_sample(uint64_t r) const { return row_samples_[r]; }
  uint32_t row_loss(uint64_t r) const { return row_loss_[r]; }
  uint32_t sample_len(uint64_t s) const { return sample_table_[2 * s]; }
  uint32_t sample_prompt(uint64_t s) const { return sample_table_[2 * s + 1] & ~kPairsTruncatedBit; }
  bool sample_truncated(uint64_t s) const { return (sample_table_[2 * s + 1] & kPairsTruncatedBit) != 0; }
  // The row holding sample s, and the sample's first token.
  uint64_t row_of_sample(uint64_t s) const;
  uint64_t sample_first_token(uint64_t s) const;

 private:
  void validate(const void* header, uint64_t file_bytes);  // after the map; UserError naming the file
  void release() noexcept;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  uint32_t seq_len_ = 0, token_bytes_ = 2, end_of_text_ = 0, max_token_ = 0;
  LossOn loss_on_ = LossOn::kResponse;
  uint64_t rows_ = 0, samples_ = 0, tokens_ = 0;
  const unsigned char* tok_ = nullptr;
  const uint32_t* sample_table_ = nullptr;
  const uint64_t *row_tokens_ = nullptr, *row_samples_ = nullptr;
  const uint32_t* row_loss_ = nullptr;
};

// Packed rows of one or more *.pairs shards as a SampleSource: fields "tokens", "targets",
// "positions" (int32 x T each), one sample per row; global row i runs over the shards in
// order. read() copies one row out of the maps (3T ints), allocates nothing and may be
// called from any thread. Host memory stays flat: the shards are mapped, not loaded.
class PackedDataset final : public SampleSource {
 public:
  // `spec`: a *.pairs file, a glob, or a folder (every *.pairs in it, by name); `flag` names
  // the option in errors. UserError when a shard's T differs from seq_len (re-run prepare
  // with --seq-len, or train with the shard's T), when a token is >= vocab_size, or when
  // shards disagree on loss_on or end_of_text.
  PackedDataset(const std::string& spec, int seq_len, uint32_t vocab_size, const std::string& flag);
  PackedDataset(const std::vector<std::string>& files, int seq_len, uint32_t vocab_size, const std::string& flag);

  uint64_t num_samples() const override { return row_offsets_.back(); }  // rows
  std::vector<FieldSpec> fields() const override;
  void read(uint64_t idx, std::span<void* const> dst) const override {
    read_row(idx, static_cast<int32_t*>(dst[0]), static_cast<int32_t*>(dst[1]), static_cast<int32_t*>(dst[2]));
  }
  void read_row(uint64_t row, int32_t* tokens, int32_t* targets, int32_t* positions) const;

  int seq_len() const { return seq_len_; }
  uint32_t vocab_size() const { return vocab_size_; }
  LossOn loss_on() const { return loss_on_; }
  uint32_t end_of_text() const { return end_of_text_; }
  size_t num_shards() const { return shards_.size(); }
  const PackedShard& shard(size_t i) const { return shards_[i]; }

  // Targets >= 0 of one row / of a set of rows: the loss units of the task (stored per row).
  uint32_t loss_tokens(uint64_t row) const;
  uint64_t loss_tokens(std::span<const uint64_t> rows) const;
  uint64_t total_loss_tokens() const { return total_loss_; }

  // The samples in file order (shards in order, rows in order, samples in row order), for
  // generation-based evaluation: pair(i) gives its prompt and response tokens as stored
  // (the response without the end-of-text; a truncated sample's response is cut short and
  // pair_truncated(i) is true).
  uint64_t num_pairs() const { return sample_offsets_.back(); }
  void pair(uint64_t i, std::vector<int32_t>& prompt, std::vector<int32_t>& response) const;
  bool pair_truncated(uint64_t i) const;

 private:
  void open(const std::vector<std::string>& files);
  std::pair<size_t, uint64_t> locate(const std::vector<uint64_t>& offsets, uint64_t i) const;

  int seq_len_;
  uint32_t vocab_size_;
  std::string flag_;
  LossOn loss_on_ = LossOn::kResponse;
  uint32_t end_of_text_ = 0;
  std::vector<PackedShard> shards_;
  std::vector<uint64_t> row_offsets_, sample_offsets_;  // per shard, first global row/sample; back() = total
  uint64_t total_loss_ = 0;
};

}  // namespace ft
