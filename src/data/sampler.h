// BatchSampler: which samples each rank reads at each step, reproducibly and resumably.
//
// Each epoch visits a permutation of [0, N) computed on the fly in O(1) memory: a keyed
// Feistel network over the smallest power-of-two domain >= N, with cycle-walking to stay
// below N (so it is a true bijection of [0, N)). Keys come from (seed, epoch) through
// splitmix64. An epoch has floor(N / G) global batches of G samples (the incomplete last
// one is dropped). Rank r of world W takes positions g*G + r*(G/W) ... + G/W - 1 of global
// batch g: the ranks partition every global batch, and the global batch does not depend on
// W, which is what lets a run resume on a different number of processes.
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace ft {

// Data-loader position saved in checkpoints: the next global batch is step_in_epoch of epoch.
struct DataCursor {
  uint64_t epoch = 0;
  uint64_t step_in_epoch = 0;
  bool operator==(const DataCursor&) const = default;
};

class BatchSampler {
 public:
  // `data_name` names the data in error messages (e.g. "--data-path").
  BatchSampler(uint64_t num_samples, uint64_t global_batch, int rank, int world, uint64_t seed,
               bool shuffle, const std::string& data_name = "the data set");

  uint64_t num_samples() const { return n_; }
  uint64_t global_batch() const { return global_batch_; }
  uint64_t local_batch() const { return local_batch_; }  // G / W
  uint64_t steps_per_epoch() const { return steps_per_epoch_; }

  // Fills `out` (size local_batch()) with this rank's sample indices for the current step,
  // then advances; after the last step of an epoch the epoch counter increments.
  void next_batch(std::span<uint64_t> out);

  DataCursor cursor() const { return cursor_; }
  // UserError if the cursor is past the end of an epoch of this data (data or batch changed).
  void set_cursor(DataCursor c);
  uint64_t epoch() const { return cursor_.epoch; }

  // Position i of epoch `epoch` -> sample index; a bijection of [0, N) for each epoch
  // (the identity when shuffle is off).
  uint64_t permute(uint64_t i, uint64_t epoch) const;

 private:
  uint64_t n_, global_batch_, local_batch_, steps_per_epoch_;
  int rank_, world_;
  uint64_t seed_;
  bool shuffle_;
  int bits_;  // domain is [0, 2^bits_)
  DataCursor cursor_;
};

}  // namespace ft
