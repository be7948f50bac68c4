// The self-spawn launcher (dist/launch.h): real worker processes (/bin/sh), real signals,
// a real rendezvous folder.
#include "dist/launch.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace ft {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A fresh folder for one test, removed afterwards.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name) {
    path = "/tmp/fittrain_test_" + name + "_" + std::to_string(::getpid());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

WorkerSpec sh(const std::string& script, int rank, const std::string& dir) {
  WorkerSpec w;
  w.argv = {"/bin/sh", "-c", "cd '" + dir + "' && " + script};
  w.env = {{kEnvRank, std::to_string(rank)}, {kEnvWorldSize, "2"}};
  w.label = "rank " + std::to_string(rank) + " (test)";
  return w;
}

// run_workers with the launcher's stderr captured.
struct Launched {
  int rc;
  std::string err;
};
Launched run_capturing(const std::vector<WorkerSpec>& workers) {
  ::testing::internal::CaptureStderr();
  const int rc = run_workers(workers);
  return {rc, ::testing::internal::GetCapturedStderr()};
}

// Waits for a file to exist and be non-empty; false after timeout_s.
bool wait_file(const std::string& path, double timeout_s) {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < end) {
    std::error_code ec;
    if (fs::file_size(path, ec) > 0 && !ec) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// run_workers in a forked child of the test process, for the tests that signal the launcher:
// the test process's own signal dispositions never change.
// hup: SIGHUP's disposition in the launcher (the test binary may run under nohup).
pid_t fork_launcher(const std::vector<WorkerSpec>& workers, void (*hup)(int) = SIG_DFL) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::signal(SIGHUP, hup);
    int rc = 99;
    try {
      rc = run_workers(workers);
    } catch (...) {
    }
    ::_exit(rc);
  }
  return pid;
}

