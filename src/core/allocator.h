// DeviceAllocator: the one thing core/ needs from a device — a way to take and return one
// block of its memory. Backends implement it (backend/backend.h); the arena uses it, so
// core/ depends on no layer above it.
#pragma once
#include <cstddef>

namespace ft {

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // Throws ft::OutOfMemoryError when the device cannot give `bytes` (the caller may re-plan).
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;
};

}  // namespace ft
