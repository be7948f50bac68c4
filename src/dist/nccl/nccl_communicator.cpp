// The NCCL communicator (see dist/nccl_communicator.h). Compiled only into CUDA builds that
// found NCCL; the CPU build has dist/nccl_fallback.cpp instead.
#include "dist/nccl_communicator.h"

#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <cuda_runtime.h>

#include "core/error.h"

// CUDA runtime calls of this file (host code only: backend/cuda/cuda_common.cuh is for nvcc).
#define CUDA_CHECK(call)                                                                          \
  do {                                                                                            \
    const cudaError_t e_ = (call);                                                                \
    if (e_ == cudaErrorMemoryAllocation) {                                                        \
      (void)cudaGetLastError();                                                                   \
      throw ::ft::OutOfMemoryError(::ft::detail::concat(__FILE__, ":", __LINE__,                  \
                                                        ": out of device memory in ", #call));    \
    }                                                                                             \
    if (e_ != cudaSuccess)                                                                        \
      throw ::ft::InternalError(::ft::detail::concat(__FILE__, ":", __LINE__, ": CUDA error ",    \
                                                     cudaGetErrorName(e_), " (", cudaGetErrorString(e_), \
                                                     ") in ", #call));                            \
  } while (0)

// Every NCCL call is checked; a failure names the call, the file, the line and NCCL's own
// explanation of the last error.
#define NCCL_CHECK(comm, call)                                                                    \
  do {                                                                                            \
    const ncclResult_t r_ = (call);                                                               \
    if (r_ != ncclSuccess)                                                                        \
      throw ::ft::InternalError(::ft::detail::concat(__FILE__, ":", __LINE__, ": NCCL error ",    \
                                                     ncclGetErrorString(r_), " (",                \
                                                     ncclGetLastError(comm), ") in ", #call));    \
  } while (0)

namespace ft {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::f64: return ncclFloat64;
    default: break;
  }
  throw InternalError(detail::concat("NCCL: no reduction for dtype ", dtype_name(t)));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Backend& be, int rank, int world, const ncclUniqueId& id, double timeout_s, std::string where)
      : be_(be), rank_(rank), world_(world), timeout_(timeout_s), where_(std::move(where)) {
    CUDA_CHECK(cudaGetDevice(&device_));
    // The watchdog bounds the initialisation too: a rank that never joins would otherwise
    // keep the others in ncclCommInitRank forever.
    init_started_ = Clock::now();
    watchdog_ = std::thread([this] { watch(); });
    try {
      // Capped (FT_NCCL_CTAS, default 16): NCCL's buffers are per channel, and 16 ran as
      // fast as NCCL's own 32 on 2 H200s with 0.31 GiB less a rank (nccl_communicator.h).
      ncclConfig_t main_cfg = NCCL_CONFIG_INITIALIZER;
      if (const int k = nccl_main_ctas(); k > 0) {
        main_cfg.maxCTAs = k;
        main_ctas_ = k;
      }
      NCCL_CHECK(nullptr, ncclCommInitRankConfig(&comm_, world_, id, rank_, &main_cfg));
      CUDA_CHECK(cudaMalloc(&scratch_, kScratchBytes));
      // A reduction that runs beside the backward with time to spare need not take NCCL's
      // full CTA count: a rank ahead of its peer otherwise holds that many SMs spinning
      // until the peer arrives, and the backward's products run on the rest (on 2 H200s,
      // kernels beside NCCL ran 0.5-1.7 ms a step slower; docs/PERFORMANCE.md, session 32).
      if (const int k = nccl_background_ctas(); k > 0) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.maxCTAs = k;
        NCCL_CHECK(comm_, ncclCommSplit(comm_, 0, rank_, &background_, &cfg));
        background_ctas_ = k;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        initialised_ = true;
      }
      // One small collective on each communicator now: the connections and buffers NCCL makes
      // at a communicator's first use (those NCCL_RUNTIME_CONNECT leaves for later) then exist
      // before the runtime's memory is measured for the plan. The background one's first
      // reduction came in the second step, after the arena, outside the plan.
      first_use(comm_, "first all-reduce");
      if (background_) first_use(background_, "first all-reduce of the background communicator");
    } catch (...) {
      // A half-made communicator has no destructor run: its watchdog thread must be joined
      // (a joinable std::thread destroyed ends the process) and NCCL's communicators aborted.
      release();
      throw;
    }
  }

  ~NcclCommunicator() override { release(); }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string describe() const override {
    return detail::concat("NCCL ", NCCL_MAJOR, ".", NCCL_MINOR, ", rank ", rank_, " of ", world_, " (", where_, ")",
                          main_ctas_ ? detail::concat(", at most ", main_ctas_, " CTAs") : std::string(),
                          background_ ? detail::concat(", background reductions on ", background_ctas_, " CTAs")
                                      : std::string());
  }

  void all_reduce_sum(Tensor t, StreamHandle stream) override {
    if (t.numel() == 0) return;
    cudaStream_t s = native(stream);
    NCCL_CHECK(comm_, ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()), nccl_type(t.dtype), ncclSum,
                                    comm_, s));
    track(s, "all-reduce");
  }

  void all_reduce_group(std::span<const Tensor> parts, StreamHandle stream, CommLane lane) override {
    ncclComm_t comm = lane_comm(lane);
    grouped(parts, stream, "gradient bucket reduction", [&](const Tensor& p, cudaStream_t s) {
      if (p.numel() > 0)
        NCCL_CHECK(comm, ncclAllReduce(p.data, p.data, static_cast<size_t>(p.numel()), nccl_type(p.dtype), ncclSum,
                                       comm, s));
    });
  }

  // In place: a chunk's piece r starts r * piece elements in, where NCCL's in-place
  // reduce-scatter writes rank r's result and its in-place all-gather reads rank r's input.
  void reduce_scatter_group(std::span<const Tensor> chunks, StreamHandle stream, CommLane lane) override {
    ncclComm_t comm = lane_comm(lane);
    grouped(chunks, stream, "gradient reduce-scatter", [&](const Tensor& c, cudaStream_t s) {
      const size_t m = piece_of(c, "reduce_scatter_group");
      if (m > 0)
        NCCL_CHECK(comm, ncclReduceScatter(c.data, static_cast<char*>(c.data) + rank_ * m * dtype_size(c.dtype), m,
                                           nccl_type(c.dtype), ncclSum, comm, s));
    });
  }

  void all_gather_group(std::span<const Tensor> chunks, StreamHandle stream) override {
    grouped(chunks, stream, "parameter all-gather", [&](const Tensor& c, cudaStream_t s) {
      const size_t bytes = piece_of(c, "all_gather_group") * dtype_size(c.dtype);
      if (bytes > 0)
        NCCL_CHECK(comm_, ncclAllGather(static_cast<char*>(c.data) + rank_ * bytes, c.data, bytes, ncclUint8, comm_,
                                        s));
    });
  }

  void all_gather(Tensor shard, Tensor out, StreamHandle stream) override {
    FT_CHECK(shard.numel() * world_ == out.numel() && shard.dtype == out.dtype, "all_gather: ", shard.shape_str(),
             " from ", world_, " ranks into ", out.shape_str());
    cudaStream_t s = native(stream);
    // Bytes, so every dtype gathers alike.
    NCCL_CHECK(comm_, ncclAllGather(shard.data, out.data, shard.bytes(), ncclUint8, comm_, s));
    track(s, "all-gather");
  }

  void all_reduce_sum(std::span<double> values) override {
    host_collective(values.data(), values.size() * sizeof(double), [&](void* buf, size_t bytes, cudaStream_t s) {
      NCCL_CHECK(comm_, ncclAllReduce(buf, buf, bytes / sizeof(double), ncclFloat64, ncclSum, comm_, s));
    }, sizeof(double), "all-reduce of host values");
  }

  int64_t all_reduce_min(int64_t value) override { return min_over_ranks(value, "all-reduce (minimum)", true); }

  void broadcast(Tensor t, int root) override {
    FT_CHECK(root >= 0 && root < world_, "broadcast from rank ", root, " of ", world_);
    host_collective(t.data, t.bytes(), [&](void* buf, size_t bytes, cudaStream_t s) {
      NCCL_CHECK(comm_, ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, s));
    }, 1, "broadcast");
  }

  void barrier() override { (void)min_over_ranks(1, "barrier", true); }
  void barrier_without_timeout() override { (void)min_over_ranks(1, "barrier without a time limit", false); }

 private:
  // Stops the watchdog and frees everything. Abort, not finalize: every collective this
  // process queued has completed by now on a normal exit, and on an error path a peer may be
  // gone, where finalize would wait.
  void release() {
    stop_watchdog();
    if (background_) ncclCommAbort(background_);
    if (comm_) ncclCommAbort(comm_);
    background_ = comm_ = nullptr;
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (auto& p : pending_) cudaEventDestroy(p.event);
    free_events_.clear();
    pending_.clear();
    if (scratch_) cudaFree(scratch_);
    scratch_ = nullptr;
  }

  // One all-reduce on `c`, checked, waited for under the watchdog.
  void first_use(ncclComm_t c, const char* what) {
    const int64_t value = min_over_ranks(1, what, true, c);
    FT_CHECK(value == 1, "NCCL: the ", what, " gave ", value);
  }

  // The minimum of `value` over the ranks (on `c`; null: the main communicator); `bounded`:
  // the watchdog times the wait.
  int64_t min_over_ranks(int64_t value, const char* what, bool bounded, ncclComm_t c = nullptr) {
    if (!c) c = comm_;
    host_collective(&value, sizeof value, [&](void* buf, size_t, cudaStream_t s) {
      NCCL_CHECK(c, ncclAllReduce(buf, buf, 1, ncclInt64, ncclMin, c, s));
    }, sizeof value, what, bounded);
    return value;
  }

  static constexpr size_t kScratchBytes = 64 << 10;

  struct Pending {
    cudaEvent_t event;
    Clock::time_point queued;
    const char* what;
    bool bounded;  // by --comm-timeout (barrier_without_timeout: not)
  };

  // Every rank names the same lane for the same collective (one schedule), so the two
  // communicators each see one order; both queue on the caller's stream, one after the other.
  ncclComm_t lane_comm(CommLane lane) const { return lane == CommLane::background && background_ ? background_ : comm_; }

  // One collective per tensor, issued as one NCCL group (one launch) on `stream`.
  template <class Op>
  void grouped(std::span<const Tensor> ts, StreamHandle stream, const char* what, Op op) {
    if (ts.empty()) return;
    cudaStream_t s = native(stream);
    NCCL_CHECK(comm_, ncclGroupStart());
    for (const Tensor& t : ts) op(t, s);
    NCCL_CHECK(comm_, ncclGroupEnd());
    track(s, what);
  }

  size_t piece_of(const Tensor& c, const char* op) const {
    FT_CHECK(c.numel() % world_ == 0, op, ": a chunk of ", c.numel(), " elements does not split over ", world_,
             " ranks");
    return static_cast<size_t>(c.numel() / world_);
  }

  cudaStream_t native(StreamHandle s) {
    return static_cast<cudaStream_t>(s.native ? s.native : be_.compute_stream().native);
  }

  // Host bytes through the device scratch, in pieces of whole elements: copy in, `op`, copy
  // out, wait (the watchdog bounds the wait).
  template <class Op>
  void host_collective(void* host, size_t bytes, Op op, size_t elem, const char* what, bool bounded = true) {
    cudaStream_t s = native({});
    auto* p = static_cast<char*>(host);
    const size_t piece = kScratchBytes / elem * elem;
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(piece, bytes - done);
      CUDA_CHECK(cudaMemcpyAsync(scratch_, p + done, n, cudaMemcpyHostToDevice, s));
      op(scratch_, n, s);
      // Tracked before the copy back: a copy into pageable host memory blocks this thread
      // until the collective is done, and the watchdog must already know what it waits for.
      track(s, what, bounded);
      CUDA_CHECK(cudaMemcpyAsync(p + done, scratch_, n, cudaMemcpyDeviceToHost, s));
      CUDA_CHECK(cudaStreamSynchronize(s));
      done += n;
    }
  }

  // Remembers that a collective was queued on `s` now, for the watchdog.
  void track(cudaStream_t s, const char* what, bool bounded = true) {
    std::lock_guard<std::mutex> lock(mu_);
    cudaEvent_t e;
    if (!free_events_.empty()) {
      e = free_events_.back();
      free_events_.pop_back();
    } else {
      CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaEventRecord(e, s));
    pending_.push_back(Pending{e, Clock::now(), what, bounded});
  }

  void watch() {
    cudaSetDevice(device_);  // event queries from this thread name the same device
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (stop_) break;
      const auto now = Clock::now();
      if (!initialised_) {
        if (std::chrono::duration<double>(now - init_started_).count() > timeout_)
          die(detail::concat("NCCL initialisation did not finish within ", timeout_, " s: another rank did not ",
                             "start or died (see its output); --comm-timeout sets the limit"));
        continue;
      }
      for (ncclComm_t c : {comm_, background_}) {
        ncclResult_t async = ncclSuccess;
        if (c && ncclCommGetAsyncError(c, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
          die(detail::concat("NCCL error ", ncclGetErrorString(async), ": ", ncclGetLastError(c),
                             " (a peer rank may have died; see its output)"));
      }
      while (!pending_.empty()) {
        const cudaError_t q = cudaEventQuery(pending_.front().event);
        if (q == cudaErrorNotReady) break;
        if (q != cudaSuccess) die(detail::concat("CUDA error ", cudaGetErrorName(q), " while waiting for ",
                                                 pending_.front().what));
        free_events_.push_back(pending_.front().event);
        pending_.pop_front();
      }
      if (!pending_.empty() && pending_.front().bounded) {
        const double waited = std::chrono::duration<double>(now - pending_.front().queued).count();
        if (waited > timeout_)
          die(detail::concat("a collective (", pending_.front().what, ") did not finish within ", timeout_,
                             " s: another rank died, hangs, or is far behind (see its output); --comm-timeout ",
                             "sets the limit"));
      }
    }
  }

  // Ends this process from the watchdog: the main thread may be blocked inside NCCL or a
  // stream wait that will never return. The launcher (or mpirun) then ends the other ranks.
  [[noreturn]] void die(const std::string& why) {
    std::fprintf(stderr, "fittrain: rank %d: error: rank %d of %d (%s): %s\n", rank_, rank_, world_, where_.c_str(),
                 why.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    _exit(1);
  }

  void stop_watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }

  Backend& be_;
  int rank_, world_;
  double timeout_;
  std::string where_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  ncclComm_t background_ = nullptr;  // CommLane::background's (FT_NCCL_BACKGROUND_CTAS), or none
  int background_ctas_ = 0;
  int main_ctas_ = 0;  // FT_NCCL_CTAS, or 0: NCCL's choice
  void* scratch_ = nullptr;

  std::mutex mu_;  // guards everything below (the watchdog reads it)
  std::condition_variable cv_;
  bool stop_ = false, initialised_ = false;
  Clock::time_point init_started_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  std::thread watchdog_;
};

}  // namespace

bool nccl_available() { return true; }
std::string nccl_build_description() {
  int v = 0;
  ncclGetVersion(&v);  // the library loaded now, which may differ from the headers built with
  return detail::concat("built with ", NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH, ", running ", v / 10000, ".",
                        v / 100 % 100, ".", v % 100);
}

std::vector<uint8_t> nccl_unique_id() {
  ncclUniqueId id;
  NCCL_CHECK(nullptr, ncclGetUniqueId(&id));
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(&id), reinterpret_cast<const uint8_t*>(&id) + sizeof id);
}

std::unique_ptr<Communicator> make_nccl_communicator(Backend& backend, int rank, int world,
                                                     const std::vector<uint8_t>& id, double timeout_s,
                                                     const std::string& where) {
  FT_CHECK(backend.device() == DeviceKind::cuda, "the NCCL communicator needs the CUDA backend");
  FT_CHECK(id.size() == sizeof(ncclUniqueId), "NCCL unique id of ", id.size(), " bytes, expected ",
           sizeof(ncclUniqueId));
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof uid);
  return std::make_unique<NcclCommunicator>(backend, rank, world, uid, timeout_s, where);
}

}  // namespace ft
