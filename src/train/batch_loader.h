// BatchLoader: turns sample indices into host token/target arrays, optionally one
// micro-batch ahead on a background thread (--num-workers >= 1) so reading the mmap'd
// shards overlaps the step. Two fixed buffers and one long-lived worker, sized and started
// at construction: nothing is allocated per step.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "data/dataset.h"

namespace ft {

class BatchLoader {
 public:
  BatchLoader(const TokenDataset& data, int64_t max_batch, bool background);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Starts loading these samples (at most max_batch) into the next buffer.
  void request(std::span<const uint64_t> samples);
  struct Batch {
    const int32_t* tokens;
    const int32_t* targets;
    int64_t size;
  };
  // Waits for the last request; its pointers stay valid until the request after next.
  // A data error on the worker (e.g. a token outside the vocabulary) is rethrown here.
  Batch get();

 private:
  void load(int buf);
  void worker_loop();
  const TokenDataset& data_;
  int64_t max_batch_, T_;
  bool background_;
  std::vector<int32_t> tokens_[2], targets_[2];
  std::vector<uint64_t> samples_[2];
  int64_t sizes_[2] = {0, 0};
  int next_ = 0;

  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  int job_ = -1;          // buffer the worker should fill, -1 when idle
  bool busy_ = false;     // a request is outstanding (not yet collected by get())
  bool done_ = false;     // the outstanding request has finished
  bool quit_ = false;
  std::exception_ptr error_;
};

}  // namespace ft
