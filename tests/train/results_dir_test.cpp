// A results folder belongs to one run (train/results_dir.h): the lock, the folder checks, the
// run identity, pruning only this run's checkpoints, and the refusal to start over a folder
// whose checkpoints are all corrupt.
#include "train/results_dir.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "core/error.h"
#include "train/checkpoint.h"
#include "train/checkpoint_dir.h"

namespace fs = std::filesystem;

namespace ft {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Every file under dir and its bytes.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[e.path().string()] = read_all(e.path().string());
  return out;
}

template <class F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

class ResultsDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("ft_results_test_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ck_ = checkpoint_dir(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A small checkpoint of run `run_id` ("" : none in its metadata, as older versions wrote).
  void write_ckpt(int64_t step, const std::string& run_id, nlohmann::json extra = {}) {
    fs::create_directories(ck_);
    std::vector<float> w = {1.f, 2.f, float(step)};
    nlohmann::json meta = {{"format", "fittrain"}, {"step", step}};
    if (!run_id.empty()) meta["run_id"] = run_id;
    if (extra.is_object()) meta.update(extra);
    std::vector<CheckpointSection> s = {{"params", w.data(), w.size() * sizeof(float), "f32"}};
    write_checkpoint(checkpoint_path(ck_, step), meta, s);
  }
  void corrupt_payload(int64_t step) {
    const std::string p = checkpoint_path(ck_, step);
    std::string b = read_all(p);
    b[b.size() - 1] ^= 0x5A;
    std::ofstream(p, std::ios::binary | std::ios::trunc) << b;
  }
  std::vector<int64_t> steps() const {
    std::vector<int64_t> out;
    for (const auto& f : list_checkpoints(ck_)) out.push_back(f.step);
    return out;
  }

  std::string dir_, ck_;
};

TEST_F(ResultsDirTest, SecondLockIsRefusedNamingTheHolderPid) {
  {
    ResultsDirLock held(dir_);
    // The pid, then this machine and 64 random bits (what the ranks of a run compare).
    const std::string text = read_all(dir_ + "/.lock");
    EXPECT_EQ(text.substr(0, text.find('\n') + 1), std::to_string(::getpid()) + "\n");
    EXPECT_EQ(results_dir_holder(dir_), text.substr(0, text.size() - 1)) << text;
    EXPECT_EQ(describe_holder(results_dir_holder(dir_)).rfind("the lock of pid " + std::to_string(::getpid()) + " on ", 0),
              0u);
    // Another open file description in this process is refused too (flock semantics).
    const std::string msg = user_error_of([&] { ResultsDirLock again(dir_); });
    EXPECT_NE(msg.find("pid " + std::to_string(::getpid())), std::string::npos) << msg;
    EXPECT_NE(msg.find(dir_), std::string::npos) << msg;
    EXPECT_NE(msg.find("--results-dir"), std::string::npos) << msg;

    // Another process: refused, naming our pid.
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      const std::string m = user_error_of([&] { ResultsDirLock other(dir_); });
      _exit(m.find("pid " + std::to_string(::getppid())) != std::string::npos ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child was not refused naming our pid";
  }
  // Released when the holder is gone.
  EXPECT_NO_THROW(ResultsDirLock again(dir_));
}

TEST_F(ResultsDirTest, ACrashedHolderReleasesTheLock) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ResultsDirLock held(dir_);
    const char c = 'x';
    if (write(fds[1], &c, 1) != 1) _exit(1);
    pause();  // killed below
    _exit(0);
  }
  close(fds[1]);
  char c = 0;
  ASSERT_EQ(read(fds[0], &c, 1), 1);
  close(fds[0]);
  const std::string msg = user_error_of([&] { ResultsDirLock second(dir_); });
  EXPECT_NE(msg.find("pid " + std::to_string(child)), std::string::npos) << msg;
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  const std::string before = results_dir_holder(dir_);
  EXPECT_NO_THROW(ResultsDirLock after(dir_));  // a stale pid in the file does not matter
  const std::string text = read_all(dir_ + "/.lock");
  EXPECT_EQ(text.substr(0, text.find('\n') + 1), std::to_string(::getpid()) + "\n");
  EXPECT_NE(results_dir_holder(dir_), before);  // another holder, another text, even with a pid that repeats
}

