// Helpers for tests that run the fittrain binary as a user would.
#pragma once
#include <unistd.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <csignal>
#include <cstdlib>
#include <string>
#include <vector>

#include "train/checkpoint.h"

extern char** environ;

namespace ft::testing {

struct CmdResult {
  int status = -1;  // exit status
  std::string output;  // stdout + stderr
};

// Tests outside the GPU_ suites run fittrain on the CPU wherever they run, as in CI: the GPUs
// are hidden from the processes they start (an empty CUDA_VISIBLE_DEVICES). On a machine with
// a GPU, --device auto picked CUDA for them: bf16 where fp32 was asserted, attention head
// sizes the CUDA kernels refuse, MPI's two ranks on one GPU (21 of 706 failed so).
inline bool in_gpu_test() {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return t && std::string(t->test_suite_name()).rfind("GPU_", 0) == 0;
}

// A shell command with its stdout and stderr captured (GPUs hidden unless in a GPU_ test; a
// command may still set CUDA_VISIBLE_DEVICES itself).
inline CmdResult run_command(const std::string& cmd) {
  CmdResult r;
  const std::string hide = in_gpu_test() ? "" : "export CUDA_VISIBLE_DEVICES=; ";
  FILE* p = popen((hide + cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// timeout_s > 0: run under timeout(1), so a hang ends with status 124 instead of hanging
// the test suite. env: variables for this run only ("A=1 B=2").
inline CmdResult run_fittrain(const std::string& args, int timeout_s = 0, const std::string& env = "") {
  const std::string prefix = (timeout_s > 0 ? "timeout -s KILL " + std::to_string(timeout_s) + " " : "") +
                             (env.empty() ? "" : "env " + env + " ");
  return run_command(prefix + std::string(FITTRAIN_BINARY) + " " + args);
}

// A checkpoint section as floats (the f32 sections: master, adam_m, adam_v; params on the CPU).
inline std::vector<float> checkpoint_floats(const std::string& path, const char* section) {
  ::ft::CheckpointReader rd(path);
  std::vector<float> v(rd.section_bytes(section) / sizeof(float));
  rd.read(section, v.data(), v.size() * sizeof(float));
  return v;
}

// fittrain running in the background with its stdout and stderr captured, for tests that act
// while it runs (signals, a second process on the same folder). args are after the binary;
// env entries ("NAME=value") are added to this process's environment.
class FittrainProcess {
 public:
  explicit FittrainProcess(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    // Everything built before fork: the child only execs.
    std::vector<std::string> a = {FITTRAIN_BINARY}, e = env;
    a.insert(a.end(), args.begin(), args.end());
    // The first of a name wins (glibc's getenv): `env`, then the hidden GPUs, then ours.
    if (!in_gpu_test()) e.emplace_back("CUDA_VISIBLE_DEVICES=");
    for (char** p = environ; *p; ++p) e.emplace_back(*p);
    std::vector<char*> argv, envp;
    for (auto& x : a) argv.push_back(x.data());
    argv.push_back(nullptr);
    for (auto& x : e) envp.push_back(x.data());
    envp.push_back(nullptr);
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      execve(FITTRAIN_BINARY, argv.data(), envp.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
  }
  ~FittrainProcess() {
    if (pid_ > 0 && !waited_) {
      kill(pid_, SIGKILL);
      wait();
    }
  }
  FittrainProcess(const FittrainProcess&) = delete;
  FittrainProcess& operator=(const FittrainProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& output() const { return out_; }
  // Reads the output until it contains `needle` (true) or the process closes it (false).
  bool read_until(const std::string& needle) {
    char buf[4096];
    ssize_t n;
    while (out_.find(needle) == std::string::npos && fd_ >= 0 && (n = read(fd_, buf, sizeof buf)) > 0)
      out_.append(buf, static_cast<size_t>(n));
    return out_.find(needle) != std::string::npos;
  }
  void signal(int sig) { kill(pid_, sig); }
  // Reads the rest of the output and waits: the exit status, or -1 when a signal ended it.
  int wait() {
    char buf[4096];
    ssize_t n;
    while (fd_ >= 0 && (n = read(fd_, buf, sizeof buf)) > 0) out_.append(buf, static_cast<size_t>(n));
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    int status = 0;
    waitpid(pid_, &status, 0);
    waited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  bool waited_ = false;
  std::string out_;
};

// The folders temp_dir made in this process, removed when it exits normally (a full test run
// left about a hundred under /tmp, up to 69 MiB each, and they piled up run after run).
// FT_KEEP_TEST_DIRS=1 keeps them for a look after a failure.
inline std::vector<std::string>& temp_dirs_made() {
  static std::vector<std::string> dirs;
  static const bool registered = [] {
    // registered after `dirs` is made, so it runs before `dirs` is destroyed
    std::atexit([] {
      const char* keep = std::getenv("FT_KEEP_TEST_DIRS");
      if (keep && std::string(keep) == "1") return;
      std::error_code ec;
      for (const std::string& d : temp_dirs_made()) std::filesystem::remove_all(d, ec);
    });
    return true;
  }();
  (void)registered;
  return dirs;
}

// A fresh, empty folder under /tmp named after the test, removed when the process exits.
inline std::string temp_dir(const std::string& name) {
  // pid in the name: concurrent test runs (ctest -j, two checkouts) never share a folder
  std::string d = "/tmp/fittrain_test_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  temp_dirs_made().push_back(d);
  return d;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// A metric by step from a metrics file (the rows that hold `key` as a number).
inline std::map<int64_t, double> metric_by_step(const std::string& metrics_path, const std::string& key) {
  std::map<int64_t, double> out;
  std::istringstream lines(read_file(metrics_path));
  std::string line;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains(key) && j[key].is_number()) out[j["step"].get<int64_t>()] = j[key].get<double>();
  }
  return out;
}

// The loss of each training step, and of each evaluation.
inline std::map<int64_t, double> step_losses(const std::string& metrics_path) {
  return metric_by_step(metrics_path, "loss");
}
inline std::map<int64_t, double> val_losses(const std::string& metrics_path) {
  return metric_by_step(metrics_path, "val_loss");
}

// A run resumed from a checkpoint is the run that went on: the same loss at each of `steps`
// in the two metrics files, and the same bytes in each of `sections` of the two checkpoints
// (each section over `min_bytes`: more than the blocks a checkpoint streams in).
inline void expect_resumed_is_the_run_that_went_on(const std::string& whole_metrics, const std::string& resumed_metrics,
                                                   std::initializer_list<int64_t> steps, const std::string& whole_ckpt,
                                                   const std::string& resumed_ckpt,
                                                   std::initializer_list<const char*> sections, size_t min_bytes) {
  const auto la = step_losses(whole_metrics), lb = step_losses(resumed_metrics);
  for (int64_t step : steps) {
    ASSERT_TRUE(la.count(step) && lb.count(step)) << "step " << step;
    EXPECT_EQ(lb.at(step), la.at(step)) << "step " << step;
  }
  ::ft::CheckpointReader ra(whole_ckpt), rb(resumed_ckpt);
  for (const char* section : sections) {
    ASSERT_GT(ra.section_bytes(section), min_bytes) << section;
    ASSERT_EQ(ra.section_bytes(section), rb.section_bytes(section)) << section;
    std::vector<char> x(ra.section_bytes(section)), y(x.size());
    ra.read(section, x.data(), x.size());
    rb.read(section, y.data(), y.size());
    EXPECT_TRUE(x == y) << section << " differs";
  }
}

// The output of a run whose ranks ran out of memory in the evaluation at `step` (another rank
// than rank 0 among them): they re-planned together, and the re-planned run evaluated `step`
// again before training step + 1 of `max_steps`.
inline void expect_evaluation_replanned_and_repeated(const std::string& out, int64_t step, int64_t max_steps) {
  const std::string at = std::to_string(step);
  EXPECT_NE(out.find("re-plan    out of memory in the evaluation at step " + at + ": 1 other rank(s) ran out of memory"),
            std::string::npos) << out;
  const size_t replanned = out.find("re-plan    out of memory mid-run: continuing from the last checkpoint");
  ASSERT_NE(replanned, std::string::npos) << out;
  const size_t again = out.find("eval       step " + at + " | val loss", replanned);
  EXPECT_NE(again, std::string::npos) << out;
  EXPECT_LT(again, out.find("step      " + std::to_string(step + 1) + "/" + std::to_string(max_steps), replanned)) << out;
}

// A small, fast model for end-to-end tests on the built-in corpus.
// A command that must fail as bad input: exit 2, one "fittrain: error: " line (or, for what
// only the workers see on a machine with several GPUs, the data, "fittrain: rank 0: error: "),
// and each of `want` in the output.
inline void expect_error(const std::string& args, const std::vector<std::string>& want) {
  CmdResult r = run_fittrain(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  EXPECT_TRUE(r.output.find("fittrain: error: ") != std::string::npos ||
              r.output.find("fittrain: rank 0: error: ") != std::string::npos)
      << args << "\n" << r.output;
  for (const std::string& w : want) EXPECT_NE(r.output.find(w), std::string::npos) << w << " in: " << args << "\n" << r.output;
}

inline const char* kSmallModel = "--n-layer 2 --n-head 2 --n-embd 64 --seq-len 64 --global-batch-size 16";

}  // namespace ft::testing
