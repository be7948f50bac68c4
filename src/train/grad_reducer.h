// GradReducer: data-parallel gradient reduction overlapped with the backward pass.
//
// The model reports (GradReadyFn) each group of parameter gradients as soon as no later op
// of the micro-batch writes them: the final layernorm, each block from the last, the
// embeddings. The reducer collects those ranges and, once a bucket's worth of bytes is ready,
// coalesces adjacent ranges (a layer's ranges join the next layer's: the flat layout is
// [kind][layer]) and queues their reduction as one group on a communication stream that
// first waits, device-side, for the compute stream to have written them. The backward goes
// on meanwhile; while more than a bucket is still to come the group goes in the background
// lane (dist/communicator.h: NCCL runs it on few CTAs, leaving the backward the SMs). Near
// the end (what is still to come fits in one bucket) each report of a few MiB goes at once,
// in the foreground lane, so that only the last group's reduction follows the backward's
// last op.
// finish() queues the rest and makes the compute stream wait for every reduction before
// anything reads the gradients (norm, optimizer).
//
// Without ZeRO every range is summed onto every rank (all-reduce). With ZeRO stage 1 the
// unit is the shard layout's chunk (optim/shard_layout.h): once every gradient of a chunk
// has been reported, the chunk is ready, and ready chunks are reduce-scattered in place (each
// rank receives the sum of its piece): a rank then holds the reduced gradient of its shard
// only, which is all its optimizer update reads, and every rank's links carry an equal part.
//
// Only the last micro-batch of a step passes the hook: before it, gradients are not final.
//
// A rank that runs out of memory inside a step must still queue every collective the other
// ranks queue, in the same order and the same groups, or they wait in one for ever. Every
// step's backward reports the same ranges in the same order (one model, one plan), so the
// reducer keeps the last complete step's reports, and drain() hands in what this step has not
// reported yet: the same flushes follow. Before a first complete step there is nothing to
// replay, so that step's reductions are held until finish() (holding()): the trainer first
// agrees with the other ranks that every backward completed (train/trainer.cpp).
#pragma once
#include <cstdint>
#include <span>
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

  // grads: the flat gradient buffer [P]. shard: ZeRO stage 1's layout (then grads' buffer
  // must hold shard->total() elements, the padding zero), or null: all-reduce. stream: where
  // the reductions run (null: a stream of the reducer's own). min_flush_bytes: see
  // kMinFlushBytes.
  GradReducer(Backend& be, Communicator& comm, Tensor grads, const OptimizerShard* shard, size_t bucket_bytes,
              size_t min_flush_bytes = kMinFlushBytes, StreamHandle stream = {});
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // The hook for the last micro-batch's backward (starts a new step's bookkeeping).
  GradReadyFn hook();
  // Queues what is left (all of it when the model reported nothing) and orders the compute
  // stream after every reduction of this step.
  void finish();
  // This step's reductions wait for finish(): no step of this reducer has completed yet, so
  // none could be replayed (valid once hook() or drain() has started the step).
  bool holding() const { return holding_; }
  // After this rank's backward failed: reports what the last complete step reported after the
  // point this step reached, so that this rank queues the same reductions as the others
  // (their values are whatever the gradient buffer holds; the step's update must be skipped).
  // Starts the step when hook() was not called yet. False when this step's reports so far
  // differ from the last step's (nothing to replay faithfully); true while holding().
  bool drain();

  // Default bucket: 32 MiB (FT_BUCKET_MB overrides, for measurements).
  static size_t default_bucket_bytes();
  // The reduction stream's priority: normal unless FT_COMM_PRIORITY=high (for measurements).
  static StreamPriority stream_priority_from_env();

 private:
  void start_step();
  void on_ready(std::span<const ParamRange> ranges);
  void flush(CommLane lane = CommLane::foreground);
  void mark_reported(const ParamRange& r);  // ZeRO-1: counts the range into its chunks

  Backend& be_;
  Communicator& comm_;
  Tensor grads_;
  OptimizerShard shard_;  // world 1 (not sharded): all-reduce
  size_t bucket_bytes_, min_flush_bytes_;
  StreamHandle stream_;
  bool own_stream_;
  EventHandle grads_written_, reduced_;
  std::vector<ParamRange> pending_;       // all-reduce: reported ranges not yet queued
  std::vector<int64_t> ready_chunks_;     // ZeRO-1: complete chunks not yet queued
  std::vector<int64_t> chunk_left_;       // ZeRO-1: each chunk's gradients not yet reported
  size_t pending_bytes_ = 0;
  int64_t reported_elems_ = 0;  // this step's, to check every gradient is reported once
  int64_t queued_chunks_ = 0;
  std::vector<Tensor> parts_;
  // The step's reports (one hook call each), flat: report i is ranges[ends[i-1], ends[i]).
  // This step's and the last complete step's; capacities are kept, so no step allocates.
  struct Reports {
    std::vector<ParamRange> ranges;
    std::vector<size_t> ends;
    size_t size() const { return ends.size(); }
    std::span<const ParamRange> operator[](size_t i) const {
      const size_t b = i ? ends[i - 1] : 0;
      return std::span<const ParamRange>(ranges).subspan(b, ends[i] - b);
    }
    void clear() { ranges.clear(), ends.clear(); }
  };
  Reports reports_, last_reports_;
  bool follows_last_ = true;  // this step's reports so far are the last step's first ones
  bool holding_ = false;      // no complete step yet: reductions wait for finish()
  bool open_ = false;         // a step started (hook() or drain()) and not finished
};

}  // namespace ft
