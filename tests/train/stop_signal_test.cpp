// A signal that arrives while a single-process run is starting (planning, data, weights)
// stops it before its first step with exit 130 and nothing new saved; a resumed run stops
// before its next step with its checkpoints as they were. A signal recorded by one run does
// not stop the next run in the same process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>

#include "train/checkpoint_dir.h"
#include "train/config.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace ft {
namespace {

struct HookGuard {
  ~HookGuard() { testing::start_done = nullptr; }
};

RunConfig tiny_run(const std::string& dir, int64_t steps) {
  RunConfig rc;
  rc.device = "cpu";
  rc.n_layer = 1;
  rc.n_head = 1;
  rc.n_embd = 32;
  rc.seq_len = 32;
  rc.global_batch_size = 4;
  rc.max_steps = steps;
  rc.eval_every = 0;
  rc.eval_batches = 1;
  rc.ckpt_every = 0;
  rc.num_workers = 0;
  rc.results_dir = dir;
  return rc;
}

std::vector<int64_t> saved_steps(const std::string& results) {
  std::vector<int64_t> steps;
  for (const CheckpointFile& f : list_checkpoints(checkpoint_dir(results))) steps.push_back(f.step);
  return steps;
}

// run_train with SIGTERM raised once the start is done; its exit status and what it printed.
std::pair<int, std::string> run_signalled_at_start(const RunConfig& rc) {
  testing::start_done = [] { std::raise(SIGTERM); };
  ::testing::internal::CaptureStdout();
  const int status = run_train(rc);
  std::fflush(stdout);
  const std::string out = ::testing::internal::GetCapturedStdout();
  testing::start_done = nullptr;
  return {status, out};
}

TEST(StopSignal, ASignalDuringTheStartStopsBeforeTheFirstStepAndSavesNothing) {
  HookGuard guard;
  const std::string dir = "/tmp/fittrain_test_stop_start_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  auto [status, out] = run_signalled_at_start(tiny_run(dir + "/a", 3));
  EXPECT_EQ(status, 130) << out;
  EXPECT_NE(out.find("signal " + std::to_string(SIGTERM) + " during the start: stopping before step 1"),
            std::string::npos) << out;
  EXPECT_EQ(out.find("step      1/"), std::string::npos) << out;
  EXPECT_TRUE(saved_steps(dir + "/a").empty());

  // The signal is forgotten by the next run: it trains to its end and saves step 3.
  ASSERT_EQ(run_train(tiny_run(dir + "/b", 3)), 0);
  ASSERT_EQ(saved_steps(dir + "/b"), std::vector<int64_t>{3});

  // A resumed run stops before its next step; its checkpoint stays the only one.
  RunConfig more = tiny_run(dir + "/b", 6);
  more.resume = "auto";
  std::tie(status, out) = run_signalled_at_start(more);
  EXPECT_EQ(status, 130) << out;
  EXPECT_NE(out.find("during the start: stopping before step 4"), std::string::npos) << out;
  EXPECT_EQ(saved_steps(dir + "/b"), std::vector<int64_t>{3});
  std::filesystem::remove_all(dir);
}

// What SIGINT or SIGTERM would do now: true when the process's own handler runs.
bool handled(int sig) {
  struct sigaction now {};
  ::sigaction(sig, nullptr, &now);
  return now.sa_handler != SIG_DFL && now.sa_handler != SIG_IGN;
}

// The first signal is the one reported; a single process stops at once on a second one of
// either kind (Ctrl-C, then kill), a launcher's rank keeps its clean stop.
TEST(StopSignal, TheFirstSignalIsReportedAndASecondOfEitherKindStopsASingleProcess) {
  install_stop_handlers(/*ranked=*/false);
  EXPECT_EQ(stop_signal(), 0);
  std::raise(SIGINT);
  EXPECT_EQ(stop_signal(), SIGINT);
  EXPECT_FALSE(handled(SIGINT));
  EXPECT_FALSE(handled(SIGTERM)) << "a SIGTERM after Ctrl-C would only be recorded, not stop the process";

  install_stop_handlers(/*ranked=*/true);
  EXPECT_EQ(stop_signal(), 0);
  std::raise(SIGINT);
  std::raise(SIGTERM);
  EXPECT_EQ(stop_signal(), SIGINT) << "the later signal overwrote the first";
  EXPECT_TRUE(handled(SIGINT));
  EXPECT_TRUE(handled(SIGTERM));
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

// A lost terminal (SIGHUP) stops a run after its step with a checkpoint, like SIGTERM (it
// killed the run, losing the steps since the last checkpoint); under nohup it stays ignored.
TEST(StopSignal, SighupStopsLikeSigtermUnlessIgnored) {
  void (*before)(int) = std::signal(SIGHUP, SIG_DFL);  // the test binary may run under nohup
  install_stop_handlers(/*ranked=*/false);
  EXPECT_TRUE(handled(SIGHUP));
  std::raise(SIGHUP);
  EXPECT_EQ(stop_signal(), SIGHUP);
  EXPECT_FALSE(handled(SIGTERM)) << "a second signal stops at once";
  std::signal(SIGHUP, SIG_IGN);
  install_stop_handlers(/*ranked=*/false);
  EXPECT_FALSE(handled(SIGHUP));
  std::raise(SIGHUP);
  EXPECT_EQ(stop_signal(), 0) << "an ignored SIGHUP was recorded";
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGHUP, before);
}

}  // namespace
}  // namespace ft
