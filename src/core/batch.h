// Batch: one micro-batch of samples on the host, as named fields. A task reads samples into
// fields (tokens, targets, images, item ids, ...), the model names the fields it consumes,
// and neither knows the other's types: this struct is the whole contract between them.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace ft {

// One field of a sample: `per_sample` elements of `dtype` (e.g. tokens: i32 x T).
struct FieldSpec {
  std::string name;
  DType dtype = DType::i32;
  int64_t per_sample = 0;
  size_t sample_bytes() const { return static_cast<size_t>(per_sample) * dtype_size(dtype); }
};

struct BatchField {
  FieldSpec spec;
  const void* data = nullptr;  // [size, per_sample], contiguous
};

struct Batch {
  int64_t size = 0;  // samples
  std::vector<BatchField> fields;

  const BatchField& field(std::string_view name) const {
    for (const auto& f : fields)
      if (f.spec.name == name) return f;
    FT_CHECK(false, "batch has no field '", name, "'");
    return fields.front();
  }
  template <class T> const T* data(std::string_view name) const {
    const BatchField& f = field(name);
    FT_CHECK(f.spec.dtype == dtype_of<T>(), "batch field '", name, "' is ", dtype_name(f.spec.dtype));
    return static_cast<const T*>(f.data);
  }
};

// Bytes of one sample over all fields.
inline size_t sample_bytes(const std::vector<FieldSpec>& fields) {
  size_t n = 0;
  for (const auto& f : fields) n += f.sample_bytes();
  return n;
}

// Rank `rank`'s share of a global batch over `world` ranks: global / world, and one more for
// the first global % world ranks (a global batch need not divide by the ranks).
// Rank 0's share is the largest.
inline uint64_t rank_share(uint64_t global, int world, int rank) {
  const uint64_t w = static_cast<uint64_t>(world), r = static_cast<uint64_t>(rank);
  return global / w + (r < global % w ? 1 : 0);
}
// Where rank `rank`'s share starts within the global batch: the ranks take consecutive runs.
inline uint64_t rank_first(uint64_t global, int world, int rank) {
  const uint64_t w = static_cast<uint64_t>(world), r = static_cast<uint64_t>(rank);
  return r * (global / w) + std::min(r, global % w);
}
// The shares as people read them: "2 x 8", or "1 x 17 + 1 x 16" when the batch does not divide.
inline std::string rank_shares_text(uint64_t global, int world) {
  const uint64_t w = static_cast<uint64_t>(world), q = global / w, big = global % w;
  if (big == 0) return std::to_string(w) + " x " + std::to_string(q);
  return std::to_string(big) + " x " + std::to_string(q + 1) + " + " + std::to_string(w - big) + " x " + std::to_string(q);
}

}  // namespace ft
