// Builds without NCCL (no CUDA, or NCCL not found): GPU ranks cannot talk, so a launch of
// several GPU ranks is refused with what to install.
#ifndef FITTRAIN_HAVE_NCCL
#include "core/error.h"
#include "dist/nccl_communicator.h"

namespace ft {

namespace {
[[noreturn]] void no_nccl() {
  throw UserError("several GPU ranks need NCCL, and this build has none (install NCCL's development package, "
                  "e.g. libnccl-dev, and rebuild)");
}
}  // namespace

bool nccl_available() { return false; }
std::string nccl_build_description() { return "not built (needs the CUDA backend and NCCL's headers)"; }
std::vector<uint8_t> nccl_unique_id() { no_nccl(); }
std::unique_ptr<Communicator> make_nccl_communicator(Backend&, int, int, const std::vector<uint8_t>&, double,
                                                     const std::string&) {
  no_nccl();
}

}  // namespace ft
#endif
