// Helpers for tests that run the fittrain binary as a user would.
#pragma once
#include <unistd.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ft::testing {

struct CmdResult {
  int status = -1;  // exit status
  std::string output;  // stdout + stderr
};

// timeout_s > 0: run under timeout(1), so a hang ends with status 124 instead of hanging
// the test suite.
inline CmdResult run_fittrain(const std::string& args, int timeout_s = 0) {
  const std::string prefix = timeout_s > 0 ? "timeout -s KILL " + std::to_string(timeout_s) + " " : "";
  const std::string cmd = prefix + std::string(FITTRAIN_BINARY) + " " + args + " 2>&1";
  CmdResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// A fresh, empty folder under /tmp named after the test.
inline std::string temp_dir(const std::string& name) {
  // pid in the name: concurrent test runs (ctest -j, two checkouts) never share a folder
  std::string d = "/tmp/fittrain_test_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// A small, fast model for end-to-end tests on the built-in corpus.
inline const char* kSmallModel = "--n-layer 2 --n-head 2 --n-embd 64 --seq-len 64 --global-batch-size 16";

}  // namespace ft::testing
