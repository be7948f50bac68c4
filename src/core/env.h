// Measurement knobs read from the environment (FT_BUCKET_MB, FT_GATHER_CHUNKS,
// FT_NCCL_BACKGROUND_CTAS, ...): one parser, so each refuses a bad value the same way.
#pragma once
#include <cstdlib>

#include "core/error.h"

namespace ft {

// The variable `name` as a decimal integer in [lo, hi]; `fallback` when it is unset or empty;
// a UserError naming it and the range otherwise ("FT_X must be 1..8, got 'abc'").
inline long env_int_in(const char* name, long fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  FT_USER_CHECK(*end == 0 && n >= lo && n <= hi, name, " must be ", lo, "..", hi, ", got '", v, "'");
  return n;
}

}  // namespace ft