TEST_F(ResultsDirTest, FolderIsCreatedOrRefusedNamingTheFlag) {
  const std::string missing = dir_ + "/a/b";
  check_results_dir(missing);
  EXPECT_TRUE(fs::is_directory(missing));
  EXPECT_EQ(std::distance(fs::directory_iterator(missing), fs::directory_iterator()), 0);  // probe removed

  const std::string file = dir_ + "/file";
  std::ofstream(file) << "x";
  std::string msg = user_error_of([&] { check_results_dir(file); });
  EXPECT_NE(msg.find("--results-dir"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a directory"), std::string::npos) << msg;
  msg = user_error_of([&] { check_results_dir(file + "/sub"); });
  EXPECT_NE(msg.find("--results-dir"), std::string::npos) << msg;
}

TEST_F(ResultsDirTest, FreshRunIntoAnotherRunsFolderIsRefused) {
  // Empty folder: a new run with a new id, run.json to be written.
  ResumeDecision d = decide_resume("none", dir_);
  EXPECT_TRUE(d.checkpoint.empty());
  EXPECT_EQ(d.run_id.size(), 32u);
  EXPECT_NE(decide_resume("none", dir_).run_id, d.run_id);  // random
  EXPECT_FALSE(read_run_id(dir_));  // deciding writes nothing
  // The first save records the run; later saves check it.
  ensure_run_identity(dir_, d.run_id);
  EXPECT_EQ(read_run_id(dir_), d.run_id);
  EXPECT_NO_THROW(ensure_run_identity(dir_, d.run_id));
  EXPECT_THROW(ensure_run_identity(dir_, "another"), InternalError);

  // run.json without checkpoints (removed by hand): none is refused, auto adopts the run at
  // step 0.
  std::string msg = user_error_of([&] { decide_resume("none", dir_); });
  EXPECT_NE(msg.find("--resume auto"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--results-dir"), std::string::npos) << msg;
  EXPECT_NE(msg.find(d.run_id), std::string::npos) << msg;
  ResumeDecision a = decide_resume("auto", dir_);
  EXPECT_TRUE(a.checkpoint.empty());
  EXPECT_EQ(a.run_id, d.run_id);

  // With checkpoints: auto continues the newest of the folder's run.
  write_ckpt(1, d.run_id);
  write_ckpt(2, d.run_id);
  a = decide_resume("auto", dir_);
  EXPECT_EQ(a.checkpoint, checkpoint_path(ck_, 2));
  EXPECT_EQ(a.run_id, d.run_id);
  msg = user_error_of([&] { decide_resume("none", dir_); });
  EXPECT_NE(msg.find("--resume auto"), std::string::npos) << msg;

  // An explicit checkpoint of another run is refused; one of this run is taken.
  const std::string other = dir_ + "/other.ftc";
  {
    std::vector<float> w = {1.f};
    std::vector<CheckpointSection> s = {{"params", w.data(), 4, "f32"}};
    write_checkpoint(other, {{"format", "fittrain"}, {"step", 9}, {"run_id", "feed"}}, s);
  }
  msg = user_error_of([&] { decide_resume(other, dir_); });
  EXPECT_NE(msg.find("feed"), std::string::npos) << msg;
  EXPECT_EQ(decide_resume(checkpoint_path(ck_, 2), dir_).run_id, d.run_id);
  // An earlier one of this run would replace the later ones as the steps come round again.
  msg = user_error_of([&] { decide_resume(checkpoint_path(ck_, 1), dir_); });
  EXPECT_NE(msg.find("goes back to step 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("later checkpoint (step 2)"), std::string::npos) << msg;
}

TEST_F(ResultsDirTest, FoldersOfOlderVersionsAreTheirCheckpointsRun) {
  // No run.json, checkpoints without ids: none is refused (they are a run), auto adopts them
  // under a new id that run.json will record.
  write_ckpt(3, "");
  EXPECT_NE(user_error_of([&] { decide_resume("none", dir_); }).find("--resume auto"), std::string::npos);
  ResumeDecision a = decide_resume("auto", dir_);
  EXPECT_EQ(a.checkpoint, checkpoint_path(ck_, 3));
  EXPECT_EQ(a.run_id.size(), 32u);
  // No run.json, a checkpoint with an id (a copied checkpoint): that is the folder's run.
  write_ckpt(4, "abc");
  a = decide_resume("auto", dir_);
  EXPECT_EQ(a.checkpoint, checkpoint_path(ck_, 4));
  EXPECT_EQ(a.run_id, "abc");
}

TEST_F(ResultsDirTest, AllCorruptCheckpointsAreRefusedAndUntouched) {
  write_ckpt(1, "r1");
  write_ckpt(2, "r1");
  write_run_id(dir_, "r1");
  corrupt_payload(1);
  corrupt_payload(2);
  fs::resize_file(checkpoint_path(ck_, 2), 20);  // truncated too: a different reason
  const auto before = snapshot(dir_);
  const std::string msg = user_error_of([&] { decide_resume("auto", dir_); });
  EXPECT_NE(msg.find("none of the 2 checkpoints"), std::string::npos) << msg;
  EXPECT_NE(msg.find(checkpoint_path(ck_, 1) + ": section 'params'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(checkpoint_path(ck_, 2)), std::string::npos) << msg;
  EXPECT_NE(msg.find("--results-dir"), std::string::npos) << msg;
  EXPECT_NE(user_error_of([&] { decide_resume("none", dir_); }).find("--resume auto"), std::string::npos);
  EXPECT_EQ(snapshot(dir_), before);

  // One valid among them: auto takes it, warning about the others.
  write_ckpt(0, "r1");
  std::vector<std::string> warnings;
  EXPECT_EQ(decide_resume("auto", dir_, &warnings).checkpoint, checkpoint_path(ck_, 0));
  EXPECT_EQ(warnings.size(), 2u);
}

TEST_F(ResultsDirTest, PruningDeletesOnlyThisRunsCheckpoints) {
  // Steps 1-3 of run A, 4-5 of another run B (newer!), 0 from an older version (no id).
  write_ckpt(0, "");
  for (int64_t s : {1, 2, 3}) write_ckpt(s, "A");
  for (int64_t s : {4, 5}) write_ckpt(s, "B");
  // Unreadable metadata: its run is unknown; never pruned.
  std::ofstream(checkpoint_path(ck_, 6), std::ios::binary) << std::string(40, 'z');

  std::vector<std::string> warnings;
  const auto deleted = prune_checkpoints(ck_, 1, &warnings, "A");
  EXPECT_EQ(deleted, (std::vector<std::string>{checkpoint_path(ck_, 0), checkpoint_path(ck_, 1),
                                               checkpoint_path(ck_, 2)}));
  EXPECT_EQ(steps(), (std::vector<int64_t>{3, 4, 5, 6}));  // A's newest kept, B's untouched
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(checkpoint_path(ck_, 6)), std::string::npos) << warnings[0];

  // Keep-best ranks and deletes only B's; B's newest stays.
  write_ckpt(7, "B", {{"val_loss", 9.0}});
  write_ckpt(8, "A", {{"val_loss", 0.1}});
  const auto best = prune_checkpoints_best(ck_, 1, "val_loss", nullptr, "B");
  EXPECT_EQ(best, (std::vector<std::string>{checkpoint_path(ck_, 5), checkpoint_path(ck_, 4)}));  // worst first
  EXPECT_EQ(steps(), (std::vector<int64_t>{3, 6, 7, 8}));
}

}  // namespace
}  // namespace ft
