#include "train/grad_reducer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/env.h"
#include "core/error.h"

namespace ft {

size_t GradReducer::default_bucket_bytes() {
  if (const long mb = env_int_in("FT_BUCKET_MB", 0, 1, 4096)) return static_cast<size_t>(mb) << 20;
  // 32 MiB: the buckets filled while more than a bucket is still to come run on the NCCL
  // communicator with few CTAs (CommLane::background), and smaller buckets send more of the
  // backward's reductions there. Measured on 2 H200s (GPT-2 124M, docs/PERFORMANCE.md session
  // 32): 32 MiB with 8 background CTAs 0.3-0.5% above 128 MiB on one communicator (three
  // calls, two leases); 32 MiB alone the same as 128. (On one communicator, 4 H100s in session
  // 5: 128 MiB best of 8, 32 and 128.)
  return size_t{32} << 20;
}

StreamPriority GradReducer::stream_priority_from_env() {
  const char* v = std::getenv("FT_COMM_PRIORITY");
  if (!v || !*v || std::strcmp(v, "normal") == 0) return StreamPriority::normal;
  FT_USER_CHECK(std::strcmp(v, "high") == 0, "FT_COMM_PRIORITY must be normal or high, got '", v, "'");
  return StreamPriority::high;
}

GradReducer::GradReducer(Backend& be, Communicator& comm, Tensor grads, const OptimizerShard* shard,
                         size_t bucket_bytes, size_t min_flush_bytes, StreamHandle stream)
    : be_(be),
      comm_(comm),
      grads_(grads),
      shard_(shard ? *shard : OptimizerShard{}),
      bucket_bytes_(bucket_bytes),
      min_flush_bytes_(min_flush_bytes),
      stream_(stream),
      own_stream_(stream.native == nullptr) {
  FT_CHECK(!shard || (shard_.num_params == grads_.numel() && shard_.world == comm_.world_size()),
           "GradReducer: a shard layout of ", shard_.num_params, " elements over ", shard_.world,
           " ranks for gradients ", grads_.shape_str(), " over ", comm_.world_size());
  if (own_stream_) stream_ = be_.create_stream(stream_priority_from_env());
  grads_written_ = be_.create_event();
  reduced_ = be_.create_event();
}

GradReducer::~GradReducer() {
  be_.destroy_event(reduced_);
  be_.destroy_event(grads_written_);
  if (own_stream_) be_.destroy_stream(stream_);
}

GradReadyFn GradReducer::hook() {
  start_step();
  return [this](std::span<const ParamRange> r) { on_ready(r); };
}

void GradReducer::start_step() {
  reports_.clear();
  follows_last_ = true;
  holding_ = last_reports_.size() == 0;
  open_ = true;
  pending_.clear();
  ready_chunks_.clear();
  pending_bytes_ = 0;
  reported_elems_ = 0;
  queued_chunks_ = 0;
  if (shard_.sharded()) {
    chunk_left_.resize(static_cast<size_t>(shard_.chunks));
    for (int64_t c = 0; c < shard_.chunks; ++c)
      chunk_left_[static_cast<size_t>(c)] =
          std::clamp<int64_t>(shard_.num_params - c * shard_.chunk, 0, shard_.chunk);
  }
}

bool GradReducer::drain() {
  if (!open_) start_step();
  if (holding_) return true;
  if (!follows_last_) return false;
  for (size_t i = reports_.size(); i < last_reports_.size(); ++i) on_ready(last_reports_[i]);
  return true;
}

void GradReducer::mark_reported(const ParamRange& r) {
  FT_CHECK(r.offset >= 0 && r.offset + r.count <= shard_.num_params, "gradient range [", r.offset, ", +", r.count,
           ") outside ", shard_.num_params);
  for (int64_t c = r.offset / shard_.chunk; c * shard_.chunk < r.offset + r.count; ++c) {
    const int64_t a = std::max(r.offset, c * shard_.chunk), b = std::min(r.offset + r.count, (c + 1) * shard_.chunk);
    int64_t& left = chunk_left_[static_cast<size_t>(c)];
    FT_CHECK(b - a <= left, "gradients of chunk ", c, " reported twice");
    left -= b - a;
    if (left == 0) {
      ready_chunks_.push_back(c);
      pending_bytes_ += static_cast<size_t>(shard_.chunk) * dtype_size(grads_.dtype);
    }
  }
}

void GradReducer::on_ready(std::span<const ParamRange> ranges) {
  const size_t i = reports_.size();
  follows_last_ = follows_last_ && i < last_reports_.size() &&
                  std::ranges::equal(ranges, last_reports_[i], [](const ParamRange& a, const ParamRange& b) {
                    return a.offset == b.offset && a.count == b.count;
                  });
  reports_.ranges.insert(reports_.ranges.end(), ranges.begin(), ranges.end());
  reports_.ends.push_back(reports_.ranges.size());
  for (const ParamRange& r : ranges) {
    if (r.count == 0) continue;
    reported_elems_ += r.count;
    if (shard_.sharded()) {
      mark_reported(r);
      continue;
    }
    pending_.push_back(r);
    pending_bytes_ += static_cast<size_t>(r.count) * dtype_size(grads_.dtype);
  }
  // What is reduced after the backward's last op is exposed: a device trace of GPT-2 124M on
  // 4 H100s showed 0.28 ms of reduction after it (the first two blocks waited in one bucket
  // with the embeddings). So once everything still to come fits in one bucket, each report of
  // at least min_flush_bytes_ goes at once, and the last report is reduced from inside the
  // backward (finish() then only orders the compute stream after it).
  if (holding_) return;  // the first step: everything goes at finish()
  const int64_t unreported = (grads_.numel() - reported_elems_) * static_cast<int64_t>(dtype_size(grads_.dtype));
  // Before the end the backward has time to spare for this reduction (background lane);
  // near it something soon waits for it.
  const bool near_end = unreported <= static_cast<int64_t>(bucket_bytes_);
  if (pending_bytes_ >= bucket_bytes_ || unreported == 0 || (near_end && pending_bytes_ >= min_flush_bytes_))
    flush(near_end ? CommLane::foreground : CommLane::background);
}

void GradReducer::flush(CommLane lane) {
  parts_.clear();
  if (shard_.sharded()) {
    std::sort(ready_chunks_.begin(), ready_chunks_.end());
    for (int64_t c : ready_chunks_)
      parts_.push_back(Tensor(static_cast<char*>(grads_.data) + c * shard_.chunk * dtype_size(grads_.dtype),
                              grads_.dtype, {shard_.chunk}));
    queued_chunks_ += static_cast<int64_t>(ready_chunks_.size());
    ready_chunks_.clear();
  } else {
    std::sort(pending_.begin(), pending_.end(),
              [](const ParamRange& a, const ParamRange& b) { return a.offset < b.offset; });
    // Adjacent ranges join (a layer's ranges join the next layer's: the layout is [kind][layer]).
    ParamRange run{0, 0};
    for (const ParamRange& r : pending_) {
      if (run.count > 0 && run.offset + run.count == r.offset) {
        run.count += r.count;
        continue;
      }
      if (run.count > 0) parts_.push_back(grads_.range(run.offset, run.count));
      run = r;
    }
    if (run.count > 0) parts_.push_back(grads_.range(run.offset, run.count));
    pending_.clear();
  }
  pending_bytes_ = 0;
  if (parts_.empty()) return;
  // The communication stream starts once the compute stream has written these gradients.
  be_.record_event(grads_written_, be_.compute_stream());
  be_.stream_wait_event(stream_, grads_written_);
  if (shard_.sharded()) comm_.reduce_scatter_group(parts_, stream_, lane);
  else comm_.all_reduce_group(parts_, stream_, lane);
}

void GradReducer::finish() {
  const int64_t P = grads_.numel();
  if (reported_elems_ == 0) {
    // The model reported nothing (no hook support): reduce the whole buffer now.
    const ParamRange everything{0, P};
    on_ready(std::span<const ParamRange>(&everything, 1));
  }
  flush();
  FT_CHECK(reported_elems_ == P, "the model reported ", reported_elems_, " of its ", P,
           " gradients as final (each must be reported once)");
  FT_CHECK(!shard_.sharded() || queued_chunks_ == shard_.chunks, "reduced ", queued_chunks_, " of ", shard_.chunks,
           " gradient chunks");
  std::swap(last_reports_, reports_);
  open_ = false;
  be_.record_event(reduced_, stream_);
  be_.stream_wait_event(be_.compute_stream(), reduced_);
}

}  // namespace ft
