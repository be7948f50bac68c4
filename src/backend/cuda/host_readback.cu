// HostReadback on CUDA (backend/backend.h): page-locked memory (a copy into pageable memory
// would block the host until it lands) and an event recorded after the copy. The destructor
// only frees the two, ignoring errors: the backend, and its stream, may be gone by then.
#include <algorithm>
#include <memory>

#include "backend/cuda/cuda_backend_impl.h"

namespace ft::cuda {

namespace {

class PinnedReadback final : public HostReadback {
 public:
  PinnedReadback(cudaStream_t stream, size_t bytes) : stream_(stream), bytes_(bytes) {
    CUDA_CHECK(cudaMallocHost(&buf_, std::max<size_t>(bytes, 1)));
    CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~PinnedReadback() override {
    cudaEventDestroy(done_);
    cudaFreeHost(buf_);
  }
  const void* data() const override { return buf_; }
  size_t bytes() const override { return bytes_; }
  void start(const void* src, size_t n) override {
    FT_CHECK(n <= bytes_, "HostReadback: ", n, " bytes into ", bytes_);
    CUDA_CHECK(cudaMemcpyAsync(buf_, src, n, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaEventRecord(done_, stream_));
  }
  void wait() override { CUDA_CHECK(cudaEventSynchronize(done_)); }

 private:
  cudaStream_t stream_;
  size_t bytes_;
  void* buf_ = nullptr;
  cudaEvent_t done_ = nullptr;
};

}  // namespace

std::unique_ptr<HostReadback> make_pinned_readback(cudaStream_t stream, size_t bytes) {
  return std::make_unique<PinnedReadback>(stream, bytes);
}

}  // namespace ft::cuda
