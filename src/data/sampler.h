// BatchSampler: which samples each rank reads at each step, reproducibly and resumably.
//
// Each epoch visits a permutation of [0, N) computed on the fly in O(1) memory: a keyed
// Feistel network over the smallest power-of-two domain >= N, with cycle-walking to stay
// below N (so it is a true bijection of [0, N)). Keys come from (seed, epoch) through
// splitmix64. The epochs' orders, one after another, make one stream of samples, and global
// batch g is the stream's positions g*G ... g*G + G - 1: when G does not divide N, a batch
// takes the last samples of one epoch's order and the first of the next, so no sample of an
// epoch is skipped or repeated (no drop_last). Rank r of world W takes positions
// g*G + r*(G/W) ... + G/W - 1: the ranks partition every global batch, and the stream does
// not depend on W or G, which is what lets a run resume on another number of processes, or
// with another global batch, at the very sample it stopped at.
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace ft {

// Data-loader position saved in checkpoints: the next global batch starts at position
// sample_in_epoch (< N) of epoch's order.
struct DataCursor {
  uint64_t epoch = 0;
  uint64_t sample_in_epoch = 0;
  bool operator==(const DataCursor&) const = default;
};

class BatchSampler {
 public:
  // `data_name` names the data in error messages (e.g. "--data-path").
  BatchSampler(uint64_t num_samples, uint64_t global_batch, int rank, int world, uint64_t seed,
               bool shuffle, const std::string& data_name = "the data set");

  uint64_t num_samples() const { return n_; }
  uint64_t global_batch() const { return global_batch_; }
  // This rank's share of a global batch: G / W, one more for the first G % W ranks (the
  // ranks take consecutive runs of each global batch, so together they take all of it).
  uint64_t local_batch() const { return local_batch_; }
  double steps_per_epoch() const { return static_cast<double>(n_) / static_cast<double>(global_batch_); }
  // Steps from the cursor until every sample of `epochs` epochs has been visited: from the
  // start, ceil(epochs * N / G), the last one completed with the first samples of the next
  // epoch's order; 0 once the cursor is past them. UserError on overflow.
  uint64_t steps_for_epochs(uint64_t epochs) const;

  // Fills `out` (size local_batch()) with this rank's sample indices for the current step
  // and, if given, `epochs_out` (same size) with the epoch each was drawn from; then advances.
  void next_batch(std::span<uint64_t> out, std::span<uint64_t> epochs_out = {});

  DataCursor cursor() const { return cursor_; }
  // UserError if the cursor is past the end of an epoch of this data (the data changed).
  void set_cursor(DataCursor c);
  uint64_t epoch() const { return cursor_.epoch; }
  // Samples of the stream before the cursor (every epoch's, from the run's start).
  uint64_t samples_done() const { return cursor_.epoch * n_ + cursor_.sample_in_epoch; }
  // Epochs done, fractional (1.25: a quarter into the second epoch).
  double epochs_done() const {
    return static_cast<double>(cursor_.epoch) + static_cast<double>(cursor_.sample_in_epoch) / static_cast<double>(n_);
  }

  // Position i of epoch `epoch` -> sample index; a bijection of [0, N) for each epoch
  // (the identity when shuffle is off).
  uint64_t permute(uint64_t i, uint64_t epoch) const;

 private:
  uint64_t n_, global_batch_, local_batch_;
  uint64_t first_in_batch_;  // this rank's first position within a global batch
  int rank_, world_;
  uint64_t seed_;
  bool shuffle_;
  int bits_;  // domain is [0, 2^bits_)
  DataCursor cursor_;
};

}  // namespace ft
