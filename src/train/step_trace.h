// StepTrace: a device trace (backend/device_trace.h) of a window of training steps, asked for
// through the environment, for measurements: FT_TRACE=PREFIX writes PREFIX.rank<R>.jsonl on
// every rank for steps FT_TRACE_STEPS=FROM:TO (default 20:24, inclusive), with a "step" mark
// as each step starts and marks where the host waits (bench/trace_summary.py reads them).
#pragma once
#include <cstdint>
#include <string>

#include "backend/backend.h"

namespace ft {

class StepTrace {
 public:
  // Reads the environment; UserError for a malformed FT_TRACE_STEPS or a build without CUPTI.
  StepTrace(Backend& be, int rank);
  // A run that ends inside the window (a stop, an error, fewer steps) writes what it recorded.
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;
  bool enabled() const { return !prefix_.empty(); }
  // Around training step `step` (1-based: the step about to run / just run).
  void begin_step(int64_t step);
  void end_step(int64_t step);

 private:
  Backend& be_;
  std::string prefix_, path_;
  int64_t from_ = 20, to_ = 24;
};

}  // namespace ft
