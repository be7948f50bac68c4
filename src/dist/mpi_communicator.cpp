// The MPI communicator (see mpi_communicator.h) and the choice of communicator for a run.
#include "dist/mpi_communicator.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

// Bounds this rank's blocking MPI calls by --comm-timeout. MPI's collectives have no deadline
// of their own, so one rank that hangs would hang every other in its next collective. A thread
// of the watch's own (it never calls MPI, so FUNNELED holds) ends this process when one call
// has waited longer than the limit; mpirun (or srun) then ends the other ranks. The message
// names this rank and the call, as the NCCL communicator's watchdog does.
class CallWatch {
 public:
  // `ranks`: what the ranks are, for the message ("CPU ranks" for the MPI communicator's own).
  CallWatch(double timeout_s, int rank, int world, const char* ranks = nullptr)
      : timeout_s_(timeout_s), rank_(rank), world_(world), ranks_(ranks ? std::string("MPI, ") + ranks : "MPI") {
    thread_ = std::thread([this] { watch(); });
  }
  ~CallWatch() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  CallWatch(const CallWatch&) = delete;
  CallWatch& operator=(const CallWatch&) = delete;

  // One blocking call's scope; `what` names it. bounded = false: a wait the limit does not
  // cover (Communicator::barrier_without_timeout).
  class Scope {
   public:
    Scope(CallWatch& w, const char* what, bool bounded = true) : w_(w) { w_.set(what, bounded, true); }
    ~Scope() { w_.set(nullptr, true, false); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CallWatch& w_;
  };

 private:
  using Clock = std::chrono::steady_clock;
  void set(const char* what, bool bounded, bool active) {
    std::lock_guard<std::mutex> lock(mu_);
    what_ = what;
    bounded_ = bounded;
    active_ = active;
    since_ = Clock::now();
  }
  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (stop_ || !active_ || !bounded_) continue;
      if (std::chrono::duration<double>(Clock::now() - since_).count() <= timeout_s_) continue;
      std::fprintf(stderr,
                   "fittrain: rank %d: error: rank %d of %d (%s): a collective (%s) did not finish "
                   "within %g s: another rank died, hangs, or is far behind (see its output); --comm-timeout sets "
                   "the limit\n",
                   rank_, rank_, world_, ranks_.c_str(), what_, timeout_s_);
      std::fflush(stderr);
      std::fflush(stdout);
      ::_exit(1);  // the main thread is blocked inside MPI: only the process's end frees it
    }
  }

  const double timeout_s_;
  const int rank_, world_;
  const std::string ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, active_ = false, bounded_ = true;
  const char* what_ = nullptr;
  Clock::time_point since_;
  std::thread thread_;
};

// Initialises MPI once. MPI's start is itself a wait for every rank (Open MPI's exchange of
// addresses through the launcher), so it is bounded like any collective: a rank that never
// starts MPI would otherwise hold the others in MPI_Init_thread for ever. `rank`/`world`: as
// the launcher announced them (MPI cannot tell before it has started).
void init_mpi_once(double timeout_s, int rank, int world) {
  int init = 0;
  MPI_CHECK(MPI_Initialized(&init));
  if (init) return;
  int provided = 0;
  {
    CallWatch watch(timeout_s, rank, world);
    CallWatch::Scope in(watch, "MPI's start, waiting for every rank to start MPI");
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
  }
  g_finalizer.owned = true;
  // Errors come back as codes (checked by MPI_CHECK) instead of aborting inside MPI.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  FT_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI gives thread level ", provided, ", fittrain needs FUNNELED");
}

