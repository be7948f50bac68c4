// BatchLoader: turns sample indices into host token/target arrays, optionally one
// micro-batch ahead on a background thread (--num-workers >= 1) so reading the mmap'd
// shards overlaps the step. Two fixed buffers, sized at construction: nothing is allocated
// per step.
#pragma once
#include <cstdint>
#include <future>
#include <span>
#include <vector>

#include "data/dataset.h"

namespace ft {

class BatchLoader {
 public:
  BatchLoader(const TokenDataset& data, int64_t max_batch, bool background);
  ~BatchLoader();
  // Starts loading these samples (at most max_batch) into the next buffer.
  void request(std::span<const uint64_t> samples);
  // Waits for the last request; pointers stay valid until the request after next.
  struct Batch {
    const int32_t* tokens;
    const int32_t* targets;
    int64_t size;
  };
  Batch get();

 private:
  void load(int buf, std::vector<uint64_t> samples);
  const TokenDataset& data_;
  int64_t max_batch_, T_;
  bool background_;
  std::vector<int32_t> tokens_[2], targets_[2];
  int64_t sizes_[2] = {0, 0};
  int next_ = 0;
  std::future<void> pending_;
};

}  // namespace ft
