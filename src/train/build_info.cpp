#include "train/build_info.h"

#include "backend/backend.h"
#include "dist/mpi_communicator.h"
#include "dist/nccl_communicator.h"
#include "git_hash.h"  // FITTRAIN_GIT: generated at build time (cmake/git_hash.cmake)

#ifndef FITTRAIN_VERSION
#define FITTRAIN_VERSION "unknown"
#endif
#ifndef FITTRAIN_GIT
#define FITTRAIN_GIT "unknown"
#endif

namespace ft {

std::string build_info() {
  return std::string("fittrain ") + FITTRAIN_VERSION + " (git " + FITTRAIN_GIT + ")\n" +
         "  CPU backend: fp32, OpenMP, OpenBLAS\n" +
         "  CUDA backend: " + cuda_build_description() + "\n" +
         "  NCCL (GPU ranks): " + nccl_build_description() + "\n" +
         "  MPI (CPU ranks, multi-node launch): " + mpi_build_description();
}

}  // namespace ft
