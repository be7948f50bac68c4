#include "train/step_trace.h"

#include <cstdio>
#include <cstdlib>

#include "backend/device_trace.h"
#include "core/error.h"

namespace ft {

StepTrace::StepTrace(Backend& be, int rank) : be_(be) {
  const char* p = std::getenv("FT_TRACE");
  if (!p || !*p) return;
  if (const char* w = std::getenv("FT_TRACE_STEPS")) {
    long long a = 0, b = 0;
    char tail = 0;
    FT_USER_CHECK(std::sscanf(w, "%lld:%lld%c", &a, &b, &tail) == 2 && a >= 1 && b >= a,
                  "FT_TRACE_STEPS must be FROM:TO with 1 <= FROM <= TO, got '", w, "'");
    from_ = a;
    to_ = b;
  }
  FT_USER_CHECK(be.device() == DeviceKind::cuda && device_trace::available(),
                "FT_TRACE: a device trace needs the CUDA backend of a build with CUPTI");
  prefix_ = p;
  path_ = prefix_ + ".rank" + std::to_string(rank) + ".jsonl";
}

StepTrace::~StepTrace() {
  if (!enabled() || !device_trace::recording()) return;
  try {
    const int64_t n = device_trace::stop(path_);
    std::fprintf(stderr, "fittrain: device trace cut short (%lld records) written to %s\n", static_cast<long long>(n),
                 path_.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fittrain: device trace not written: %s\n", e.what());
  }
}

void StepTrace::begin_step(int64_t step) {
  if (!enabled() || step < from_ || step > to_) return;
  if (step == from_) {
    be_.synchronize();  // the trace starts with an idle device, not mid-step
    device_trace::start();
  }
  device_trace::mark("step", step);
}

void StepTrace::end_step(int64_t step) {
  if (!enabled() || step != to_ || !device_trace::recording()) return;
  device_trace::mark("end", step);
  const int64_t n = device_trace::stop(path_);
  std::fprintf(stderr, "fittrain: device trace of steps %lld..%lld (%lld records) written to %s\n",
               static_cast<long long>(from_), static_cast<long long>(to_), static_cast<long long>(n), path_.c_str());
}

}  // namespace ft
