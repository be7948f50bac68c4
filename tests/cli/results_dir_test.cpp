// A results folder belongs to one run, as a user sees it (train/results_dir.h): a new run
// into another run's folder is refused and changes nothing; a second train on a running
// one's folder is refused naming its pid; an unusable --results-dir is refused before step 1.
#include <gtest/gtest.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <vector>

#include "cli/cli_util.h"
#include "data/token_shard.h"
#include "train/checkpoint_dir.h"

namespace fs = std::filesystem;

namespace ft {
namespace {
using namespace ft::testing;

const std::string kTiny = "--n-layer 1 --n-embd 32 --n-head 2 --seq-len 32 --eval-every 0 --eval-batches 1 ";

// Every file under dir and its bytes, except the lock file (a refused process may take the
// free lock and write its pid there before refusing).
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != ".lock") out[e.path().string()] = read_file(e.path().string());
  return out;
}

TEST(ResultsDir, NewRunIntoAnotherRunsFolderIsRefusedAndChangesNothing) {
  const std::string dir = temp_dir("foreign");
  const std::string base = "train " + kTiny + "--results-dir " + dir + " --log-every 1 --keep-checkpoints 1";
  CmdResult a = run_fittrain(base + " --max-steps 3 --ckpt-every 1 --global-seed 1");
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(list_checkpoints(checkpoint_dir(dir)).size(), 1u) << a.output;
  const auto before = snapshot(dir);

  // Another run (--resume none, the default) would have pruned its own step-2 checkpoint
  // below the other run's step 3 and left the folder mixed: refused, nothing changed.
  CmdResult b = run_fittrain(base + " --max-steps 2 --ckpt-every 1 --global-seed 2");
  EXPECT_EQ(b.status, 2) << b.output;
  EXPECT_NE(b.output.find("--resume auto"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("--results-dir"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find(dir), std::string::npos) << b.output;
  EXPECT_EQ(b.output.find("step      1/"), std::string::npos) << b.output;
  EXPECT_EQ(snapshot(dir), before);

  // --resume auto continues the folder's run.
  CmdResult c = run_fittrain(base + " --max-steps 4 --ckpt-every 1 --global-seed 1 --resume auto");
  EXPECT_EQ(c.status, 0) << c.output;
  EXPECT_NE(c.output.find("at step 3"), std::string::npos) << c.output;
}

// A resume from an earlier checkpoint of the folder's run would replace its later checkpoints
// as their steps come round again (it did, without a word): refused, naming them, and nothing
// changes; the same checkpoint continued into another --results-dir branches off there.
TEST(ResultsDir, GoingBackToAnEarlierCheckpointNeverReplacesTheLaterOnes) {
  const std::string dir = temp_dir("go_back");
  // A head size of 32 (kTiny's 16 is the CPU's only), though the tests run on the CPU everywhere.
  const std::string base =
      "train " + kTiny + "--n-head 1 --max-steps 4 --ckpt-every 2 --keep-checkpoints 0 --global-batch-size 4";
  ASSERT_EQ(run_fittrain(base + " --results-dir " + dir + "/run").status, 0);
  const auto before = snapshot(dir + "/run/checkpoints");
  const std::string at2 = checkpoint_path(checkpoint_dir(dir + "/run"), 2);
  CmdResult r = run_fittrain(base + " --lr 1e-4 --results-dir " + dir + "/run --resume " + at2);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("goes back to step 2, but " + checkpoint_dir(dir + "/run") +
                          " holds this run's later checkpoint (step 4)"), std::string::npos) << r.output;
  EXPECT_EQ(snapshot(dir + "/run/checkpoints"), before);
  r = run_fittrain(base + " --lr 1e-4 --results-dir " + dir + "/branch --resume " + at2);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(checkpoint_path(checkpoint_dir(dir + "/branch"), 4)));
  EXPECT_EQ(snapshot(dir + "/run/checkpoints"), before);
}

TEST(ResultsDir, SecondTrainOnARunningOnesFolderIsRefusedNamingItsPid) {
  const std::string dir = temp_dir("concurrent");
  FittrainProcess p({"train", "--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--seq-len", "32", "--results-dir",
                     dir, "--max-steps", "100000", "--log-every", "1", "--eval-every", "0", "--ckpt-every", "0"});
  const pid_t first = p.pid();
  ASSERT_TRUE(p.read_until("step      1/")) << p.output();

  // While the first trains: a second one, resuming or not, is refused with the first's pid.
  for (const char* resume : {"auto", "none"}) {
    CmdResult second = run_fittrain("train " + kTiny + "--results-dir " + dir + " --max-steps 2 --resume " + resume);
    EXPECT_EQ(second.status, 2) << second.output;
    EXPECT_NE(second.output.find("pid " + std::to_string(first)), std::string::npos) << second.output;
    EXPECT_NE(second.output.find(dir), std::string::npos) << second.output;
    EXPECT_EQ(second.output.find("step      1/"), std::string::npos) << second.output;
  }

  p.signal(SIGTERM);  // the first still stops cleanly with its checkpoint
  EXPECT_EQ(p.wait(), 130) << p.output();
  EXPECT_EQ(list_checkpoints(checkpoint_dir(dir)).size(), 1u) << p.output();
}

// Runs fittrain as user nobody when we are root (root writes into read-only folders).
CmdResult run_fittrain_unprivileged(const std::string& args) {
  if (geteuid() != 0) return run_fittrain(args);
  int fds[2];
  CmdResult r;
  if (pipe(fds) != 0) return r;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(126);
    const std::string cmd = std::string(FITTRAIN_BINARY) + " " + args;
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) r.output.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(ResultsDir, UnusableResultsDirIsRefusedBeforeStepOne) {
  // Data elsewhere, no periodic checkpoints: before, every step ran and the run failed at
  // its only save.
  const std::string data = temp_dir("rd_data"), shard = data + "/train.bin";
  std::vector<uint32_t> t(5000);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint32_t>(i % 200);
  write_shard(shard, t);
  const std::string base = "train " + kTiny + "--data-path " + shard + " --max-steps 3 --ckpt-every 0 --log-every 1";

  const std::string file = data + "/not_a_dir";
  { std::ofstream(file) << "x"; }
  CmdResult r = run_fittrain(base + " --results-dir " + file);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--results-dir " + file), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not a directory"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step      1/"), std::string::npos) << r.output;

  const std::string ro = temp_dir("rd_ro");
  ASSERT_EQ(chmod(ro.c_str(), 0555), 0);
  r = run_fittrain_unprivileged(base + " --results-dir " + ro);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--results-dir " + ro), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not writable"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step      1/"), std::string::npos) << r.output;
  chmod(ro.c_str(), 0755);
}

}  // namespace
}  // namespace ft
