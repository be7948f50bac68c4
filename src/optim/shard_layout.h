// ZeRO-1's layout: which elements of the flat parameter layout (P elements) each of `world`
// ranks owns, i.e. updates and holds optimizer state for.
//
// The layout, padded to total() = chunks * chunk elements, is cut into equal chunks; rank r
// owns piece r (chunk / world elements) of every chunk. Interleaved, not one contiguous
// range per rank, because that is what makes every collective balanced: a chunk's gradients
// are reduce-scattered (each rank receives its piece) as soon as the backward has written
// them, and its parameters all-gathered (each rank sends its piece) as soon as the update
// has written them, so every rank's links carry 1/world of every chunk. With one range per
// rank each bucket went to, and came from, one owner over one rank's links, and the
// embeddings' reduce after the backward and the whole gather before the forward were
// exposed (docs/PERFORMANCE.md, session 9).
//
// A rank's optimizer buffers hold its pieces back to back: local element j is chunk
// j / piece(), element j % piece() of this rank's piece. Pieces past P (the padding) belong
// to no parameter; every rank's buffers have the same length, padded.
#pragma once
#include <algorithm>
#include <cstdint>

namespace ft {

struct OptimizerShard {
  int64_t num_params = 0;  // P, the whole flat layout
  int world = 1;           // shards (1: this rank holds everything)
  int rank = 0;            // whose pieces these are
  int64_t chunk = 0;       // elements of each chunk (a multiple of world)
  int64_t chunks = 1;
  int64_t padded = 0;      // every rank's buffer length: chunks * chunk / world

  bool sharded() const { return world > 1; }
  int64_t piece() const { return chunk / world; }
  int64_t total() const { return chunks * chunk; }  // the padded layout (P when not sharded)
  // Where local element `local` of rank `r`'s buffers sits in the flat layout.
  int64_t global_of(int r, int64_t local) const {
    const int64_t p = piece();
    return local / p * chunk + r * p + local % p;
  }
  // Calls fn(global, local, count) for each of this rank's pieces, cut at P (pieces wholly
  // past P are skipped): the real parameters this rank owns, in local order.
  template <class Fn>
  void for_each_piece(Fn fn) const {
    const int64_t p = piece();
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t g = c * chunk + rank * p;
      const int64_t n = std::min(p, num_params - g);
      if (n > 0) fn(g, c * p, n);
    }
  }
};

// The chunk the layout aims for, in elements: 4 Mi (8 MiB of bf16 gradients), small enough
// that the backward's last chunks are few and the forward's first are ready early, large
// enough that each collective moves megabytes. FT_SHARD_CHUNK=N sets it (tests use tiny
// ones so that small models get several chunks).
int64_t shard_chunk_target();

// The layout of P elements over `world` ranks, seen from `rank`. One chunk when P fits the
// target (then rank r owns [r * ceil(P / world), ...) as a contiguous range); else chunks
// of a multiple of world * 256 elements (fewer for targets under that, at least 8), so every
// piece starts 512-byte aligned for bf16.
OptimizerShard shard_layout(int64_t num_params, int world, int rank, int64_t chunk_target);

}  // namespace ft
