// GoogleTest driver of the op table (tests/ops/op_table.h): one test per case and mode,
// registered at start-up so each has a plain name ctest can select:
//   OpTable.<op>_test   the CPU backend against the CPU reference (bitwise: it is the same
//                       code, so this checks that outputs are written and runs repeat)
//   OpTable.<op>_grad   the CPU backward against central finite differences
//   GPU_OpTable.<op>_{fp32,bf16,fp16}   the CUDA backend against the CPU reference; these
//                       skip without a device, like every GPU_* test (label "gpu")
#include <gtest/gtest.h>

#include "ops/op_table.h"

namespace ft::ops {
namespace {

void report(const Result& r) {
  if (r.skipped) GTEST_SKIP() << r.skip_reason;
  for (const std::string& n : r.notes) std::printf("  %s\n", n.c_str());
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
}

class OpTableTest : public ::testing::Test {
 public:
  explicit OpTableTest(std::function<Result()> f) : f_(std::move(f)) {}
  void TestBody() override { report(f_()); }

 private:
  std::function<Result()> f_;
};

template <class F> void add(const char* suite, const std::string& name, F f) {
  ::testing::RegisterTest(suite, name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                          [f]() -> ::testing::Test* { return new OpTableTest(f); });
}

const bool registered = [] {
  for (const OpCase& c : op_table()) {
    const OpCase* p = &c;  // the table is a static that outlives every test
    add("OpTable", c.name + "_test", [p] { return run_test(*p, DeviceKind::cpu, Precision::fp32); });
    if (c.grad.forward) add("OpTable", c.name + "_grad", [p] { return run_grad(*p); });
    for (Precision pr : {Precision::fp32, Precision::bf16, Precision::fp16})
      add("GPU_OpTable", c.name + "_" + precision_name(pr),
          [p, pr] { return run_test(*p, DeviceKind::cuda, pr); });
  }
  return true;
}();

}  // namespace
}  // namespace ft::ops
