// GPU fused softmax + cross-entropy + gradient vs a double-precision CPU reference:
// padded columns get 0, ignored targets (< 0) get loss 0 and gradient 0, dloss == 0 leaves
// the logits untouched.
#include "gpu_test_util.h"

namespace ft::gputest {

namespace {
void check_classifier(int64_t Vp, int64_t V) {
  const int64_t B = 3, T = 17, BT = B * T;
  GpuEnv env({B, T, 64, 1, Vp, V}, 64ull << 20);
  for (DType dt : kDtypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + " Vp=" + std::to_string(Vp));
    std::mt19937 g(6);
    auto logits = round_to(dt, randn(BT * Vp, g, 3.f));
    std::vector<int32_t> tgt(BT);
    std::uniform_int_distribution<int> ud(0, V - 1);
    for (auto& x : tgt) x = ud(g);
    tgt[3] = -1;
    tgt[20] = -100;
    tgt[7] = V - 1;
    const float dloss = 1.f / (BT - 2);
    std::vector<double> rl(BT), rg(BT * Vp, 0.0);
    for (int64_t r = 0; r < BT; ++r) {
      double mx = -1e300, s = 0;
      for (int64_t c = 0; c < V; ++c) mx = std::max(mx, (double)logits[r * Vp + c]);
      for (int64_t c = 0; c < V; ++c) s += std::exp(logits[r * Vp + c] - mx);
      double lse = mx + std::log(s);
      if (tgt[r] < 0) continue;
      rl[r] = lse - logits[r * Vp + tgt[r]];
      for (int64_t c = 0; c < V; ++c)
        rg[r * Vp + c] = (std::exp(logits[r * Vp + c] - lse) - (c == tgt[r])) * dloss;
    }
    Tensor tl = env.upload(dt, {B, T, Vp}, logits), tt = env.upload_i32({B, T}, tgt);
    Tensor losses = env.tensor(DType::f32, {B, T});
    // evaluation: losses only, logits untouched
    env.poison(losses);
    env.be().classifier_forward_backward(losses, tl, tt, V, 0.f);
    EXPECT_LT(rel_err(env.get(losses), rl), tol(dt, 1e-5));
    EXPECT_EQ(env.get(tl), logits);
    // training: gradient in place
    env.poison(losses);
    env.be().classifier_forward_backward(losses, tl, tt, V, dloss);
    auto l = env.get(losses);
    EXPECT_LT(rel_err(l, rl), tol(dt, 1e-5));
    EXPECT_EQ(l[3], 0.f);
    EXPECT_EQ(l[20], 0.f);
    auto grad = env.get(tl);
    EXPECT_LT(rel_err(grad, rg), tol(dt, 1e-5));
    for (int64_t r = 0; r < BT; ++r)
      for (int64_t c = V; c < Vp; ++c) ASSERT_EQ(grad[r * Vp + c], 0.f) << r << "," << c;
    for (int64_t c = 0; c < Vp; ++c) ASSERT_EQ(grad[3 * Vp + c], 0.f);
  }
}
}  // namespace

// A short row (Vp=1088, a partial last pass) and GPT-2's 50304 columns.
TEST(GPU_Classifier, ForwardBackwardMatchCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_classifier(1088, 1050);
  check_classifier(50304, 50257);
}

}  // namespace ft::gputest