// The forked launcher's exit code; -1 when a signal ended it, -2 (after a SIGKILL, which its
// workers follow through PR_SET_PDEATHSIG) when it ran past timeout_s.
int wait_launcher(pid_t pid, double timeout_s) {
  int status = 0;
  pid_t r = 0;
  const auto t0 = Clock::now();
  while ((r = ::waitpid(pid, &status, WNOHANG)) == 0 && seconds_since(t0) < timeout_s)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (r == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return -2;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// True when the process is gone or a zombie (a reparented one may stay unreaped).
bool dead(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  return !f.is_open() || stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z");
}

// Workers that note each SIGTERM in F_<rank> and stop (or, keep_running, go on) after it.
std::vector<WorkerSpec> term_noting_workers(const std::string& dir, bool keep_running) {
  const std::string script = "trap 'echo got >> F_$FITTRAIN_RANK" + std::string(keep_running ? "" : "; exit 0") +
                             "' TERM; echo $$ > R_$FITTRAIN_RANK; "
                             "i=0; while [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; exit 9";  // 10 s at most
  return {sh(script, 0, dir), sh(script, 1, dir)};
}

TEST(LaunchWorkers, InheritTheEnvironmentPlusTheirOwn) {
  TempDir d("launch_env");
  ASSERT_EQ(::setenv("NCCL_NVLS_ENABLE", "0", 1), 0);
  ASSERT_EQ(::setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1), 0);
  ASSERT_EQ(::setenv("NVSHMEM_DISABLE_NVLS", "1", 1), 0);
  ASSERT_EQ(::setenv(kEnvRank, "7", 1), 0);  // replaced per worker, not duplicated
  const std::string script =
      "echo \"$FITTRAIN_RANK $NCCL_NVLS_ENABLE $TORCH_SYMM_MEM_DISABLE_MULTICAST $NVSHMEM_DISABLE_NVLS\" > "
      "FILE_$FITTRAIN_RANK";
  const int rc = run_workers({sh(script, 0, d.path), sh(script, 1, d.path)});
  ::unsetenv(kEnvRank);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(slurp(d.file("FILE_0")), "0 0 1 1\n");
  EXPECT_EQ(slurp(d.file("FILE_1")), "1 0 1 1\n");
  EXPECT_FALSE(fs::exists(d.file("FILE_7")));
}

// The rendezvous folder run_workers makes (once its handlers are in place, so a signal before
// them finds none to leave behind): one private folder for every worker, gone when it
// returns, after a failure too.
TEST(LaunchWorkers, MakeTheRendezvousFolderAndRemoveIt) {
  TempDir d("launch_rdzv");
  const std::string see = "test -d \"$FITTRAIN_RENDEZVOUS\" && echo \"$FITTRAIN_RENDEZVOUS\" > RDZV_$FITTRAIN_RANK";
  for (const char* last : {"true", "exit 3"}) {
    std::filesystem::remove(d.file("RDZV_0")), std::filesystem::remove(d.file("RDZV_1"));
    const int rc = run_workers({sh(see, 0, d.path), sh(see + " && " + last, 1, d.path)}, kEnvRendezvous);
    EXPECT_EQ(rc, std::string(last) == "true" ? 0 : 3);
    const std::string dir = slurp(d.file("RDZV_0"));
    ASSERT_FALSE(dir.empty()) << last;
    EXPECT_EQ(slurp(d.file("RDZV_1")), dir);
    EXPECT_NE(dir.find("fittrain-rdzv-"), std::string::npos) << dir;
    EXPECT_FALSE(fs::exists(dir.substr(0, dir.size() - 1))) << dir;  // without the newline
  }
}

TEST(LaunchWorkers, AllSucceedReturnsZero) {
  TempDir d("launch_ok");
  EXPECT_EQ(run_workers({sh("exit 0", 0, d.path), sh("true", 1, d.path), sh("sleep 0.2", 2, d.path)}), 0);
  EXPECT_EQ(run_workers({}), 0);
}

TEST(LaunchWorkers, FirstFailureKillsTheOthers) {
  TempDir d("launch_fail");
  // The failing worker waits (at most 5 s) for the sleeper's pid file, so the sleeper is
  // running when the failure comes.
  const auto t0 = Clock::now();
  const auto [rc, err] = run_capturing({sh("echo $$ > sleeper.pid; exec sleep 60", 0, d.path),
                                        sh("i=0; while [ ! -s sleeper.pid ] && [ $i -lt 500 ]; do sleep 0.01; "
                                           "i=$((i+1)); done; exit 3",
                                           1, d.path)});
  EXPECT_EQ(rc, 3);
  EXPECT_LT(seconds_since(t0), 10.0);
  EXPECT_NE(err.find("rank 1 (test)"), std::string::npos) << err;
  EXPECT_NE(err.find("exited with code 3"), std::string::npos) << err;
  const pid_t sleeper = std::atoi(slurp(d.file("sleeper.pid")).c_str());
  ASSERT_GT(sleeper, 0);
  EXPECT_EQ(::kill(sleeper, 0), -1);
  EXPECT_EQ(errno, ESRCH) << "the sleeper (pid " << sleeper << ") still exists";
}

// A worker that stops cleanly (exit 130: a signal, then its checkpoint) is no failure: the
// others stop after the same agreed step and finish on their own (rank 0 may still be writing
// the checkpoint); the launcher then returns 130.
TEST(LaunchWorkers, AStoppedWorkerLeavesTheOthersToFinish) {
  TempDir d("launch_stopped");
  const auto [rc, err] =
      run_capturing({sh("sleep 1; echo written > ckpt; exit 130", 0, d.path), sh("exit 130", 1, d.path)});
  EXPECT_EQ(rc, 130);
  EXPECT_EQ(slurp(d.file("ckpt")), "written\n") << "rank 0 was ended before it finished: " << err;
  EXPECT_EQ(err.find("killing"), std::string::npos) << err;
}

// After a failure the others get kFailureGraceSeconds to exit by themselves (ranks ending on one
// agreed error print their own messages) before they are killed.
TEST(LaunchWorkers, AfterAFailureTheOthersGetAGraceToExit) {
  TempDir d("launch_grace");
  const auto [rc, err] =
      run_capturing({sh("sleep 0.5; echo said > message; exit 2", 0, d.path), sh("exit 2", 1, d.path)});
  EXPECT_EQ(rc, 2);
  EXPECT_EQ(slurp(d.file("message")), "said\n") << err;
  EXPECT_NE(err.find("rank 1 (test)"), std::string::npos) << err;
  EXPECT_NE(err.find("exited with code 2"), std::string::npos) << err;
}

TEST(LaunchWorkers, KilledBySignalIs128PlusSignal) {
  TempDir d("launch_sig");
  // ulimit -c 0: no core file from the test.
  const auto [rc, err] = run_capturing({sh("ulimit -c 0; kill -SEGV $$", 0, d.path)});
  EXPECT_EQ(rc, 128 + SIGSEGV);
  EXPECT_NE(err.find("killed by signal SIGSEGV"), std::string::npos) << err;
}

TEST(LaunchWorkers, ExecFailureIs127WithAMessage) {
  WorkerSpec w;
  w.argv = {"/nonexistent/fittrain_no_such_program"};
  w.label = "rank 0 (cuda:0)";
  const auto [rc, err] = run_capturing({w});
  EXPECT_EQ(rc, 127);
  EXPECT_NE(err.find("cannot start rank 0 (cuda:0): /nonexistent/fittrain_no_such_program: no such file"),
            std::string::npos)
      << err;
}

// Two workers that note a SIGTERM and exit; `sig` sent to their launcher reaches both as
// SIGTERM, once, and the launcher exits 0.
void expect_workers_stopped_by(int sig, const char* dir_name) {
  TempDir d(dir_name);
  const pid_t launcher = fork_launcher(term_noting_workers(d.path, false));
  ASSERT_GE(launcher, 0);
  EXPECT_TRUE(wait_file(d.file("R_0"), 5) && wait_file(d.file("R_1"), 5)) << "the workers did not start";
  ASSERT_EQ(::kill(launcher, sig), 0);
  EXPECT_EQ(wait_launcher(launcher, 8), 0);
  EXPECT_EQ(slurp(d.file("F_0")), "got\n");
  EXPECT_EQ(slurp(d.file("F_1")), "got\n");
}

TEST(LaunchWorkers, ForwardsSigtermOnceToEveryWorker) { expect_workers_stopped_by(SIGTERM, "launch_fwd"); }

// A launcher whose terminal went (SIGHUP) stops its workers as SIGTERM does, so they checkpoint
// (it died of it, and its workers with it, killed); under nohup SIGHUP stays ignored.
TEST(LaunchWorkers, ForwardsSighupAsSigtermUnlessIgnored) {
  expect_workers_stopped_by(SIGHUP, "launch_hup");

  TempDir n("launch_nohup");
  const pid_t launcher = fork_launcher(term_noting_workers(n.path, false), SIG_IGN);
  ASSERT_GE(launcher, 0);
  EXPECT_TRUE(wait_file(n.file("R_0"), 5) && wait_file(n.file("R_1"), 5)) << "the workers did not start";
  ASSERT_EQ(::kill(launcher, SIGHUP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(std::filesystem::exists(n.file("F_0"))) << "an ignored SIGHUP stopped the workers";
  ASSERT_EQ(::kill(launcher, SIGTERM), 0);
  EXPECT_EQ(wait_launcher(launcher, 8), 0);
  EXPECT_EQ(slurp(n.file("F_0")), "got\n");
}

TEST(LaunchWorkers, SecondSigtermKillsTheWorkers) {
  TempDir d("launch_fwd2");
  const auto t0 = Clock::now();
  const pid_t launcher = fork_launcher(term_noting_workers(d.path, true));
  ASSERT_GE(launcher, 0);
  EXPECT_TRUE(wait_file(d.file("R_0"), 5) && wait_file(d.file("R_1"), 5)) << "the workers did not start";
  ASSERT_EQ(::kill(launcher, SIGTERM), 0);
  EXPECT_TRUE(wait_file(d.file("F_0"), 5) && wait_file(d.file("F_1"), 5)) << "the first SIGTERM was not forwarded";
  ASSERT_EQ(::kill(launcher, SIGTERM), 0);
  EXPECT_EQ(wait_launcher(launcher, 8), 128 + SIGKILL);
  EXPECT_LT(seconds_since(t0), 8.0);  // the workers would run 10 s
  EXPECT_EQ(slurp(d.file("F_0")), "got\n");  // the second one was not forwarded: SIGKILL
  EXPECT_EQ(slurp(d.file("F_1")), "got\n");
}

TEST(LaunchWorkers, WorkersDieWithAKilledLauncher) {
  TempDir d("launch_pdeath");
  const pid_t launcher = fork_launcher({sh("echo $$ > w.pid; exec sleep 60", 0, d.path)});
  ASSERT_GE(launcher, 0);
  ASSERT_TRUE(wait_file(d.file("w.pid"), 5)) << "the worker did not start";
  const pid_t worker = std::atoi(slurp(d.file("w.pid")).c_str());
  ASSERT_GT(worker, 0);
  EXPECT_FALSE(dead(worker));
  ASSERT_EQ(::kill(launcher, SIGKILL), 0);
  EXPECT_EQ(wait_launcher(launcher, 5), -1);
  const auto t0 = Clock::now();
  while (!dead(worker) && seconds_since(t0) < 3) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(dead(worker)) << "worker " << worker << " outlived its launcher";
  if (!dead(worker)) ::kill(worker, SIGKILL);
}

// Clears the launch variables and restores what was there before.
class LaunchEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* n : kNames) {
      const char* v = std::getenv(n);
      saved_.push_back(v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(n);
    }
  }
  void TearDown() override {
    for (size_t i = 0; i < std::size(kNames); ++i)
      if (saved_[i]) ::setenv(kNames[i], saved_[i]->c_str(), 1);
      else ::unsetenv(kNames[i]);
  }
  static void set(const char* n, const char* v) { ASSERT_EQ(::setenv(n, v, 1), 0); }
  // The UserError's message, "" when none is thrown.
  static std::string error() {
    try {
      launched_rank_from_env();
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  }
  static constexpr const char* kNames[] = {kEnvRank, kEnvWorldSize, kEnvLocalRank, kEnvDevice, kEnvRendezvous};
  std::vector<std::optional<std::string>> saved_;
};

TEST_F(LaunchEnv, UnsetIsNullopt) { EXPECT_FALSE(launched_rank_from_env().has_value()); }

TEST_F(LaunchEnv, ValidValues) {
  set(kEnvRank, "1");
  set(kEnvWorldSize, "4");
  set(kEnvLocalRank, "1");
  set(kEnvDevice, "3");
  set(kEnvRendezvous, "/tmp/fittrain-rdzv-abc");
  const auto r = launched_rank_from_env();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 1);
  EXPECT_EQ(r->world, 4);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->device, 3);
  EXPECT_EQ(r->rendezvous, "/tmp/fittrain-rdzv-abc");
}

