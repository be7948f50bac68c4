#include "optim/shard_layout.h"

#include <cstdlib>

#include "core/error.h"

namespace ft {

int64_t shard_chunk_target() {
  if (const char* v = std::getenv("FT_SHARD_CHUNK"); v && *v) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    FT_USER_CHECK(*end == 0 && n >= 1, "FT_SHARD_CHUNK must be a positive number of elements, got '", v, "'");
    return n;
  }
  return int64_t{4} << 20;
}

OptimizerShard shard_layout(int64_t num_params, int world, int rank, int64_t chunk_target) {
  FT_CHECK(num_params >= 0 && world >= 1 && rank >= 0 && (world == 1 || rank < world) && chunk_target >= 1,
           "shard_layout(", num_params, ", ", world, ", ", rank, ", ", chunk_target, ")");
  OptimizerShard sh;
  sh.num_params = num_params;
  sh.world = world;
  sh.rank = world == 1 ? 0 : rank;
  const int64_t P = std::max<int64_t>(num_params, 1);
  if (world == 1 || P <= chunk_target) {
    sh.chunks = 1;
    sh.chunk = (P + world - 1) / world * world;
  } else {
    sh.chunks = (P + chunk_target - 1) / chunk_target;
    // Pieces of whole 256-element runs (8 at least, one 16-byte pack of bf16, when a small
    // target asks for tiny chunks: tests).
    int64_t align = 256;
    while (align > 8 && align * world > chunk_target) align /= 2;
    const int64_t unit = int64_t{world} * align;
    sh.chunk = ((P + sh.chunks - 1) / sh.chunks + unit - 1) / unit * unit;
    sh.chunks = (P + sh.chunk - 1) / sh.chunk;  // rounding up may leave the last chunk empty
  }
  sh.padded = sh.chunks * sh.chunk / world;
  return sh;
}

}  // namespace ft
