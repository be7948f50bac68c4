// The MPI communicator (see mpi_communicator.h) and the choice of communicator for a run.
#include "dist/mpi_communicator.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"

#ifdef FITTRAIN_HAVE_MPI
#include <mpi.h>

// Every MPI call is checked; a failure names the call, the file and the line.
#define MPI_CHECK(call)                                                                      \
  do {                                                                                       \
    const int err_ = (call);                                                                 \
    if (err_ != MPI_SUCCESS) {                                                               \
      char msg_[MPI_MAX_ERROR_STRING] = {0};                                                 \
      int len_ = 0;                                                                          \
      MPI_Error_string(err_, msg_, &len_);                                                   \
      throw ::ft::InternalError(                                                             \
          ::ft::detail::concat(__FILE__, ":", __LINE__, ": MPI error ", err_, " (", msg_, ") in ", #call)); \
    }                                                                                        \
  } while (0)
#endif

namespace ft {

#ifdef FITTRAIN_HAVE_MPI

bool mpi_available() { return true; }

std::string mpi_build_description() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(text, &len);  // allowed before MPI_Init
  std::string s(text, static_cast<size_t>(len));
  const size_t nl = s.find_first_of(",\n");
  return nl == std::string::npos ? s : s.substr(0, nl);
}

namespace {

// MPI_Finalize at process exit, when this process initialised MPI and nothing aborted it.
struct MpiFinalizer {
  bool owned = false;
  ~MpiFinalizer() {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (owned && init && !fin) MPI_Finalize();
  }
};
MpiFinalizer g_finalizer;

void init_mpi_once() {
  int init = 0;
  MPI_CHECK(MPI_Initialized(&init));
  if (init) return;
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
  g_finalizer.owned = true;
  // Errors come back as codes (checked by MPI_CHECK) instead of aborting inside MPI.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  FT_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI gives thread level ", provided, ", fittrain needs FUNNELED");
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(Backend& be) : be_(be) {
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string describe() const override {
    return "MPI, rank " + std::to_string(rank_) + " of " + std::to_string(world_) + " (CPU ranks)";
  }

  // f32 (gradients) or f64 (the step's sums: train/runtime.h).
  void all_reduce_sum(Tensor t, StreamHandle) override {
    const int n = count_of(t, "all_reduce_sum", DType::f64);
    if (n == 0) return;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data, n, t.dtype == DType::f64 ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD));
  }
  // One call per part: MPI on the CPU is synchronous, so a group saves no launches here.
  void all_reduce_group(std::span<const Tensor> parts, StreamHandle, CommLane) override {
    for (const Tensor& p : parts) {
      const int n = count_of(p, "all_reduce_group");
      if (n > 0) MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p.data, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    }
  }
  void reduce_scatter_group(std::span<const Tensor> chunks, StreamHandle, CommLane) override {
    for (const Tensor& c : chunks) {
      const int m = piece_of(c, "reduce_scatter_group");
      if (m == 0) continue;
      // MPI's in-place form leaves the result at the buffer's start; this rank's piece is
      // where ZeRO-1's layout keeps it, so the sum goes through a piece-sized buffer.
      piece_.resize(static_cast<size_t>(m));
      MPI_CHECK(MPI_Reduce_scatter_block(c.data, piece_.data(), m, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
      std::memcpy(static_cast<float*>(c.data) + static_cast<size_t>(rank_) * m, piece_.data(),
                  static_cast<size_t>(m) * sizeof(float));
    }
  }
  void all_gather_group(std::span<const Tensor> chunks, StreamHandle) override {
    for (const Tensor& c : chunks) {
      const int m = piece_of(c, "all_gather_group");
      if (m > 0) MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, m, MPI_FLOAT, c.data, m, MPI_FLOAT, MPI_COMM_WORLD));
    }
  }
  void all_reduce_sum(std::span<double> values) override {
    if (values.empty()) return;
    FT_CHECK(values.size() <= static_cast<size_t>(INT32_MAX), "all_reduce_sum: ", values.size(), " doubles");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM,
                            MPI_COMM_WORLD));
  }
  int64_t all_reduce_min(int64_t value) override {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD));
    return value;
  }
  void all_gather(Tensor shard, Tensor out, StreamHandle) override {
    const int m = count_of(shard, "all_gather"), n = count_of(out, "all_gather");
    FT_CHECK(static_cast<int64_t>(m) * world_ == n, "all_gather: ", shard.shape_str(), " from ", world_,
             " ranks into ", out.shape_str());
    const bool in_place = shard.data == static_cast<char*>(out.data) + static_cast<size_t>(rank_) * shard.bytes();
    MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : shard.data, m, MPI_FLOAT, out.data, m, MPI_FLOAT,
                            MPI_COMM_WORLD));
  }
  void broadcast(Tensor t, int root) override {
    FT_CHECK(root >= 0 && root < world_, "broadcast from rank ", root, " of ", world_);
    FT_CHECK(t.bytes() <= static_cast<size_t>(INT32_MAX), "broadcast: ", t.bytes(), " bytes");
    host_only(t, "broadcast");
    // Any dtype: the bytes.
    MPI_CHECK(MPI_Bcast(t.data, static_cast<int>(t.bytes()), MPI_BYTE, root, MPI_COMM_WORLD));
  }
  void barrier() override { MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

 private:
  void host_only(const Tensor& t, const char* op) const {
    if (be_.device() != DeviceKind::cpu)
      throw InternalError(std::string(op) + ": the MPI communicator works on host memory (CPU backend); this "
                          "tensor is on the device (GPU ranks use NCCL)");
  }
  // `also`: a dtype this collective takes besides f32.
  int count_of(const Tensor& t, const char* op, DType also = DType::f32) const {
    host_only(t, op);
    FT_CHECK(t.dtype == DType::f32 || t.dtype == also, op, ": MPI collectives take f32 tensors, got ", t.shape_str());
    FT_CHECK(t.numel() <= INT32_MAX, op, ": ", t.numel(), " elements exceed an MPI count");
    return static_cast<int>(t.numel());
  }
  // A ZeRO-1 chunk's piece: its elements / world (communicator.h).
  int piece_of(const Tensor& c, const char* op) const {
    const int n = count_of(c, op);
    FT_CHECK(n % world_ == 0, op, ": a chunk of ", n, " elements does not split over ", world_, " ranks");
    return n / world_;
  }
  Backend& be_;
  int rank_ = 0, world_ = 1;
  std::vector<float> piece_;  // reduce_scatter_group's result before it moves into place
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(Backend& backend) {
  FT_USER_CHECK(backend.device() == DeviceKind::cpu,
                "the MPI communicator carries CPU ranks; GPU ranks use NCCL");
  init_mpi_once();
  return std::make_unique<MpiCommunicator>(backend);
}

std::vector<uint8_t> mpi_share_from_rank0(std::vector<uint8_t> bytes) {
  init_mpi_once();
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  uint64_t n = bytes.size();
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
  bytes.resize(n);
  FT_CHECK(n <= static_cast<uint64_t>(INT32_MAX), "mpi_share_from_rank0: ", n, " bytes");
  MPI_CHECK(MPI_Bcast(bytes.data(), static_cast<int>(n), MPI_BYTE, 0, MPI_COMM_WORLD));
  return bytes;
}

void abort_other_ranks_on_error(int exit_code) {
  int init = 0, fin = 0, world = 1;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world <= 1) return;
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
}

#else  // no MPI in this build

bool mpi_available() { return false; }
std::string mpi_build_description() { return "not built (no MPI found when this binary was configured)"; }

std::unique_ptr<Communicator> make_mpi_communicator(Backend&) {
  throw UserError(detail::concat("this run was started with ", launcher_world_size(),
                                 " ranks (mpirun or srun), but this build has no MPI (install libopenmpi-dev and "
                                 "rebuild), so each rank would train alone"));
}

std::vector<uint8_t> mpi_share_from_rank0(std::vector<uint8_t>) {
  throw UserError(detail::concat("this run was started with ", launcher_world_size(),
                                 " ranks (mpirun or srun), but this build has no MPI to hand them the NCCL id ",
                                 "(install libopenmpi-dev and rebuild)"));
}

void abort_other_ranks_on_error(int) {}

#endif


}  // namespace ft
