// The CPU backend: fp32 kernels with OpenMP, matrix products through OpenBLAS.
// It is also the reference every other backend is tested against.
#pragma once
#include <cstddef>
#include <memory>

#include "backend/backend.h"

namespace ft {
std::unique_ptr<Backend> make_cpu_backend();

namespace testing {
// Test hook: when non-zero, the CPU backend reports at most this much free memory and fails
// larger allocations with OutOfMemoryError, as a device whose memory was taken would.
extern size_t cpu_memory_limit_bytes;
}  // namespace testing
}  // namespace ft
