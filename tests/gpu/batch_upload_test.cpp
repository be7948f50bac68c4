// The training loader's buffers are the CUDA backend's upload sources (page-locked; copies
// from them are queued without staging, train/batch_loader.h), so a buffer must not be
// refilled before the device has run the copies of its last batch. Here every copy waits on
// the device behind a long queue of work while the loader refills the other buffer at once,
// as training does (request the next micro-batch, then queue this one's work): without the
// fence the device would upload the newer batch's bytes in place of the older one's.
#include <cuda_runtime.h>

#include "gpu_test_util.h"
#include "train/batch_loader.h"

namespace ft::gputest {

namespace {

// Sample i: one f32 field of kPer values, all equal to i.
class IndexSource final : public SampleSource {
 public:
  static constexpr int64_t kPer = 1 << 16;
  uint64_t num_samples() const override { return 64; }
  std::vector<FieldSpec> fields() const override { return {FieldSpec{"x", DType::f32, kPer}}; }
  void read(uint64_t idx, std::span<void* const> dst) const override {
    float* p = static_cast<float*>(dst[0]);
    std::fill(p, p + kPer, static_cast<float>(idx));
  }
};

}  // namespace

TEST(GPU_BatchLoader, UploadsFromPageLockedBuffersAreFenced) {
  GPU_SKIP_IF_NONE();
  constexpr int64_t kBatch = 4, kBatches = 8, kPer = IndexSource::kPer, kBusy = 16 << 20;
  GpuEnv env({1, 1, 64, 1, 64, 64}, (size_t)(3 * kBusy + kBatches * kBatch * kPer) * 4 + (64 << 20));
  Backend& be = env.be();
  Tensor a = env.tensor(DType::f32, {kBusy}), b = env.tensor(DType::f32, {kBusy}), o = env.tensor(DType::f32, {kBusy});
  Tensor dev = env.tensor(DType::f32, {kBatches * kBatch * kPer});
  be.zero(a);
  be.zero(b);
  IndexSource src;
  for (bool background : {false, true}) {
    BatchLoader loader(src, kBatch, background, &be);
    std::vector<uint64_t> idx(static_cast<size_t>(kBatches * kBatch));
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    auto batch_of = [&](int64_t k) { return std::span<const uint64_t>(idx.data() + k * kBatch, kBatch); };
    loader.request(batch_of(0));
    for (int64_t k = 0; k < kBatches; ++k) {
      Batch bt = loader.get();
      cudaPointerAttributes attr{};
      ASSERT_EQ(cudaPointerGetAttributes(&attr, bt.fields[0].data), cudaSuccess);
      EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "the loader's buffers are page-locked";
      if (k + 1 < kBatches) loader.request(batch_of(k + 1));  // refills the buffer of batch k - 1
      for (int r = 0; r < 20; ++r) be.residual_forward(o, a, b);  // the copy below waits behind this
      be.copy_to_device(dev.range(k * kBatch * kPer, kBatch * kPer).data, bt.data<float>("x"),
                        static_cast<size_t>(kBatch * kPer) * 4);
    }
    const std::vector<float> got = env.get(dev);
    int64_t wrong = 0;
    for (int64_t s = 0; s < kBatches * kBatch; ++s)
      for (int64_t j = 0; j < kPer; ++j) wrong += got[static_cast<size_t>(s * kPer + j)] != static_cast<float>(s);
    EXPECT_EQ(wrong, 0) << (background ? "background" : "inline") << " loader: uploaded values of another batch";
  }
}

}  // namespace ft::gputest
