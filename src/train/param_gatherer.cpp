#include "train/param_gatherer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/env.h"
#include "core/error.h"

namespace ft {

bool ParamGatherer::enabled_by_env() {
  const char* v = std::getenv("FT_ZERO_OVERLAP");
  if (!v || !*v) return true;
  FT_USER_CHECK(std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0, "FT_ZERO_OVERLAP must be 0 or 1, got '", v,
                "'");
  return v[0] == '1';
}

StreamPriority ParamGatherer::update_priority_from_env() {
  const char* v = std::getenv("FT_UPDATE_PRIORITY");
  if (!v || !*v || std::strcmp(v, "low") == 0) return StreamPriority::low;
  FT_USER_CHECK(std::strcmp(v, "normal") == 0, "FT_UPDATE_PRIORITY must be low or normal, got '", v, "'");
  return StreamPriority::normal;
}

int64_t ParamGatherer::group_chunks_from_env() {
  return env_int_in("FT_GATHER_CHUNKS", 4, 1, 1024);
}

ParamGatherer::ParamGatherer(Backend& be, Communicator& comm, Tensor params, const OptimizerShard& shard,
                             StreamHandle stream, int64_t group_chunks)
    : be_(be),
      comm_(comm),
      params_(params),
      shard_(shard),
      stream_(stream),
      group_chunks_(group_chunks),
      unnamed_(shard.num_params) {
  FT_CHECK(shard_.sharded() && params_.numel() == shard_.total() && group_chunks_ >= 1,
           "ParamGatherer needs ZeRO-1's padded parameter buffer");
  update_stream_ = be_.create_stream(update_priority_from_env());
  for (int64_t c = 0; c < shard_.chunks; ++c) {  // layout order until a forward has named everything
    order_.push_back(c);
    pos_.push_back(c);
  }
  control_ready_ = be_.create_event();
  for (int64_t g = 0; g < groups(); ++g) {
    updated_.push_back(be_.create_event());
    gathered_.push_back(be_.create_event());
  }
}

ParamGatherer::~ParamGatherer() {
  // The update stream's kernels write the parameters and the optimizer state: let them
  // finish before the stream goes. A device already failing (its error reported elsewhere)
  // must not turn this destructor into a terminate.
  try {
    be_.synchronize_stream(update_stream_);
  } catch (const std::exception&) {
  }
  for (EventHandle e : gathered_) be_.destroy_event(e);
  for (EventHandle e : updated_) be_.destroy_event(e);
  be_.destroy_event(control_ready_);
  be_.destroy_stream(update_stream_);
}

void ParamGatherer::queue_gather(int64_t g) {
  const size_t i = static_cast<size_t>(g);
  be_.record_event(updated_[i], update_stream_);
  be_.stream_wait_event(stream_, updated_[i]);
  chunks_.clear();
  for (int64_t p = g * group_chunks_; p < std::min(shard_.chunks, (g + 1) * group_chunks_); ++p)
    chunks_.push_back(params_.range(order_[static_cast<size_t>(p)] * shard_.chunk, shard_.chunk));
  comm_.all_gather_group(chunks_, stream_);
  be_.record_event(gathered_[i], stream_);
}

void ParamGatherer::learn(const ParamRange& r) {
  for (int64_t c = r.offset / shard_.chunk; c <= (r.offset + r.count - 1) / shard_.chunk; ++c)
    if (std::find(first_need_.begin(), first_need_.end(), c) == first_need_.end()) first_need_.push_back(c);
  // Merge [r.offset, end) into the named ranges; count what it adds.
  int64_t b = r.offset, e = r.offset + r.count;
  auto it = named_.upper_bound(b);
  if (it != named_.begin() && std::prev(it)->second >= b) --it;
  int64_t had = 0;
  while (it != named_.end() && it->first <= e) {
    had += it->second - it->first;
    b = std::min(b, it->first);
    e = std::max(e, it->second);
    it = named_.erase(it);
  }
  named_[b] = e;
  unnamed_ -= (e - b) - had;
  if (!covered()) return;
  // Every parameter named: the order is the chunks' first need (every chunk holds parameters,
  // so each was named). Used from the next round on; this one (if any) keeps its order.
  FT_CHECK(static_cast<int64_t>(first_need_.size()) == shard_.chunks, "the forward named ", first_need_.size(), " of ",
           shard_.chunks, " chunks");
  if (in_flight_) wait_all();
  order_ = first_need_;
  for (size_t p = 0; p < order_.size(); ++p) pos_[static_cast<size_t>(order_[p])] = static_cast<int64_t>(p);
}

void ParamGatherer::on_needed(std::span<const ParamRange> ranges) {
  int64_t last = -1;  // the latest position in order_ of a chunk these ranges read
  for (const ParamRange& r : ranges) {
    if (r.count <= 0) continue;
    FT_CHECK(r.offset >= 0 && r.offset + r.count <= shard_.num_params, "params_needed: [", r.offset, ", +", r.count,
             ") outside ", shard_.num_params);
    if (!covered()) learn(r);
    for (int64_t c = r.offset / shard_.chunk; c <= (r.offset + r.count - 1) / shard_.chunk; ++c)
      last = std::max(last, pos_[static_cast<size_t>(c)]);
  }
  if (last < 0) return;
  const int64_t group = last / group_chunks_;
  if (!in_flight_ || group <= waited_upto_) return;
  if (!covered()) {
    wait_all();
    return;
  }
  be_.stream_wait_event(be_.compute_stream(), gathered_[static_cast<size_t>(group)]);
  waited_upto_ = group;
  if (waited_upto_ == groups() - 1) in_flight_ = false;
}

void ParamGatherer::wait_all() {
  if (!in_flight_) return;
  be_.stream_wait_event(be_.compute_stream(), gathered_.back());
  in_flight_ = false;
}

}  // namespace ft