// FT_TEST_HANG_BEFORE_MPI_AT=R: rank R sleeps until it is killed before it starts MPI (the
// other ranks' start must time out, not wait for ever).
void test_hang_before_mpi(int rank) {
  const char* v = std::getenv("FT_TEST_HANG_BEFORE_MPI_AT");
  if (!v || std::string(v) != std::to_string(rank)) return;
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(Backend& be, double timeout_s) : be_(be) {
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
    watch_ = std::make_unique<CallWatch>(timeout_s, rank_, world_, "CPU ranks");
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
    CallWatch::Scope in(*watch_, "all-reduce");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data, n, t.dtype == DType::f64 ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD));
  }
  // One call per part: MPI on the CPU is synchronous, so a group saves no launches here.
  void all_reduce_group(std::span<const Tensor> parts, StreamHandle, CommLane) override {
    CallWatch::Scope in(*watch_, "gradient bucket reduction");
    for (const Tensor& p : parts) {
      const int n = count_of(p, "all_reduce_group");
      if (n > 0) MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p.data, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    }
  }
  void reduce_scatter_group(std::span<const Tensor> chunks, StreamHandle, CommLane) override {
    CallWatch::Scope in(*watch_, "gradient reduce-scatter");
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
    CallWatch::Scope in(*watch_, "parameter all-gather");
    for (const Tensor& c : chunks) {
      const int m = piece_of(c, "all_gather_group");
      if (m > 0) MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, m, MPI_FLOAT, c.data, m, MPI_FLOAT, MPI_COMM_WORLD));
    }
  }
  void all_reduce_sum(std::span<double> values) override {
    if (values.empty()) return;
    FT_CHECK(values.size() <= static_cast<size_t>(INT32_MAX), "all_reduce_sum: ", values.size(), " doubles");
    CallWatch::Scope in(*watch_, "all-reduce of host values");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM,
                            MPI_COMM_WORLD));
  }
  int64_t all_reduce_min(int64_t value) override {
    CallWatch::Scope in(*watch_, "all-reduce (minimum)");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD));
    return value;
  }
  void all_gather(Tensor shard, Tensor out, StreamHandle) override {
    const int m = count_of(shard, "all_gather"), n = count_of(out, "all_gather");
    FT_CHECK(static_cast<int64_t>(m) * world_ == n, "all_gather: ", shard.shape_str(), " from ", world_,
             " ranks into ", out.shape_str());
    const bool in_place = shard.data == static_cast<char*>(out.data) + static_cast<size_t>(rank_) * shard.bytes();
    CallWatch::Scope in(*watch_, "all-gather");
    MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : shard.data, m, MPI_FLOAT, out.data, m, MPI_FLOAT,
                            MPI_COMM_WORLD));
  }
  void broadcast(Tensor t, int root) override {
    FT_CHECK(root >= 0 && root < world_, "broadcast from rank ", root, " of ", world_);
    FT_CHECK(t.bytes() <= static_cast<size_t>(INT32_MAX), "broadcast: ", t.bytes(), " bytes");
    host_only(t, "broadcast");
    // Any dtype: the bytes.
    CallWatch::Scope in(*watch_, "broadcast");
    MPI_CHECK(MPI_Bcast(t.data, static_cast<int>(t.bytes()), MPI_BYTE, root, MPI_COMM_WORLD));
  }
  void barrier() override {
    CallWatch::Scope in(*watch_, "barrier");
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  }
  void barrier_without_timeout() override {
    CallWatch::Scope in(*watch_, "barrier without a time limit", /*bounded=*/false);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  }

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
  std::unique_ptr<CallWatch> watch_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(Backend& backend, double timeout_s) {
  FT_USER_CHECK(backend.device() == DeviceKind::cpu,
                "the MPI communicator carries CPU ranks; GPU ranks use NCCL");
  init_mpi_once(timeout_s, launcher_rank(), launcher_world_size());
  return std::make_unique<MpiCommunicator>(backend, timeout_s);
}

int mpi_join(int rank, int world, double timeout_s) {
  test_hang_before_mpi(rank);
  init_mpi_once(timeout_s, rank, world);
  int r = 0, w = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &w));
  FT_USER_CHECK(r == rank && w == world, "the launcher started this process as rank ", rank, " of ", world,
                " but MPI sees rank ", r, " of ", w, ": the launcher did not wire its ranks through MPI (srun needs ",
                "an MPI plugin, e.g. srun --mpi=pmix; mpirun must be the MPI fittrain was built with: ",
                mpi_build_description(), "), and alone each would train on its own");
  CallWatch watch(timeout_s, r, w);
  CallWatch::Scope in(watch, "finding the ranks on this machine");
  MPI_Comm here;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &here));
  int n = 1;
  MPI_CHECK(MPI_Comm_size(here, &n));
  MPI_CHECK(MPI_Comm_free(&here));
  return n;
}

std::vector<uint8_t> mpi_share_from_rank0(std::vector<uint8_t> bytes, double timeout_s) {
  init_mpi_once(timeout_s, launcher_rank(), launcher_world_size());
  int rank = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  CallWatch watch(timeout_s, rank, world);
  CallWatch::Scope in(watch, "broadcast of rank 0's NCCL id");
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

std::unique_ptr<Communicator> make_mpi_communicator(Backend&, double) {
  throw UserError(detail::concat("this run was started with ", launcher_world_size(),
                                 " ranks (mpirun or srun), but this build has no MPI (install libopenmpi-dev and "
                                 "rebuild), so each rank would train alone"));
}

int mpi_join(int, int, double) {
  throw UserError(detail::concat("this run was started with ", launcher_world_size(),
                                 " ranks (mpirun or srun), but this build has no MPI (install libopenmpi-dev and "
                                 "rebuild), so each rank would train alone"));
}

std::vector<uint8_t> mpi_share_from_rank0(std::vector<uint8_t>, double) {
  throw UserError(detail::concat("this run was started with ", launcher_world_size(),
                                 " ranks (mpirun or srun), but this build has no MPI to hand them the NCCL id ",
                                 "(install libopenmpi-dev and rebuild)"));
}

void abort_other_ranks_on_error(int) {}

#endif


}  // namespace ft
