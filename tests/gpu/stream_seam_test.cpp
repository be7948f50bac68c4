// The stream/event seam on CUDA: work queued on a side stream after stream_wait_event on an
// event recorded behind a compute-stream op sees that op's result; the planning queries
// (OpShape): saved bytes and what the CUDA backend supports.
#include <cuda_runtime.h>

#include "gpu_test_util.h"
#include "models/host_transfer.h"

namespace ft::gputest {

TEST(GPU_StreamSeam, SideStreamWaitsForComputeEvent) {
  GPU_SKIP_IF_NONE();
  const int64_t n = 32 << 20;  // long enough that an unordered copy would race the op
  GpuEnv env({1, 1, 64, 1, 64, 64}, (size_t)n * 4 * 4 + (64 << 20));
  Backend& be = env.be();
  Tensor a = env.tensor(DType::f32, {n}), b = env.tensor(DType::f32, {n});
  Tensor out = env.tensor(DType::f32, {n}), copy = env.tensor(DType::f32, {n});
  StreamHandle compute = be.compute_stream(), side = be.create_stream(StreamPriority::high);
  ASSERT_NE(compute.native, nullptr);
  ASSERT_NE(side.native, nullptr);
  ASSERT_NE(side.native, compute.native);
  {  // a high-priority side stream has the device's greatest priority
    int least = 0, greatest = 0, got = 1;
    ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
    ASSERT_EQ(cudaStreamGetPriority(static_cast<cudaStream_t>(side.native), &got), cudaSuccess);
    EXPECT_EQ(got, greatest);
    EXPECT_LT(greatest, least);  // the device has priorities at all
    // the compute stream sits between: a low side stream ranks below it, a high one above
    StreamHandle low = be.create_stream(StreamPriority::low);
    int compute_p = 0, low_p = 0;
    ASSERT_EQ(cudaStreamGetPriority(static_cast<cudaStream_t>(compute.native), &compute_p), cudaSuccess);
    ASSERT_EQ(cudaStreamGetPriority(static_cast<cudaStream_t>(low.native), &low_p), cudaSuccess);
    EXPECT_EQ(low_p, least);
    EXPECT_LT(compute_p, low_p);
    EXPECT_GT(compute_p, got);
    be.destroy_stream(low);
  }
  EventHandle done = be.create_event();
  ASSERT_NE(done.native, nullptr);
  env.put(a, std::vector<float>(n, 1.f));
  env.put(b, std::vector<float>(n, 2.f));
  for (int it = 0; it < 3; ++it) {
    be.zero(out);
    be.zero(copy);
    be.synchronize();
    // compute: out = a + b, many times over (the last one decides), then the event
    for (int k = 0; k < 20; ++k) be.residual_forward(out, a, b);
    be.record_event(done, compute);
    // side: wait for the event on the device, then copy out -> copy
    be.stream_wait_event(side, done);
    ASSERT_EQ(cudaMemcpyAsync(copy.data, out.data, out.bytes(), cudaMemcpyDeviceToDevice,
                              static_cast<cudaStream_t>(side.native)),
              cudaSuccess);
    be.synchronize_stream(side);
    const std::vector<float> got = env.get(copy);
    int64_t wrong = 0;
    for (float v : got) wrong += v != 3.f;
    EXPECT_EQ(wrong, 0) << "iteration " << it;
  }
  // a null handle is the compute stream
  be.record_event(done, StreamHandle{});
  be.synchronize_stream(StreamHandle{});
  be.destroy_event(done);
  be.destroy_stream(side);
}

TEST(GPU_OpShape, SavedBytesAndSupport) {
  GPU_SKIP_IF_NONE();
  auto be = make_cuda_backend();
  EXPECT_EQ(be->attention_saved_bytes(OpShape::attention(4, 1024, 12, 64), Precision::bf16), 4u * 12 * 1024 * 4);
  EXPECT_EQ(be->unsupported(OpShape::attention(2, 128, 4, 64), Precision::fp32), "");
  EXPECT_EQ(be->unsupported(OpShape::attention(2, 128, 4, 32, false, true), Precision::bf16), "");
  EXPECT_NE(be->unsupported(OpShape::attention(2, 128, 4, 80), Precision::bf16), "");  // only 32/64/128
  EXPECT_NE(be->unsupported(OpShape::attention(2, 128, 4, 48), Precision::fp32), "");
  EXPECT_NE(be->unsupported(OpShape::attention(2, 128, 4, 48, true, true), Precision::bf16), "");
  EXPECT_EQ(be->unsupported(OpShape::matmul(8, 64, 64), Precision::bf16), "");
}

// A loss read-back (models/host_transfer.h LossReadback) queued behind a long op returns at
// once and sums what the op wrote once waited for; it may outlive its backend.
TEST(GPU_StreamSeam, HostReadbackLandsAfterTheQueuedOpAndOutlivesTheBackend) {
  GPU_SKIP_IF_NONE();
  const int64_t n = 32 << 20;
  LossReadback rb;
  {
    GpuEnv env({1, 1, 64, 1, 64, 64}, (size_t)n * 4 * 3 + (64 << 20));
    Backend& be = env.be();
    Tensor a = env.tensor(DType::f32, {n}), b = env.tensor(DType::f32, {n}), out = env.tensor(DType::f32, {n});
    env.put(a, std::vector<float>(n, 1.f));
    env.put(b, std::vector<float>(n, 0.5f));
    rb.bind(be, 1024);
    be.zero(out);
    for (int k = 0; k < 20; ++k) be.residual_forward(out, a, b);  // out = 1.5 everywhere, late
    rb.start(out.range(0, 1024));
    EXPECT_DOUBLE_EQ(rb.sum(), 1.5 * 1024);
    EXPECT_DOUBLE_EQ(rb.read(a.range(0, 1000)), 1000.0);
    EXPECT_THROW(rb.start(a.range(0, 1025)), InternalError);
  }
  // the backend is gone; destroying the read-back must not touch it
}

}  // namespace ft::gputest
