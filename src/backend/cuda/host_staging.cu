// HostStaging (cuda_backend_impl.h): Backend::copy_to_device without a stream synchronisation.
//
// copy_to_device promises that the caller may reuse its host memory as soon as the call
// returns. It kept that promise by synchronising the stream after each copy, so every upload
// of a micro-batch's inputs (at each step's start, and CDEIT's condition map between two of
// its first kernels) drained the queue: the GPU idled while the host queued the next launch.
// A device trace of CDEIT on an H100 (docs/PERFORMANCE.md, session 15) showed 0.67-0.85 ms of
// such gaps a step, the pageable 2 MiB copies themselves running at 13-15 GB/s.
//
// Now the host bytes are first copied into a page-locked ring and the DMA is queued from
// there, in stream order, with an event after it; the call returns at once. A region of the
// ring is written again only after the event of every earlier copy that used it has fired (the
// host waits then, which bounds how far it runs ahead, never the GPU). Copies larger than half
// the ring go through it in pieces. Sources inside an upload source (alloc_direct: page-locked
// blocks whose owner fences their reuse, a micro-batch's fields) skip the ring: one DMA, no
// host copy (the ring's memcpy of CDEIT's 2 MiB fields took 0.25 ms each on the host, at the
// step's start, while the GPU waited for the launches behind it).
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"

namespace ft::cuda {

HostStaging::HostStaging(size_t capacity) : capacity_(capacity) {}

HostStaging::~HostStaging() {
  // Errors ignored: the context may already be tearing down. Copies in flight land first.
  for (const Pending& p : pending_) {
    cudaEventSynchronize(p.done);
    cudaEventDestroy(p.done);
  }
  for (const auto& d : direct_) cudaFreeHost(const_cast<char*>(d.first));
  for (cudaEvent_t e : spare_) cudaEventDestroy(e);
  if (ring_) cudaFreeHost(ring_);
}

void HostStaging::retire_front() {
  Pending& p = pending_.front();
  CUDA_CHECK(cudaEventSynchronize(p.done));
  spare_.push_back(p.done);
  pending_.pop_front();
}

void* HostStaging::alloc_direct(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, std::max<size_t>(bytes, 1));
  if (err == cudaErrorMemoryAllocation) {  // the caller uses ordinary memory (uploads then staged)
    (void)cudaGetLastError();
    return nullptr;
  }
  CUDA_CHECK(err);
  direct_.emplace_back(static_cast<const char*>(p), bytes);
  return p;
}

void HostStaging::free_direct(void* p) {
  if (!p) return;
  auto it = std::find_if(direct_.begin(), direct_.end(), [&](const auto& d) { return d.first == p; });
  FT_CHECK(it != direct_.end(), "free_upload_source: not an upload source");
  direct_.erase(it);
  CUDA_CHECK_RELEASE(cudaFreeHost(p));
}

bool HostStaging::is_direct(const void* src, size_t bytes) const {
  const auto* s0 = static_cast<const char*>(src);
  for (const auto& [base, size] : direct_)
    if (s0 >= base && s0 + bytes <= base + size) return true;
  return false;
}

void HostStaging::copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  if (is_direct(src, bytes)) {  // its owner fences reuse: no staging
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    return;
  }
  // the ring's copies complete in submission order only on one stream (the compute stream)
  FT_CHECK(!stream_ || stream == stream_, "HostStaging: copies on two streams");
  stream_ = stream;
  if (!ring_) CUDA_CHECK(cudaMallocHost(&ring_, capacity_));
  const size_t piece_max = capacity_ / 2;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  while (bytes > 0) {
    const size_t n = std::min(bytes, piece_max);
    // 256-byte aligned pieces, from the head, or from the ring's start when it does not fit
    size_t at = (head_ + 255) / 256 * 256;
    if (at + n > capacity_) at = 0;
    // every earlier copy still reading [at, at + n) must have landed; they finish in
    // submission order (one stream), so waiting for the oldest first is never a wasted wait
    auto overlaps = [&] {
      for (const Pending& p : pending_)
        if (p.begin < at + n && at < p.end) return true;
      return false;
    };
    while (!pending_.empty() && overlaps()) retire_front();
    std::memcpy(ring_ + at, s, n);
    CUDA_CHECK(cudaMemcpyAsync(d, ring_ + at, n, cudaMemcpyHostToDevice, stream));
    cudaEvent_t e = nullptr;
    if (!spare_.empty()) {
      e = spare_.back();
      spare_.pop_back();
    } else {
      CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaEventRecord(e, stream));
    pending_.push_back(Pending{at, at + n, e});
    head_ = at + n;
    d += n;
    s += n;
    bytes -= n;
  }
  // fired events go back to the spares without waiting (keeps the list short)
  while (!pending_.empty()) {
    const cudaError_t q = cudaEventQuery(pending_.front().done);
    if (q == cudaErrorNotReady) break;  // still in flight: not an error
    CUDA_CHECK(q);
    retire_front();
  }
}

}  // namespace ft::cuda
