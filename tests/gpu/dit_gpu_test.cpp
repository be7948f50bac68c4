// The conditional DiT on CUDA tracks the CPU reference (models/dit.h): loss and every gradient
// of one micro-batch (condition vector and condition map, x0 and eps prediction), in fp32 and
// bf16, and Denoiser::predict; and the same step run again from NaN gradients gives the same
// bits (its first micro-batch overwrites every gradient: Model::overwrites_every_grad).
// Parameters are perturbed away from adaLN-Zero's zeros so every path carries gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "gpu_test_util.h"
#include "models/dit.h"
#include "train/runtime.h"

namespace ft {
namespace {

struct DiTRun {
  double loss = 0;
  std::vector<float> grads, pred;
  std::vector<float> grads_from_nan;  // again_from_nan: the same step's, every gradient NaN before
};

DiTConfig config(bool map, const std::string& predict) {
  DiTConfig c;
  c.depth = 2, c.hidden = 64, c.heads = 2, c.patch = 2, c.image = 16, c.in_channels = 1;
  c.cond_channels = map ? 1 : 0;
  c.cond_dim = map ? 0 : 208;
  c.freq_dim = 256;
  c.predict = predict;
  return c;
}

DiTRun run(Backend& be, const DiTConfig& c, Precision p, bool again_from_nan = false) {
  DiT m(c);
  PlanShape s;
  s.micro_batch = 4;
  s.eval_batch = 4;
  s.precision = p;
  ModelRuntime rt(m, be, s);
  std::vector<float> host(static_cast<size_t>(m.num_params()));
  m.init_params(3, host.data());
  std::mt19937 g(9);
  std::normal_distribution<float> n(0.f, 0.02f);
  for (float& v : host) v += n(g);
  rt.load_params_from_host(host.data());
  const int64_t B = 4;
  std::vector<float> image(static_cast<size_t>(B * c.image_elems())), cond(static_cast<size_t>(B * c.cond_elems()));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& v : image) v = u(g);
  for (float& v : cond) v = u(g);
  std::vector<int32_t> t = {3, 250, 600, 999}, keys = {11, 12, 13, 14};
  Batch b;
  b.size = B;
  b.fields.push_back(BatchField{FieldSpec{"image", DType::f32, c.image_elems()}, image.data()});
  b.fields.push_back(BatchField{FieldSpec{"cond", DType::f32, c.cond_elems()}, cond.data()});
  b.fields.push_back(BatchField{FieldSpec{"t", DType::i32, 1}, t.data()});
  b.fields.push_back(BatchField{FieldSpec{"noise_key", DType::i32, 1}, keys.data()});
  DiTRun r;
  rt.zero_grads();
  r.loss = rt.forward_backward(b, 1.0f / B);
  r.grads.resize(host.size());
  rt.copy_grads_to_host(r.grads.data());
  if (again_from_nan) {  // the runtime zeroes the DiT's gradients only once
    const Tensor gr = rt.grads();
    const std::vector<unsigned char> nan(gr.bytes(), 0xff);
    be.copy_to_device(gr.data, nan.data(), nan.size());
    rt.zero_grads();
    rt.forward_backward(b, 1.0f / B);
    r.grads_from_nan.resize(host.size());
    rt.copy_grads_to_host(r.grads_from_nan.data());
  }
  r.pred.resize(image.size());
  Denoiser& d = m;
  d.predict(image.data(), cond.data(), t.data(), B, r.pred.data());
  return r;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / std::max(n, 1e-30));
}

void compare(Precision p, double tol) {
  auto cpu = make_cpu_backend();
  auto gpu = make_backend(DeviceKind::cuda);
  for (bool map : {false, true}) {
    for (const char* predict : {"x0", "eps"}) {
      const DiTConfig c = config(map, predict);
      const DiTRun ref = run(*cpu, c, Precision::fp32);
      const DiTRun got = run(*gpu, c, p);
      EXPECT_NEAR(got.loss, ref.loss, tol * std::fabs(ref.loss)) << "map " << map << " " << predict;
      EXPECT_LT(rel(got.grads, ref.grads), tol) << "map " << map << " " << predict;
      EXPECT_LT(rel(got.pred, ref.pred), tol) << "map " << map << " " << predict;
    }
  }
}

TEST(GPU_DiT, Fp32TracksCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  compare(Precision::fp32, 2e-3);
}

TEST(GPU_DiT, Bf16TracksCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  compare(Precision::bf16, 5e-2);
}

// Every CUDA path of the DiT's backward (GELU epilogues, fused bias sums, the final layer's
// norm, cuBLASLt with beta 0) overwrites on a step's first micro-batch, for the vector and the
// map condition: the same bits from NaN gradients (deterministic attention and products).
TEST(GPU_DiT, FirstMicroBatchOverwritesEveryGradient) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  gputest::ScopedEnv attention("FT_ATTENTION", "fittrain"), autotune("FT_MATMUL_AUTOTUNE", "0");
  auto gpu = make_backend(DeviceKind::cuda);
  for (bool map : {false, true}) {
    const DiTRun r = run(*gpu, config(map, "x0"), Precision::bf16, /*again_from_nan=*/true);
    ASSERT_EQ(r.grads.size(), r.grads_from_nan.size());
    EXPECT_EQ(0, std::memcmp(r.grads.data(), r.grads_from_nan.data(), r.grads.size() * sizeof(float)))
        << "map " << map;
  }
}

}  // namespace
}  // namespace ft