TEST_F(LaunchEnv, MalformedNamesTheVariable) {
  set(kEnvWorldSize, "2");
  set(kEnvLocalRank, "0");
  set(kEnvDevice, "0");
  set(kEnvRendezvous, "/tmp/x");
  set(kEnvRank, "x");
  EXPECT_NE(error().find("FITTRAIN_RANK='x'"), std::string::npos) << error();
  set(kEnvRank, "-1");
  EXPECT_NE(error().find("FITTRAIN_RANK"), std::string::npos) << error();
  set(kEnvRank, "2");  // rank >= world
  EXPECT_NE(error().find("FITTRAIN_RANK=2 must be below FITTRAIN_WORLD_SIZE=2"), std::string::npos) << error();
  set(kEnvRank, "1");
  EXPECT_EQ(error(), "");
  set(kEnvWorldSize, "0");
  EXPECT_NE(error().find("FITTRAIN_WORLD_SIZE=0"), std::string::npos) << error();
  set(kEnvWorldSize, "2");
  set(kEnvDevice, "");
  EXPECT_NE(error().find("FITTRAIN_DEVICE=''"), std::string::npos) << error();
  set(kEnvDevice, "0");
  ::unsetenv(kEnvLocalRank);  // one missing among set ones
  EXPECT_NE(error().find("FITTRAIN_LOCAL_RANK is not set"), std::string::npos) << error();
  set(kEnvLocalRank, "0");
  ::unsetenv(kEnvRendezvous);  // two ranks need a rendezvous folder
  EXPECT_NE(error().find("FITTRAIN_RENDEZVOUS"), std::string::npos) << error();
}

