// What the tests run under mpirun share: whether they can run here, and the mpirun command
// line (two CPU ranks on any machine, CI's included).
#pragma once
#include <cstdlib>
#include <string>

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

}  // namespace ft::testing
