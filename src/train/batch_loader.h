// BatchLoader: turns sample indices into a host Batch (every field of the source),
// optionally one micro-batch ahead on a background thread (--num-workers >= 1) so reading
// the data overlaps the step. Two fixed buffers per field and one long-lived worker, sized
// and started at construction: nothing is allocated per step.
//
// Given the training device, the buffers are its upload sources (Backend::alloc_upload_source:
// page-locked on CUDA), so the model's copy_to_device of a field is one DMA queued without the
// host copying the bytes or waiting. The device may then read a batch's buffers until its
// work is done, not only until copy_to_device returns: get() records an event behind the work
// queued for the batch it returned before (so a batch may be used until the next get()), and a
// buffer is refilled only after its event has completed.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/batch.h"
#include "data/sample_source.h"

namespace ft {

class BatchLoader {
 public:
  // device: the training backend whose copy_to_device reads the batches (nullptr: plain memory)
  BatchLoader(const SampleSource& data, int64_t max_batch, bool background, Backend* device = nullptr);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Starts loading these samples (at most max_batch) into the next buffer, sample i as
  // visited in training epoch epochs[i] (SampleSource::read_visit; empty: all in epoch 0).
  // A global batch can straddle two epochs (data/sampler.h), so each sample has its own.
  void request(std::span<const uint64_t> samples, std::span<const uint64_t> epochs = {});
  // Waits for the last request; its pointers stay valid until the request after next.
  // A data error on the worker (e.g. a token outside the vocabulary) is rethrown here. With a
  // device, work queued for the previous batch may still read it (fenced, see above).
  Batch get();

 private:
  void load(int buf);
  void worker_loop();
  const SampleSource& data_;
  std::vector<FieldSpec> fields_;
  int64_t max_batch_;
  bool background_;
  // [buffer]: one block of every field, page-locked (the device's upload source) or plain
  void* pinned_[2] = {nullptr, nullptr};
  std::vector<char> plain_[2];
  std::vector<char*> field_at_[2];  // [buffer][field]: where each field lives in its block
  Backend* device_ = nullptr;
  EventHandle fence_[2];         // recorded behind the work queued for the buffer's batch
  bool fenced_[2] = {false, false};
  int last_ = -1;                // the buffer get() returned last
  std::vector<uint64_t> samples_[2];
  int64_t sizes_[2] = {0, 0};
  std::vector<uint64_t> epochs_[2];  // [buffer][sample]: the epoch each is visited in
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
