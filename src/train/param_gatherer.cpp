#include "train/param_gatherer.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace ft {

bool ParamGatherer::enabled_by_env() {
  const char* v = std::getenv("FT_ZERO_PREFETCH");
  if (!v || !*v) return false;
  FT_USER_CHECK(std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0, "FT_ZERO_PREFETCH must be 0 or 1, got '", v,
                "'");
  return v[0] == '1';
}

ParamGatherer::ParamGatherer(Backend& be, Communicator& comm, Tensor params, int64_t num_params, int64_t shard_elems)
    : be_(be), comm_(comm), params_(params), num_params_(num_params), shard_elems_(shard_elems) {
  FT_CHECK(shard_elems_ > 0, "ParamGatherer needs ZeRO-1 shards");
  stream_ = be_.create_stream(StreamPriority::normal);
  updated_ = be_.create_event();
}

ParamGatherer::~ParamGatherer() {
  for (EventHandle e : gathered_) be_.destroy_event(e);
  be_.destroy_event(updated_);
  be_.destroy_stream(stream_);
}

void ParamGatherer::queue(std::span<const ParamRange> ranges) {
  parts_.clear();
  // Each piece from the rank whose shard holds it (it updated those parameters).
  for (const ParamRange& r : ranges) append_pieces_by_owner(params_, r.offset, r.count, shard_elems_, parts_);
  comm_.broadcast_group(parts_, stream_);
}

void ParamGatherer::start() {
  wait_all();  // a round whose groups the forward did not all name (never reorder across rounds)
  be_.record_event(updated_, be_.compute_stream());
  be_.stream_wait_event(stream_, updated_);
  const size_t needed_events = groups_.size() + 1;
  while (gathered_.size() < needed_events) gathered_.push_back(be_.create_event());
  // Everything not announced by the last forward goes first, as one group: the groups cover
  // the parameters only when the model reports all of them.
  int64_t announced = 0;
  for (const auto& g : groups_)
    for (const ParamRange& r : g) announced += r.count;
  all_at_once_ = announced != num_params_;
  if (all_at_once_) {
    const ParamRange everything{0, comm_.world_size() * shard_elems_};
    queue(std::span<const ParamRange>(&everything, 1));
    be_.record_event(gathered_.back(), stream_);
  } else {
    for (size_t g = 0; g < groups_.size(); ++g) {
      queue(groups_[g]);
      be_.record_event(gathered_[g], stream_);
    }
    // The padding past the last parameter (no group names it): every byte a rank owns reaches
    // the others, exactly as one all-gather would have sent it.
    const int64_t padded = comm_.world_size() * shard_elems_;
    if (padded > num_params_) {
      const ParamRange tail{num_params_, padded - num_params_};
      queue(std::span<const ParamRange>(&tail, 1));
    }
    be_.record_event(gathered_.back(), stream_);
  }
  waited_.assign(gathered_.size(), false);
  in_flight_ = true;
}

void ParamGatherer::on_needed(std::span<const ParamRange> ranges) {
  if (ranges.empty()) return;
  auto it = group_of_.find(ranges[0].offset);
  if (it == group_of_.end()) {
    // Learned for the next rounds; this round (if one is in flight) must not guess.
    group_of_[ranges[0].offset] = groups_.size();
    groups_.emplace_back(ranges.begin(), ranges.end());
    wait_all();
    return;
  }
  if (!in_flight_) return;
  if (all_at_once_) {
    wait_all();
    return;
  }
  const size_t g = it->second;
  if (g < waited_.size() && !waited_[g]) {
    be_.stream_wait_event(be_.compute_stream(), gathered_[g]);
    waited_[g] = true;
  }
}

void ParamGatherer::wait_all() {
  if (!in_flight_) return;
  be_.stream_wait_event(be_.compute_stream(), gathered_.back());
  in_flight_ = false;
}

int UpdateGather::parts_from_env() {
  const char* v = std::getenv("FT_ZERO_PARTS");
  if (!v || !*v) return 1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  FT_USER_CHECK(*end == 0 && n >= 1 && n <= 64, "FT_ZERO_PARTS must be 1..64, got '", v, "'");
  return static_cast<int>(n);
}

UpdateGather::UpdateGather(Backend& be, Communicator& comm, Tensor params, int64_t shard_elems, int parts)
    : be_(be), comm_(comm), params_(params), shard_elems_(shard_elems) {
  FT_CHECK(shard_elems_ > 0 && parts >= 1, "UpdateGather: shards of ", shard_elems_, ", ", parts, " parts");
  // Parts of whole 256-element runs: the broadcasts' byte ranges stay 16-byte aligned.
  part_elems_ = std::max<int64_t>(256, (shard_elems_ + parts - 1) / parts + 255) / 256 * 256;
  stream_ = be_.create_stream(StreamPriority::normal);
  updated_ = be_.create_event();
  gathered_ = be_.create_event();
}

UpdateGather::~UpdateGather() {
  be_.destroy_event(gathered_);
  be_.destroy_event(updated_);
  be_.destroy_stream(stream_);
}

void UpdateGather::queue_gather(int64_t part_begin, int64_t part_count) {
  // The side stream waits, device-side, for the update queued so far (this part's included).
  be_.record_event(updated_, be_.compute_stream());
  be_.stream_wait_event(stream_, updated_);
  parts_.clear();
  for (int r = 0; r < comm_.world_size(); ++r)
    parts_.push_back(ReducePart{params_.range(r * shard_elems_ + part_begin, part_count), r});
  comm_.broadcast_group(parts_, stream_);
}

void UpdateGather::finish() {
  be_.record_event(gathered_, stream_);
  be_.stream_wait_event(be_.compute_stream(), gathered_);
}

}  // namespace ft
