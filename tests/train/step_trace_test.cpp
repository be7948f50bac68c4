// StepTrace: FT_TRACE and FT_TRACE_STEPS are read once, bad values and a backend without a
// device trace are refused naming the variable, and without FT_TRACE nothing happens. (The
// trace itself is CUDA's: docs/PERFORMANCE.md has traces from the device.)
#include "train/step_trace.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/device_trace.h"
#include "core/error.h"

namespace ft {
namespace {

struct EnvGuard {
  EnvGuard(const char* trace, const char* steps) {
    if (trace) setenv("FT_TRACE", trace, 1);
    else unsetenv("FT_TRACE");
    if (steps) setenv("FT_TRACE_STEPS", steps, 1);
    else unsetenv("FT_TRACE_STEPS");
  }
  ~EnvGuard() {
    unsetenv("FT_TRACE");
    unsetenv("FT_TRACE_STEPS");
  }
};

std::string error_of(Backend& be, const char* trace, const char* steps) {
  EnvGuard env(trace, steps);
  try {
    StepTrace t(be, 0);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(StepTrace, OffWithoutTheVariableAndRefusedWhereItCannotRecord) {
  auto be = make_cpu_backend();
  {
    EnvGuard env(nullptr, "3:4");
    StepTrace t(*be, 0);
    EXPECT_FALSE(t.enabled());
    t.begin_step(3);  // nothing to do
    t.end_step(4);
    EXPECT_FALSE(device_trace::recording());
  }
  for (const char* bad : {"5:3", "0:2", "4", "a:b", "2:3x", "-1:2"}) {
    const std::string e = error_of(*be, "/tmp/ft_trace_test", bad);
    EXPECT_NE(e.find("FT_TRACE_STEPS"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find(bad), std::string::npos) << e;
  }
  // Well-formed, but the CPU backend has no device trace.
  const std::string e = error_of(*be, "/tmp/ft_trace_test", "2:4");
  EXPECT_NE(e.find("FT_TRACE"), std::string::npos) << e;
  EXPECT_NE(e.find("CUDA"), std::string::npos) << e;
}

}  // namespace
}  // namespace ft
