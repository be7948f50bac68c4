// Arena: one allocation per device holding the whole memory plan.
//
// The training loop never allocates. Every tensor is arena.tensor(buffer, ...), a view at the
// buffer's planned offset. The arena also *verifies* the plan while the run goes: the
// caller announces the current phase of the step (set_phase), and asking for a buffer
// outside its planned lifetime is an error, because the planner may have given its bytes to
// another buffer at that time. The high-water mark is the end of the highest buffer touched,
// which is what `mem_peak_bytes` reports next to the planned total.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "plan/memory_plan.h"

namespace ft {

class Arena {
 public:
  Arena(Backend& backend, MemoryPlan plan);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  const MemoryPlan& plan() const { return plan_; }
  Backend& backend() const { return backend_; }
  void* base() const { return base_; }
  size_t size() const { return plan_.total_bytes; }

  void set_phase(int phase);
  int phase() const { return phase_; }

  // A view of buffer `name` with the given dtype and shape; the shape's bytes must fit the
  // buffer's planned bytes. Checks the lifetime against the current phase.
  Tensor tensor(const std::string& name, DType dtype, std::initializer_list<int64_t> dims);
  Tensor tensor(int index, DType dtype, std::initializer_list<int64_t> dims);
  // Raw pointer to a buffer that lives all step (persistent or workspace; no phase check).
  void* persistent_ptr(const std::string& name);
  bool has(const std::string& name) const { return index_.count(name) != 0; }

  size_t high_water_bytes() const { return high_water_; }
  void reset_high_water() { high_water_ = plan_.persistent_bytes; }

 private:
  void touch(int index);
  int index_of(const std::string& name) const;
  std::unordered_map<std::string, int> index_;
  Backend& backend_;
  MemoryPlan plan_;
  void* base_ = nullptr;
  int phase_ = 0;
  size_t high_water_ = 0;
};

}  // namespace ft
