// GradReducer: data-parallel gradient reduction overlapped with the backward pass.
//
// The model reports (GradReadyFn) each group of parameter gradients as soon as no later op
// of the micro-batch writes them: the final layernorm, each block from the last, the
// embeddings. The reducer collects those ranges and, once a bucket's worth of bytes is ready,
// coalesces adjacent ranges (a layer's ranges join the next layer's: the flat layout is
// [kind][layer]) and queues their reduction as one group on a communication stream that
// first waits, device-side, for the compute stream to have written them. The backward goes
// on meanwhile. Near the end (what is still to come fits in one bucket) each report of a few
// MiB goes at once, so that only the last group's reduction follows the backward's last op.
// finish() queues the rest and makes the compute stream wait for every reduction before
// anything reads the gradients (norm, optimizer).
//
// Without ZeRO every range is summed onto every rank (all-reduce). With ZeRO stage 1 each
// range is split at the optimizer shards' boundaries and each piece is summed onto the rank
// that owns it (reduce): a rank then holds the reduced gradient of its shard only, which is
// all its optimizer update reads, for the traffic of a reduce-scatter instead of an
// all-reduce.
//
// Only the last micro-batch of a step passes the hook: before it, gradients are not final.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "models/model.h"
#include "optim/adamw_state.h"

namespace ft {

class GradReducer {
 public:
  // Near the end of the backward (what is still to come fits in one bucket), reports of at
  // least this many bytes are reduced at once instead of waiting for a full bucket.
  static constexpr size_t kMinFlushBytes = size_t{4} << 20;

  // grads: the flat gradient buffer [P]. shard_elems > 0: ZeRO stage 1 with shards of this
  // many elements (rank r owns [r * shard_elems, (r + 1) * shard_elems)); 0: all-reduce.
  // min_flush_bytes: see kMinFlushBytes.
  GradReducer(Backend& be, Communicator& comm, Tensor grads, int64_t shard_elems, size_t bucket_bytes,
              size_t min_flush_bytes = kMinFlushBytes);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // The hook for the last micro-batch's backward (starts a new step's bookkeeping).
  GradReadyFn hook();
  // Queues what is left (all of it when the model reported nothing) and orders the compute
  // stream after every reduction of this step.
  void finish();

  // Default bucket: 128 MiB (FT_BUCKET_MB overrides, for measurements).
  static size_t default_bucket_bytes();
  // The reduction stream's priority: normal unless FT_COMM_PRIORITY=high (for measurements).
  static StreamPriority stream_priority_from_env();

 private:
  void on_ready(std::span<const ParamRange> ranges);
  void flush();

  Backend& be_;
  Communicator& comm_;
  Tensor grads_;
  int64_t shard_elems_;
  size_t bucket_bytes_, min_flush_bytes_;
  StreamHandle stream_;
  EventHandle grads_written_, reduced_;
  std::vector<ParamRange> pending_;
  size_t pending_bytes_ = 0;
  int64_t reduced_elems_ = 0;  // this step's, to check every gradient is reduced once
  std::vector<ReducePart> parts_;
};

}  // namespace ft
