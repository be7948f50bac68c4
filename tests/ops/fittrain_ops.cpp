// fittrain_ops: runs the op table (tests/ops/op_table.h) from the command line, mainly for
// perf tables on a device machine:
//   fittrain_ops --mode perf --backend cuda --precision bf16 [--op NAME] [--reps 10]
//   fittrain_ops --mode test --backend cuda --precision fp16 [--op NAME]
//   fittrain_ops --mode grad [--op NAME]
// Prints one line per shape (errors, or ms and TFLOP/s / GB/s); exit 1 if any check failed,
// 2 on bad arguments.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ops/op_table.h"

using namespace ft;
using namespace ft::ops;

static int usage() {
  std::fprintf(stderr,
               "usage: fittrain_ops [--mode test|grad|perf] [--backend cpu|cuda]\n"
               "                    [--precision fp32|bf16|fp16] [--op NAME] [--reps N] [--list]\n");
  return 2;
}

int main(int argc, char** argv) {
  std::string mode = "test", backend = "cpu", prec = "fp32", op;
  int reps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--mode") mode = val();
    else if (a == "--backend") backend = val();
    else if (a == "--precision") prec = val();
    else if (a == "--op") op = val();
    else if (a == "--reps") reps = std::max(1, std::atoi(val().c_str()));
    else if (a == "--list") {
      for (const OpCase& c : op_table()) std::printf("%s\n", c.name.c_str());
      return 0;
    } else return usage();
  }
  if (mode != "test" && mode != "grad" && mode != "perf") return usage();
  if (backend != "cpu" && backend != "cuda") return usage();
  const DeviceKind dev = backend == "cuda" ? DeviceKind::cuda : DeviceKind::cpu;
  Precision p;
  if (prec == "fp32") p = Precision::fp32;
  else if (prec == "bf16") p = Precision::bf16;
  else if (prec == "fp16") p = Precision::fp16;
  else return usage();
  if (!op.empty() && !find_op(op)) {
    std::fprintf(stderr, "fittrain_ops: no op %s (--list shows them)\n", op.c_str());
    return 2;
  }
  if (dev == DeviceKind::cuda && !cuda_available()) {
    std::fprintf(stderr, "fittrain_ops: no CUDA device\n");
    return 2;
  }
  if (mode == "perf") {
    auto be = make_backend(dev);
    std::printf("# fittrain_ops perf: %s, %s, median of 3 x %d calls\n", be->describe().c_str(),
                precision_name(p), reps);
  }
  int passed = 0, failed = 0, skipped = 0;
  for (const OpCase& c : op_table()) {
    if (!op.empty() && c.name != op) continue;
    const Result r = mode == "test" ? run_test(c, dev, p)
                     : mode == "grad" ? run_grad(c)
                                      : run_perf(c, dev, p, reps);
    std::fflush(stdout);
    if (r.skipped) {
      ++skipped;
      if (mode != "grad") std::printf("%-26s skipped: %s\n", c.name.c_str(), r.skip_reason.c_str());
      continue;
    }
    for (const std::string& n : r.notes) std::printf("%s\n", n.c_str());
    for (const std::string& f : r.failures) std::printf("FAILED %s\n", f.c_str());
    (r.failures.empty() ? passed : failed)++;
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
