// Non-finite steps end to end, through the binary (train/step_guard.h): an injected NaN
// gradient is skipped and logged and the run ends bit-identical to one whose update at that
// step was skipped by construction; NaNs at every step stop the run after --max-bad-steps with
// the newest checkpoint from before the first of them; a signal during such a streak saves
// the pre-streak state; test/sample/resume refuse a checkpoint with non-finite weights.
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "train/checkpoint.h"
#include "train/checkpoint_dir.h"

namespace ft {
namespace {
using namespace ft::testing;

// Sets a test-hook environment variable for the commands run while it lives.
struct EnvVar {
  std::string name;
  EnvVar(std::string n, const std::string& value) : name(std::move(n)) { ::setenv(name.c_str(), value.c_str(), 1); }
  ~EnvVar() { ::unsetenv(name.c_str()); }
};

std::string section(const std::string& path, const std::string& name) {
  CheckpointReader r(path);
  std::string bytes(r.section_bytes(name), '\0');
  r.read(name, bytes.data(), bytes.size());
  return bytes;
}

std::vector<nlohmann::json> metrics_rows(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::istringstream lines(read_file(path));
  std::string line;
  while (std::getline(lines, line)) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

TEST(Numerics, InjectedNanIsSkippedLoggedAndEndsBitIdenticalToASkippedUpdate) {
  const std::string nan = temp_dir("nan_once"), skip = temp_dir("skip_once"), plain = temp_dir("plain_once");
  // Two micro-batches: the NaN written after micro-batch 0 survives the accumulation.
  const std::string common = std::string("train ") + kSmallModel +
                             " --max-steps 8 --log-every 1 --eval-every 0 --ckpt-every 4 --keep-checkpoints 0"
                             " --micro-batch-size 8 --warmup-steps 2 --eval-batches 1";
  CmdResult a, b, c;
  {
    EnvVar e("FT_TEST_NAN_AT_STEP", "3");
    a = run_fittrain(common + " --results-dir " + nan + " --metrics-file " + nan + "/metrics.jsonl");
  }
  {
    EnvVar e("FT_TEST_SKIP_UPDATE_AT_STEP", "3");
    b = run_fittrain(common + " --results-dir " + skip);
  }
  c = run_fittrain(common + " --results-dir " + plain);
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  ASSERT_EQ(c.status, 0) << c.output;

  // Logged with the step and the first parameter tensor whose gradient is NaN.
  EXPECT_NE(a.output.find("step      3: non-finite gradient norm (nan), first non-finite gradient in "),
            std::string::npos) << a.output;
  EXPECT_NE(a.output.find("update skipped, weights and optimizer state unchanged (1 bad step in a row"),
            std::string::npos) << a.output;
  EXPECT_EQ(a.output.find("step      4: non-finite"), std::string::npos) << a.output;
  EXPECT_NE(b.output.find("step      3: update skipped by FT_TEST_SKIP_UPDATE_AT_STEP"), std::string::npos)
      << b.output;
  // The metrics file says so.
  bool row = false;
  for (const auto& j : metrics_rows(nan + "/metrics.jsonl")) {
    if (!j.value("skipped_update", false)) continue;
    row = true;
    EXPECT_EQ(j["step"], 3) << j.dump();
    EXPECT_NE(j["reason"].get<std::string>().find("non-finite gradient norm"), std::string::npos) << j.dump();
    EXPECT_TRUE(j.contains("first_nonfinite_grad")) << j.dump();
    EXPECT_TRUE(j["grad_norm"].is_null()) << j.dump();
    EXPECT_TRUE(j["loss"].is_number()) << j.dump();  // the loss itself was finite
  }
  EXPECT_TRUE(row);
  // The streak ended at step 4: its periodic checkpoint was written.
  EXPECT_TRUE(std::filesystem::exists(checkpoint_path(checkpoint_dir(nan), 4))) << a.output;

  // Bit-identical to the run that skipped step 3's update by construction; the data cursor,
  // step and token count moved on in both.
  const std::string end_a = checkpoint_path(checkpoint_dir(nan), 8), end_b = checkpoint_path(checkpoint_dir(skip), 8),
                    end_c = checkpoint_path(checkpoint_dir(plain), 8);
  for (const char* name : {"params", "adam_m", "adam_v"})
    EXPECT_TRUE(section(end_a, name) == section(end_b, name)) << name << " differs from the skipped-update run";
  const auto meta_a = CheckpointReader(end_a).meta(), meta_b = CheckpointReader(end_b).meta(),
             meta_c = CheckpointReader(end_c).meta();
  for (const char* k : {"step", "cursor", "tokens_seen", "skipped_updates"}) EXPECT_EQ(meta_a[k], meta_b[k]) << k;
  EXPECT_EQ(meta_a["skipped_updates"], 1);
  EXPECT_EQ(meta_a["cursor"], meta_c["cursor"]);  // the batch was consumed
  EXPECT_EQ(meta_a["tokens_seen"], meta_c["tokens_seen"]);
  // ...and the skip mattered: the run without it ends elsewhere.
  EXPECT_FALSE(section(end_a, "params") == section(end_c, "params"));
}

TEST(Numerics, ConsecutiveNansStopAfterMaxBadStepsWithThePreStreakCheckpointNewest) {
  const std::string dir = temp_dir("nan_streak"), ref = temp_dir("nan_streak_ref");
  const std::string common = std::string("train ") + kSmallModel +
                             " --max-steps 20 --log-every 1 --eval-every 0 --keep-checkpoints 0 --max-bad-steps 3 --eval-batches 1";
  CmdResult r;
  {
    EnvVar e("FT_TEST_NAN_AT_STEP", "5+");
    r = run_fittrain(common + " --ckpt-every 3 --results-dir " + dir);
  }
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("training stopped at step 7: 3 steps in a row had a non-finite loss or gradient norm "
                          "(steps 5..7, --max-bad-steps 3)"),
            std::string::npos) << r.output;
  // The periodic checkpoint due at step 6 (in the streak) was not written; the stop wrote the
  // state before the streak (step 4's: no update was applied since).
  EXPECT_NE(r.output.find("checkpoint of step 6 not written"), std::string::npos) << r.output;
  auto cks = list_checkpoints(checkpoint_dir(dir));
  ASSERT_EQ(cks.size(), 2u) << r.output;
  EXPECT_EQ(cks[0].step, 3);
  EXPECT_EQ(cks[1].step, 4);
  EXPECT_NE(r.output.find("the newest checkpoint is " + cks[1].path), std::string::npos) << r.output;

  // That checkpoint is exactly the one a run saving at step 4 writes (here a run that stops at
  // its first bad step 5 with --max-bad-steps 1, after its periodic checkpoint at 4).
  {
    EnvVar e("FT_TEST_NAN_AT_STEP", "5");
    CmdResult q = run_fittrain(common + " --ckpt-every 4 --max-bad-steps 1 --results-dir " + ref);
    ASSERT_EQ(q.status, 2) << q.output;
  }
  const std::string ref4 = checkpoint_path(checkpoint_dir(ref), 4);
  for (const char* name : {"params", "adam_m", "adam_v"})
    EXPECT_TRUE(section(cks[1].path, name) == section(ref4, name)) << name;
  EXPECT_EQ(CheckpointReader(cks[1].path).meta()["cursor"], CheckpointReader(ref4).meta()["cursor"]);

  // --resume auto with the NaNs gone continues from step 4.
  CmdResult resumed = run_fittrain(common + " --ckpt-every 3 --max-steps 6 --resume auto --results-dir " + dir);
  EXPECT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 4"), std::string::npos) << resumed.output;
  EXPECT_EQ(list_checkpoints(checkpoint_dir(dir)).back().step, 6);
}

TEST(Numerics, SignalDuringABadStreakSavesThePreStreakState) {
  const std::string dir = temp_dir("nan_signal");
  FittrainProcess p({"train", "--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--seq-len", "32", "--results-dir",
                     dir, "--max-steps", "100000", "--log-every", "1", "--eval-every", "0", "--ckpt-every", "0",
                     "--max-bad-steps", "1000000"},
                    {"FT_TEST_NAN_AT_STEP=3+"});
  ASSERT_TRUE(p.read_until("step      5: non-finite")) << p.output();
  p.signal(SIGTERM);
  const int status = p.wait();
  const std::string& out = p.output();
  EXPECT_EQ(status, 130) << out;
  auto cks = list_checkpoints(checkpoint_dir(dir));
  ASSERT_EQ(cks.size(), 1u) << out;
  EXPECT_EQ(cks[0].step, 2) << out;  // the state before the first bad step (3)
  EXPECT_NE(out.find("checkpoint of step 2's state"), std::string::npos) << out;
  EXPECT_EQ(CheckpointReader(cks[0].path).meta()["step"], 2);
}

TEST(Numerics, TestSampleAndResumeRefuseACheckpointWithNonFiniteWeights) {
  const std::string dir = temp_dir("nonfinite_cli");
  CmdResult t = run_fittrain(std::string("train --n-layer 1 --n-embd 32 --n-head 2 --seq-len 32 --eval-batches 1 ") +
                             "--max-steps 2 --log-every 1 --results-dir " + dir);
  ASSERT_EQ(t.status, 0) << t.output;
  const std::string good = checkpoint_path(checkpoint_dir(dir), 2), bad = dir + "/poisoned.ftc";
  {
    // Make its params non-finite and write it back through the writer (CRCs all valid).
    CheckpointReader r(good);
    std::vector<std::string> payload;
    std::vector<CheckpointSection> sections;
    for (const auto& e : r.sections()) {
      payload.emplace_back(e.bytes, '\0');
      r.read(e.name, payload.back().data(), e.bytes);
      if (e.name == "params") {
        const float v = std::nanf("");
        std::memcpy(payload.back().data() + 4 * 100, &v, 4);
      }
    }
    for (size_t i = 0; i < payload.size(); ++i)
      sections.push_back({r.sections()[i].name, payload[i].data(), payload[i].size(), r.sections()[i].dtype});
    write_checkpoint(bad, r.meta(), sections);
  }
  for (const std::string cmd : {"test --eval-batches 1", "sample --max-new-tokens 5"}) {
    CmdResult r = run_fittrain(cmd + " --results-dir " + dir + " --checkpoint " + bad);
    EXPECT_EQ(r.status, 2) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find(bad + ": checkpoint holds non-finite values"), std::string::npos) << r.output;
  }
  CmdResult r = run_fittrain(std::string("train --n-layer 1 --n-embd 32 --n-head 2 --seq-len 32 --max-steps 4 ") +
                             "--results-dir " + dir + " --resume " + bad);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(bad + ": checkpoint holds non-finite values ('params' element 100,"), std::string::npos)
      << r.output;
  // The good one still tests fine.
  EXPECT_EQ(run_fittrain("test --eval-batches 1 --results-dir " + dir + " --checkpoint " + good).status, 0);
}

