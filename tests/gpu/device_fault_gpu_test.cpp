// A faulting kernel (a sticky CUDA error: every later call fails too) ends a run with the
// error's message and exit 3, on one GPU and on two: the releases that run while the error
// unwinds (the arena, streams, events, page-locked buffers) must not throw again, which
// ended the process in std::terminate with no message (and left the other ranks to wait out
// --comm-timeout). FT_TEST_DEVICE_FAULT_AT=K[@R] faults at step K (on rank R).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "backend/backend.h"
#include "cli/cli_util.h"

namespace ft {
namespace {
using namespace ft::testing;

const std::string kRun = "train --n-layer 2 --n-head 4 --n-embd 256 --seq-len 128 --global-batch-size 16 "
                         "--max-steps 4 --log-every 1 --eval-every 0 --eval-batches 1 --ckpt-every 0 ";

void expect_fault_reported(const CmdResult& r) {
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("internal error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cudaErrorIllegalAddress"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
}

TEST(GPU_DeviceFault, AStickyErrorEndsTheRunWithItsMessage) {
  if (cuda_devices() < 1) GTEST_SKIP() << "no CUDA device";
  const std::string d = temp_dir("device_fault_one");
  CmdResult r = run_fittrain(kRun + "--devices 1 --results-dir " + d, 300, "FT_TEST_DEVICE_FAULT_AT=2 ");
  expect_fault_reported(r);
  EXPECT_NE(r.output.find("step      1/4"), std::string::npos) << r.output;  // the step before ran
}

TEST(GPU_DeviceFault, AStickyErrorOnOneRankEndsEveryRankPromptly) {
  if (cuda_devices() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  const std::string d = temp_dir("device_fault_two");
  const auto start = std::chrono::steady_clock::now();
  CmdResult r = run_fittrain(kRun + "--devices 2 --comm-timeout 120 --results-dir " + d, 300,
                             "FT_TEST_DEVICE_FAULT_AT=2@1 ");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("cudaErrorIllegalAddress"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  EXPECT_LT(took, 100) << "the other rank waited out --comm-timeout\n" << r.output;
}

}  // namespace
}  // namespace ft
