// TokenDataset: fixed-length training samples over one or more mapped token shards.
//
// A data spec is a file, a glob(3) pattern, or a folder (every *.bin in it, sorted by name).
// Every token of every shard is checked against the vocabulary when the data set is opened
// (the shard's largest token, scanned once and cached: data/shard_scan.h), so bad data is
// refused before a run's first step. Sample i is a window of T+1 consecutive tokens: inputs are the first T, targets the same
// window shifted by one. Windows start at multiples of T within a shard (consecutive windows
// share one boundary token) and never cross shards: a shard of n tokens gives (n-1)/T
// samples. The global sample index runs over the shards in order. Reading a sample copies
// 2T ints out of the map and allocates nothing.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/sample_source.h"
#include "data/shard_scan.h"
#include "data/token_shard.h"

namespace ft {

// Whether a path spec holds glob characters (* ? [).
bool has_glob_chars(const std::string& s);
// The comma-separated parts of a --data-path (a diffusion run's IMAGES.npy,CONDS.npy); one
// part without a comma, none when empty.
std::vector<std::string> data_path_parts(const std::string& spec);

// Files named by `spec` (file, glob or folder: every file ending in `ext` in it), sorted.
// UserError naming `flag` and `spec` when nothing matches.
std::vector<std::string> resolve_data_files(const std::string& spec, const std::string& flag,
                                            const std::string& ext = ".bin");

// Train/val split of a folder or glob, by file name (llm.c naming: tiny_train.bin,
// tiny_val.bin): split "train" gives the files whose name contains "train", "val" those
// whose name contains "val". When no name contains either, every file is train and val is
// empty. A single file is always train (val empty). UserError when train would be empty.
std::vector<std::string> resolve_split(const std::string& spec, const std::string& split,
                                       const std::string& flag = "--data-path", const std::string& ext = ".bin");

// As a SampleSource: fields "tokens" and "targets", int32 x T each.
class TokenDataset final : public SampleSource {
 public:
  // `vocab_size`: UserError at open if any token of any shard is >= vocab_size, naming the
  // shard, the token, its position and the vocabulary size. `flag` names the option the spec
  // came from in error messages (e.g. "--data-path"). `scan_cache`: where shard scans are
  // cached (nullopt: default_scan_cache_dir(); an empty dir: no cache).
  TokenDataset(const std::string& spec, int seq_len, uint32_t vocab_size, const std::string& flag,
               const std::optional<ScanCacheOptions>& scan_cache = std::nullopt);
  TokenDataset(const std::vector<std::string>& files, int seq_len, uint32_t vocab_size,
               const std::string& flag, const std::optional<ScanCacheOptions>& scan_cache = std::nullopt);

  uint64_t num_samples() const override { return offsets_.back(); }
  std::vector<FieldSpec> fields() const override;
  void read(uint64_t idx, std::span<void* const> dst) const override {
    read_sample(idx, static_cast<int32_t*>(dst[0]), static_cast<int32_t*>(dst[1]));
  }
  int seq_len() const { return seq_len_; }
  uint32_t vocab_size() const { return vocab_size_; }
  uint64_t num_tokens() const;
  size_t num_shards() const { return shards_.size(); }
  const TokenShard& shard(size_t i) const { return shards_[i]; }
  // Shards whose largest token came from the scan cache at open (the others were scanned).
  size_t shards_from_cache() const { return from_cache_; }

  // Copies sample `idx` (< num_samples()) into inputs[0..T) and targets[0..T).
  // UserError naming the shard if a token is >= vocab_size.
  void read_sample(uint64_t idx, int32_t* inputs, int32_t* targets) const;

 private:
  void open(const std::vector<std::string>& files, const std::optional<ScanCacheOptions>& scan_cache);

  int seq_len_;
  uint32_t vocab_size_;
  std::string flag_;
  std::vector<TokenShard> shards_;
  std::vector<uint64_t> offsets_;  // offsets_[s] = first global sample of shard s; back() = total
  size_t from_cache_ = 0;
};

}  // namespace ft