// A copy of checkpoint `from` at `to` (a folder of its own) with its metadata changed by `edit`.
void copy_checkpoint_with_meta(const std::string& from, const std::string& to,
                               const std::function<void(nlohmann::json&)>& edit) {
  CheckpointReader r(from);
  nlohmann::json meta = r.meta();
  edit(meta);
  std::vector<std::string> payloads;
  for (const auto& e : r.sections()) payloads.push_back(section(from, e.name));
  std::vector<CheckpointSection> sections;
  for (size_t i = 0; i < r.sections().size(); ++i)
    sections.push_back({r.sections()[i].name, payloads[i].data(), payloads[i].size(), r.sections()[i].dtype});
  std::filesystem::create_directories(std::filesystem::path(to).parent_path());
  write_checkpoint(to, meta, sections);
}

// The updates an fp16 run skipped for loss-scale overflows stay out of AdamW's bias
// correction when its checkpoint is resumed in another precision (the fresh scaler counted
// none, so t ran ahead by that many). Here the checkpoint's meta says 1 overflow skip; its
// resume on the CPU (fp32) must be the resume of one that skipped 1 update as a bad step.
TEST(Numerics, AnFp16RunsOverflowSkipsStayOutOfAdamsCountInAnotherPrecision) {
  const std::string dir = temp_dir("fp16_skips");
  const std::string common = std::string("train ") + kSmallModel +
                             " --max-steps 4 --log-every 1 --eval-every 0 --ckpt-every 2 --keep-checkpoints 0";
  ASSERT_EQ(run_fittrain(common + " --results-dir " + dir + "/src").status, 0);
  const std::string at2 = checkpoint_path(checkpoint_dir(dir + "/src"), 2);
  copy_checkpoint_with_meta(at2, checkpoint_path(checkpoint_dir(dir + "/scaler"), 2), [](nlohmann::json& m) {
    m["loss_scaler"] = {{"scale", 1024.0}, {"clean", 1}, {"skipped", 1}};
  });
  copy_checkpoint_with_meta(at2, checkpoint_path(checkpoint_dir(dir + "/bad"), 2),
                            [](nlohmann::json& m) { m["skipped_updates"] = 1; });
  for (const char* run : {"scaler", "bad"}) {
    CmdResult r = run_fittrain(common + " --resume auto --results-dir " + dir + "/" + run);
    ASSERT_EQ(r.status, 0) << run << "\n" << r.output;
  }
  const std::string a = checkpoint_path(checkpoint_dir(dir + "/scaler"), 4), b = checkpoint_path(checkpoint_dir(dir + "/bad"), 4);
  for (const char* name : {"params", "adam_m", "adam_v"}) EXPECT_TRUE(section(a, name) == section(b, name)) << name;
  EXPECT_EQ(CheckpointReader(a).meta()["skipped_updates"], 1);  // and kept for the next resume
  // ...and the count mattered: the uninterrupted run ends elsewhere.
  EXPECT_FALSE(section(a, "params") == section(checkpoint_path(checkpoint_dir(dir + "/src"), 4), "params"));
}

TEST(Numerics, MaxBadStepsFlagIsInTheHelpAndChecked) {
  CmdResult h = run_fittrain("train --help");
  ASSERT_EQ(h.status, 0);
  EXPECT_NE(h.output.find("--max-bad-steps INT=10"), std::string::npos) << h.output;
  const std::string dir = temp_dir("max_bad_zero");
  CmdResult r = run_fittrain(std::string("train ") + kSmallModel + " --max-steps 1 --max-bad-steps 0 --results-dir " + dir);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--max-bad-steps must be >= 1, got 0"), std::string::npos) << r.output;
  EXPECT_TRUE(list_checkpoints(checkpoint_dir(dir)).empty());
}

}  // namespace
}  // namespace ft
