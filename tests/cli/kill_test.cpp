// SIGKILL at random moments, most of them inside checkpoint writes (a checkpoint every step
// of a small model, so writing dominates the run): after every kill, --resume auto finds a
// valid checkpoint (once the first was written), the run continues from it, and the folder
// never holds a half-written checkpoint under a real name.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "cli/cli_util.h"
#include "train/checkpoint_dir.h"

namespace ft {
namespace {

using namespace ft::testing;

pid_t start_training(const std::string& dir) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("FT_TEST_SLOW_CHECKPOINT_MS", "20", 1);  // writes take a while: kills land inside them
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    execl(FITTRAIN_BINARY, FITTRAIN_BINARY, "train", "--n-layer", "2", "--n-embd", "64", "--n-head", "2", "--seq-len",
          "32", "--global-batch-size", "4", "--results-dir", dir.c_str(), "--resume", "auto", "--max-steps", "100000",
          "--log-every", "1000", "--eval-every", "0", "--ckpt-every", "1", "--keep-checkpoints", "2", nullptr);
    _exit(127);
  }
  return pid;
}

bool has_tmp(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(checkpoint_dir(dir), ec))
    if (e.path().extension() == ".tmp") return true;
  return false;
}

TEST(Kill9, ResumeAlwaysFindsAValidCheckpoint) {
  const std::string dir = temp_dir("kill9");
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> delay_ms(0, 400);
  int64_t last_step = -1;
  int trials = 0, with_checkpoint = 0, mid_write = 0;
  for (int trial = 0; trial < 25; ++trial) {
    const pid_t pid = start_training(dir);
    ASSERT_GT(pid, 0);
    // Start-up (planning, data) takes a machine-dependent while: wait until this process is
    // checkpointing (a .tmp is being written), then kill it a random moment later.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!has_tmp(dir) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ++trials;
    if (has_tmp(dir)) ++mid_write;  // a .tmp left behind: this kill landed inside a write
    // (the next run removes it as stale; removed here so the wait above sees only new writes)
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(checkpoint_dir(dir), ec))
      if (e.path().extension() == ".tmp") std::filesystem::remove(e.path(), ec);
    std::vector<std::string> warnings;
    auto latest = latest_valid_checkpoint(checkpoint_dir(dir), &warnings);
    if (!latest) {
      // only before the very first checkpoint was ever completed
      EXPECT_EQ(last_step, -1) << "trial " << trial << ": a valid checkpoint was lost";
      continue;
    }
    ++with_checkpoint;
    EXPECT_GE(latest->step, last_step) << "trial " << trial << ": resume went backwards";
    last_step = latest->step;
  }
  EXPECT_GE(with_checkpoint, trials / 2) << "too few trials got as far as a checkpoint to mean anything";
  EXPECT_GE(mid_write, trials / 5) << "too few kills landed inside a checkpoint write to mean anything";
  std::printf("%d kills, %d inside a checkpoint write, newest valid checkpoint: step %lld\n", trials, mid_write,
              static_cast<long long>(last_step));
  // The run continues from what the kills left, to a clean end.
  CmdResult r = run_fittrain("train --n-layer 2 --n-embd 64 --n-head 2 --seq-len 32 --global-batch-size 4 --results-dir " +
                             dir + " --resume auto --max-steps " + std::to_string(last_step + 2) +
                             " --log-every 1 --eval-every 0 --ckpt-every 1 --keep-checkpoints 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed    from"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ft
