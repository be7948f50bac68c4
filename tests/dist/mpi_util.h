// What the tests run under mpirun share: whether they can run here, and the mpirun command
// line (two CPU ranks on any machine, CI's included).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist/mpi_communicator.h"

namespace ft::testing {

// Why a test under mpirun cannot run here, or "" when it can.
inline std::string mpirun_missing() {
  if (!mpi_available()) return "this build has no MPI (install libopenmpi-dev and rebuild)";
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) return "mpirun is not installed (openmpi-bin)";
  return "";
}

// --oversubscribe: CI machines may have fewer cores than ranks; --allow-run-as-root: CI runs
// as root; --bind-to none and one OpenMP thread per rank: two ranks share the cores.
inline const char* kMpirun = "OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 ";

// kMpirun under `timeout seconds` (inside its environment assignments: "VAR=x timeout N mpirun").
inline std::string timed_mpirun(int seconds) {
  std::string s = kMpirun;
  return s.replace(s.find("mpirun"), 6, "timeout " + std::to_string(seconds) + " mpirun");
}

// The largest |a - b| of two runs' checkpoint section, relative to `ref`'s largest magnitude
// (an element near zero has no meaningful relative error of its own).
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& ref) {
  double scale = 0, worst = 0;
  for (float v : ref) scale = std::max(scale, std::fabs(double(v)));
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / scale);
  return worst;
}

}  // namespace ft::testing
