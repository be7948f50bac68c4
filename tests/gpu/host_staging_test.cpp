// copy_to_device on CUDA returns before the copy lands (backend/cuda/host_staging.cu): the
// caller's host memory must be reusable at once, copies must land in the order they were
// queued, the ring must wrap and wait for its own earlier copies, and a copy larger than the
// ring must pass through it in pieces. The stream is kept busy first, so that a copy that read
// the caller's memory late, or a ring region rewritten before its copy ran, would show.
#include <cuda_runtime.h>

#include "gpu_test_util.h"

namespace ft::gputest {

namespace {

// Queues about n * 20 element reads of work so that the copies behind it wait on the device.
void keep_busy(Backend& be, Tensor out, Tensor a, Tensor b) {
  for (int k = 0; k < 20; ++k) be.residual_forward(out, a, b);
}

}  // namespace

TEST(GPU_HostStaging, SourceReusableAtOnceAndCopiesLandInOrder) {
  GPU_SKIP_IF_NONE();
  const int64_t busy = 16 << 20, piece = 256 << 10, pieces = 96;  // 96 x 1 MiB: the 16 MiB ring wraps 6 times
  const int64_t big = 40 << 20;                                    // 160 MiB: more than the ring
  GpuEnv env({1, 1, 64, 1, 64, 64}, (size_t)(3 * busy + pieces * piece + 2 * big) * 4 + (64 << 20));
  Backend& be = env.be();
  Tensor a = env.tensor(DType::f32, {busy}), b = env.tensor(DType::f32, {busy}), o = env.tensor(DType::f32, {busy});
  Tensor dst = env.tensor(DType::f32, {pieces * piece});
  Tensor large = env.tensor(DType::f32, {big}), same = env.tensor(DType::f32, {piece});
  be.zero(a);
  be.zero(b);
  be.synchronize();

  keep_busy(be, o, a, b);
  std::vector<float> host(static_cast<size_t>(piece));
  for (int64_t i = 0; i < pieces; ++i) {
    std::fill(host.begin(), host.end(), static_cast<float>(i + 1));
    be.copy_to_device(dst.range(i * piece, piece).data, host.data(), host.size() * 4);
    // overwritten at once: the copy must already have taken the bytes
    std::fill(host.begin(), host.end(), -1.f);
  }
  // the same destination twice: the later copy wins
  std::fill(host.begin(), host.end(), 7.f);
  be.copy_to_device(same.data, host.data(), host.size() * 4);
  std::fill(host.begin(), host.end(), 8.f);
  be.copy_to_device(same.data, host.data(), host.size() * 4);
  std::fill(host.begin(), host.end(), -1.f);
  // one copy larger than the ring, its source then overwritten
  keep_busy(be, o, a, b);
  std::vector<float> hbig(static_cast<size_t>(big));
  for (int64_t j = 0; j < big; ++j) hbig[static_cast<size_t>(j)] = static_cast<float>(j % 1000003);
  be.copy_to_device(large.data, hbig.data(), hbig.size() * 4);
  std::fill(hbig.begin(), hbig.end(), -1.f);

  const std::vector<float> got = env.get(dst);
  int64_t wrong = 0;
  for (int64_t i = 0; i < pieces; ++i)
    for (int64_t j = 0; j < piece; ++j) wrong += got[static_cast<size_t>(i * piece + j)] != static_cast<float>(i + 1);
  EXPECT_EQ(wrong, 0) << "elements of the 1 MiB pieces that did not hold their piece's value";
  const std::vector<float> s = env.get(same);
  EXPECT_EQ(std::count(s.begin(), s.end(), 8.f), piece);
  const std::vector<float> l = env.get(large);
  wrong = 0;
  for (int64_t j = 0; j < big; ++j) wrong += l[static_cast<size_t>(j)] != static_cast<float>(j % 1000003);
  EXPECT_EQ(wrong, 0) << "elements of the 160 MiB copy that differ";
}

}  // namespace ft::gputest
