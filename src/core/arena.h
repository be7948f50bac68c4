// Arena: one allocation per device holding the whole memory plan.
//
// The training loop never allocates. Every tensor is arena.tensor(buffer, ...), a view at the
// buffer's planned offset. The arena also *verifies* the plan while the run goes: the
// caller announces the current phase of the step (set_phase), and asking for a buffer
// outside its planned lifetime is an error, because the planner may have given its bytes to
// another buffer at that time. The high-water mark is the end of the highest buffer touched,
// which is what `mem_peak_bytes` reports next to the planned total.
//
// The arena knows slots (name, offset, bytes, lifetime), not how they were chosen: plan/
// places buffers and hands the result over as an ArenaLayout (plan/memory_plan.h:
// arena_layout()), so core/ imports nothing above it.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/tensor.h"

namespace ft {

constexpr size_t kArenaAlignment = 256;  // cuBLASLt/cuDNN want >= 16 B; 256 keeps rows aligned
constexpr size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

struct ArenaSlot {
  std::string name;
  size_t offset = 0;
  size_t bytes = 0;
  int first = 0, last = 0;  // lifetime in phases, inclusive
  bool pinned = false;      // lives the whole run (parameters, optimizer state, workspace)
};

struct ArenaLayout {
  std::vector<ArenaSlot> slots;  // index = the buffer's id in the plan
  size_t total_bytes = 0;        // the allocation
  size_t persistent_bytes = 0;   // the pinned prefix
  int num_phases = 0;
};

class Arena {
 public:
  Arena(DeviceAllocator& allocator, ArenaLayout layout);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  const ArenaLayout& layout() const { return layout_; }
  void* base() const { return base_; }
  size_t size() const { return layout_.total_bytes; }

  void set_phase(int phase);
  int phase() const { return phase_; }

  // A view of buffer `id` (its index in the plan) with the given dtype and shape; the shape's
  // bytes must fit the buffer's planned bytes. Checks the lifetime against the current phase.
  Tensor tensor(int id, DType dtype, std::initializer_list<int64_t> dims);
  // Raw pointer to a pinned buffer (no phase check).
  void* pinned_ptr(int id);
  int find(const std::string& name) const;  // -1 when absent (tests, tools)

  size_t high_water_bytes() const { return high_water_; }
  void reset_high_water() { high_water_ = layout_.persistent_bytes; }

 private:
  void touch(int id);
  DeviceAllocator& allocator_;
  ArenaLayout layout_;
  void* base_ = nullptr;
  int phase_ = 0;
  size_t high_water_ = 0;
};

}  // namespace ft
