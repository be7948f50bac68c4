// Memory taken away mid-run: an allocation failure during a step (simulated: another process
// takes memory, then an op fails to allocate) saves the last completed step, re-plans for
// what is free now with the same global batch and continues to the end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "train/checkpoint_dir.h"
#include "train/results_dir.h"
#include "train/session.h"
#include "train/trainer.h"

namespace ft {
namespace {

struct HookGuard {
  ~HookGuard() {
    testing::before_train_step = nullptr;
    testing::between_replans = nullptr;
    testing::cpu_memory_limit_bytes = 0;
  }
};

RunConfig small_run(const std::string& dir) {
  RunConfig rc;
  rc.device = "cpu";
  rc.n_layer = 2;
  rc.n_head = 2;
  rc.n_embd = 32;
  rc.seq_len = 32;
  rc.global_batch_size = 24;
  rc.max_steps = 6;
  rc.log_every = 1;
  rc.eval_every = 0;
  rc.ckpt_every = 0;
  rc.num_workers = 0;
  rc.results_dir = dir;
  rc.metrics_file = dir + "/metrics.jsonl";
  return rc;
}

// step -> (loss, micro-batch, accumulation) of the training rows, the last row per step.
std::map<int64_t, nlohmann::json> training_rows(const std::string& path) {
  std::map<int64_t, nlohmann::json> rows;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss") && j.contains("micro_batch_size")) rows[j["step"].get<int64_t>()] = j;
  }
  return rows;
}

TEST(Replan, OutOfMemoryMidRunSavesReplansAndKeepsTheGlobalBatch) {
  HookGuard guard;
  const std::string base = "/tmp/fittrain_test_replan_" + std::to_string(::getpid());
  std::filesystem::remove_all(base);
  // The reference: the same run without trouble.
  RunConfig ref = small_run(base + "/ref");
  ASSERT_EQ(run_train(ref), 0);
  const auto want = training_rows(ref.metrics_file);
  ASSERT_EQ(want.size(), 6u);
  const int64_t mb_before = want.at(1)["micro_batch_size"];
  ASSERT_EQ(mb_before, 24);

  // At step 4 another process takes memory, and an op of the step fails to allocate. What is
  // left fits a smaller micro-batch only: the plan of micro-batch 24 needs more.
  Session probe(small_run(base + "/probe"), true);
  const size_t full = probe.fit().plan.total_bytes;
  RunConfig rc = small_run(base + "/run");
  bool fired = false;
  testing::before_train_step = [&](int64_t step) {
    if (step == 4 && !fired) {
      fired = true;
      testing::cpu_memory_limit_bytes = kMinSafetyMargin + full / 2;
      throw OutOfMemoryError("injected: cannot allocate the step's scratch");
    }
  };
  ASSERT_EQ(run_train(rc), 0);
  EXPECT_TRUE(fired);
  const auto got = training_rows(rc.metrics_file);
  ASSERT_EQ(got.size(), 6u) << "every step logged once, step 4 after the re-plan";
  for (int64_t step = 1; step <= 3; ++step) EXPECT_EQ(got.at(step)["micro_batch_size"], mb_before);
  for (int64_t step = 4; step <= 6; ++step) {
    const int64_t mb = got.at(step)["micro_batch_size"], accum = got.at(step)["grad_accum_steps"];
    EXPECT_LT(mb, mb_before) << "step " << step << " should run with the re-planned micro-batch";
    EXPECT_GE(mb * accum, 24);  // the global batch is kept: accum micro-batches cover it
    EXPECT_LT(mb * (accum - 1), 24);
    EXPECT_LE(got.at(step)["mem_planned_bytes"].get<size_t>(), full / 2);
  }
  // The same run: steps 1-3 are bit-identical, steps 4-6 differ only by the summation order
  // of a different micro-batch split.
  for (int64_t step = 1; step <= 6; ++step) {
    const double a = got.at(step)["loss"], b = want.at(step)["loss"];
    if (step <= 3) EXPECT_EQ(a, b) << "step " << step;
    else EXPECT_NEAR(a, b, 1e-4 * std::fabs(b)) << "step " << step;
  }
  // The checkpoint of step 3 was written when memory ran out; the run ended at step 6.
  std::vector<std::string> w;
  auto latest = latest_valid_checkpoint(checkpoint_dir(rc.results_dir), &w);
  ASSERT_TRUE(latest.has_value());
  EXPECT_NE(latest->path.find("00000006"), std::string::npos) << latest->path;
  EXPECT_TRUE(std::filesystem::exists(checkpoint_path(checkpoint_dir(rc.results_dir), 3)));
  std::filesystem::remove_all(base);
}

TEST(Replan, GivesUpAfterThreeReplansSayingWhatToDo) {
  HookGuard guard;
  const std::string dir = "/tmp/fittrain_test_replan_give_up_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  RunConfig rc = small_run(dir);
  testing::before_train_step = [&](int64_t step) {
    if (step == 2) throw OutOfMemoryError("injected: the device is full");
  };
  try {
    run_train(rc);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of device memory again after 3 re-plans"), std::string::npos) << m;
    EXPECT_NE(m.find("--memory-limit"), std::string::npos) << m;
    EXPECT_NE(m.find("--resume auto"), std::string::npos) << m;
  }
  // Progress is kept: step 1's checkpoint survives.
  EXPECT_TRUE(std::filesystem::exists(checkpoint_path(checkpoint_dir(rc.results_dir), 1)));
  std::filesystem::remove_all(dir);
}

// Between the plan that ran out and the next, the results folder stays this run's: a second
// `train --resume auto` started then is refused (it took the folder, and the re-planned run
// stopped, while train_once owned the lock). Released when the run ends.
TEST(Replan, TheResultsFolderStaysLockedBetweenPlans) {
  HookGuard guard;
  const std::string dir = "/tmp/fittrain_test_replan_lock_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  RunConfig rc = small_run(dir);
  rc.max_steps = 3;
  bool fired = false;
  testing::before_train_step = [&](int64_t step) {
    if (step == 2 && !fired) {
      fired = true;
      throw OutOfMemoryError("injected: cannot allocate the step's scratch");
    }
  };
  int probes = 0;
  testing::between_replans = [&](const std::string& results_dir) {
    ++probes;
    try {
      ResultsDirLock second(results_dir);
      ADD_FAILURE() << "another process could take " << results_dir << " between the plans";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("is in use by another fittrain train (pid " + std::to_string(::getpid())),
                std::string::npos) << e.what();
    }
  };
  ASSERT_EQ(run_train(rc), 0);
  EXPECT_TRUE(fired);
  EXPECT_EQ(probes, 1);
  EXPECT_NO_THROW(ResultsDirLock after(dir));  // the finished run let it go
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ft