TEST(LaunchRendezvous, PublishThenWaitForTimeoutAndRemove) {
  const std::string dir = make_rendezvous_dir();
  ASSERT_TRUE(fs::is_directory(dir));
  EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all, fs::perms::owner_all);
  const std::vector<uint8_t> id = {0, 1, 2, 255, 128, 7};
  publish(dir, "nccl_id", id);
  EXPECT_EQ(wait_for(dir, "nccl_id", 1.0, id.size()), id);
  EXPECT_THROW(wait_for(dir, "nccl_id", 1.0, 128), UserError);  // wrong size
  // Only the published file is left (the temp file was renamed).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);

  const auto t0 = Clock::now();
  try {
    wait_for(dir, "missing", 0.2, 4);
    ADD_FAILURE() << "wait_for a missing file returned";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/missing"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0.2 s"), std::string::npos) << e.what();
  }
  EXPECT_GE(seconds_since(t0), 0.2);
  EXPECT_LT(seconds_since(t0), 2.0);

  remove_rendezvous_dir(dir);
  EXPECT_FALSE(fs::exists(dir));
  remove_rendezvous_dir(dir);  // again: no throw
}

// The ranks of a run that re-plans mid-run make a new communicator together, each after its
// own work (rank 0 writes the checkpoint, so the others usually come first): a rank must wait
// for the new NCCL id, not take the old one's file, which is still there.
TEST(LaunchRendezvous, EachCommunicatorGenerationWaitsForItsOwnToken) {
  const std::string dir = make_rendezvous_dir();
  auto unused = []() -> std::vector<uint8_t> {
    ADD_FAILURE() << "only rank 0 makes the token";
    return {};
  };
  const std::vector<uint8_t> first = {1, 2, 3, 4}, second = {5, 6, 7, 8};
  EXPECT_EQ(share_from_rank0(dir, 0, 0, 1.0, 4, [&] { return first; }), first);
  EXPECT_EQ(share_from_rank0(dir, 1, 0, 1.0, 4, unused), first);
  std::thread rank0([&] {  // generation 1: rank 0 publishes late
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    share_from_rank0(dir, 0, 1, 1.0, 4, [&] { return second; });
  });
  const auto t0 = Clock::now();
  EXPECT_EQ(share_from_rank0(dir, 1, 1, 5.0, 4, unused), second);
  EXPECT_GE(seconds_since(t0), 0.15);  // it waited for rank 0
  rank0.join();
  EXPECT_EQ(share_from_rank0(dir, 2, 1, 1.0, 4, unused), second);  // a third rank reads it too
  remove_rendezvous_dir(dir);
}

TEST(LaunchRendezvous, WaitForEndsWhenTheLauncherDies) {
  const std::string dir = make_rendezvous_dir();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  // The test forks a "launcher" that forks a waiter and dies 0.2 s later; the waiter reports
  // through the pipe how wait_for ended.
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    if (::fork() == 0) {
      std::string msg = "returned";
      try {
        wait_for(dir, "never", 5.0, 4);
      } catch (const UserError& e) {
        msg = e.what();
      }
      const ssize_t w = ::write(fds[1], msg.data(), msg.size());
      ::_exit(w > 0 ? 0 : 1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::_exit(0);
  }
  ::close(fds[1]);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  const auto t0 = Clock::now();
  struct pollfd pfd = {fds[0], POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 3000), 1) << "the waiter kept waiting after its launcher died";
  char buf[512] = {};
  const ssize_t n = ::read(fds[0], buf, sizeof buf - 1);
  ::close(fds[0]);
  EXPECT_GT(n, 0);
  EXPECT_NE(std::string(buf).find("launcher"), std::string::npos) << buf;
  EXPECT_LT(seconds_since(t0), 3.0);
  remove_rendezvous_dir(dir);
}

}  // namespace
}  // namespace ft
