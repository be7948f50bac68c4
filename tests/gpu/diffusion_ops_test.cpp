// GPU diffusion ops (DiT, CDEIT) against the CPU reference: every op of the op table's
// diffusion cases in f32 and bf16 (GPU_OpTable.* runs them in every precision too; this is
// the suite to run when only these ops changed), and what the table does not cover: the
// CUDA noise against the host generator (diffusion_rng.h) element by element, its
// independence of the batch, the calls backend.h allows in place (diffusion_mix out == x,
// mse_loss dpred == pred) bitwise against the out-of-place ones, exact patchify round trips
// across dtypes, and RMSNorm's element path (misaligned rows) against the CPU.
#include <cstdio>

#include "backend/cpu/cpu_backend.h"
#include "backend/diffusion_rng.h"
#include "gpu_test_util.h"
#include "ops/op_table.h"

namespace ft::gputest {

namespace {

void expect_ok(const ops::Result& r) {
  for (const auto& n : r.notes) std::printf("  %s\n", n.c_str());
  for (const auto& f : r.failures) ADD_FAILURE() << f;
}

OpDims small_dims() { return OpDims{2, 64, 64, 2, 64, 64}; }

}  // namespace

TEST(GPU_DiffusionOps, TableCasesMatchCpu) {
  GPU_SKIP_IF_NONE();
  for (const char* op : {"patchify_fwd", "patchify_bwd", "unpatchify_fwd", "unpatchify_bwd", "diffusion_mix_qsample",
                         "diffusion_mix_ddim", "mse_loss", "mse_loss_eval", "timestep_embedding",
                         "layernorm_noaffine_fwd", "layernorm_noaffine_bwd", "rmsnorm_fwd", "rmsnorm_bwd"}) {
    const ops::OpCase* c = ops::find_op(op);
    ASSERT_NE(c, nullptr) << op;
    for (Precision p : {Precision::fp32, Precision::bf16}) expect_ok(ops::run_test(*c, DeviceKind::cuda, p));
  }
}

// The CUDA noise is diffusion_normal() of the host: the same Philox words, the same double
// transform; only the device's and the host's double log/cos/sin may differ (1 ulp of a
// double, which rounds to the same float nearly always).
TEST(GPU_DiffusionOps, NoiseIsTheHostGenerator) {
  GPU_SKIP_IF_NONE();
  GpuEnv env(small_dims());
  const int64_t B = 6, n = 40003;
  const uint64_t seed = 0x0123456789abcdefull;
  std::vector<int32_t> keys = {0, 1, -1, 2147483647, 12345, 1};
  std::vector<float> coef(B * 3, 0.f);
  for (int64_t b = 0; b < B; ++b) coef[b * 3 + 2] = 1.f;
  Tensor x = env.upload(DType::f32, {B, n}, std::vector<float>(B * n, 0.f));
  Tensor out = env.tensor(DType::f32, {B, n}), noise = env.tensor(DType::f32, {B, n});
  env.poison(out), env.poison(noise);
  env.be().diffusion_mix(out, noise, x, Tensor(), env.upload(DType::f32, {B, 3}, coef), env.upload_i32({B}, keys),
                         seed);
  const auto z = env.get(noise), o = env.get(out);
  int64_t differ = 0;
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i) {
      const float want = diffusion_normal(seed, static_cast<uint32_t>(keys[b]), static_cast<uint64_t>(i));
      const float got = z[b * n + i];
      differ += got != want;
      worst = std::max(worst, std::fabs(static_cast<double>(got) - want) / std::max(1.0, std::fabs(static_cast<double>(want))));
      ASSERT_EQ(o[b * n + i], got) << "out = 0*x + 1*z";
    }
  std::printf("  %lld of %lld draws differ from the host's bits, worst relative %.2e\n", (long long)differ,
              (long long)(B * n), worst);
  EXPECT_LT(worst, 1e-5);
  EXPECT_LT(differ, B * n / 1000) << "more than 0.1% of the draws differ from the host generator";
}

// A sample's noise depends on its key alone: the same bits alone or third of five.
TEST(GPU_DiffusionOps, NoiseIndependentOfBatch) {
  GPU_SKIP_IF_NONE();
  GpuEnv env(small_dims());
  const int64_t n = 1003;
  auto draw = [&](std::vector<int32_t> keys) {
    const int64_t B = static_cast<int64_t>(keys.size());
    std::vector<float> coef(B * 3, 0.f);
    for (int64_t b = 0; b < B; ++b) coef[b * 3 + 2] = 1.f;
    Tensor out = env.tensor(DType::bf16, {B, n});
    env.be().diffusion_mix(out, Tensor(), env.upload(DType::bf16, {B, n}, std::vector<float>(B * n, 0.f)), Tensor(),
                           env.upload(DType::f32, {B, 3}, coef), env.upload_i32({B}, keys), 9);
    return env.get(out);
  };
  const auto alone = draw({77});
  const auto batch = draw({1, 2, 77, 3, 4});
  EXPECT_EQ(std::vector<float>(batch.begin() + 2 * n, batch.begin() + 3 * n), alone);
}

// diffusion_mix with out == x, mse_loss with dpred == pred: the same bits as out of place.
TEST(GPU_DiffusionOps, InPlaceMatchesOutOfPlace) {
  GPU_SKIP_IF_NONE();
  GpuEnv env(small_dims());
  const int64_t B = 3, n = 4099;
  std::mt19937 g(61);
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    const auto xv = round_to(dt, randn(B * n, g)), yv = round_to(dt, randn(B * n, g)), tv = randn(B * n, g);
    Tensor coef = env.upload(DType::f32, {B, 3}, randn(B * 3, g)), keys = env.upload_i32({B}, {5, 6, 7});
    Tensor x = env.upload(dt, {B, n}, xv), y = env.upload(dt, {B, n}, yv), out = env.tensor(dt, {B, n});
    env.be().diffusion_mix(out, Tensor(), x, y, coef, keys, 3);
    env.be().diffusion_mix(x, Tensor(), x, y, coef, keys, 3);
    EXPECT_EQ(env.get(x), env.get(out));

    Tensor pred = env.upload(dt, {B, n}, xv), target = env.upload(DType::f32, {B, n}, tv);
    Tensor l1 = env.tensor(DType::f32, {B}), l2 = env.tensor(DType::f32, {B}), dpred = env.tensor(dt, {B, n});
    env.be().mse_loss(l1, dpred, pred, target, 0.25f);
    env.be().mse_loss(l2, pred, pred, target, 0.25f);
    EXPECT_EQ(env.get(pred), env.get(dpred));
    EXPECT_EQ(env.get(l2), env.get(l1));
  }
}

// A copy in both directions: f32 -> f32 exact, f32 image -> bf16 tokens -> f32 image gives the
// bf16-rounded image exactly, and the tokens are exactly the CPU's tokens rounded.
TEST(GPU_DiffusionOps, PatchifyRoundTripsExact) {
  GPU_SKIP_IF_NONE();
  GpuEnv env(small_dims());
  auto cpu = make_cpu_backend();
  const int64_t B = 2, C = 3, H = 12, W = 20, p = 4, T = (H / p) * (W / p), F = C * p * p, n = B * C * H * W;
  std::mt19937 g(62);
  auto img = randn(n, g);
  std::vector<float> ref_tok(n);
  cpu->patchify(Tensor(ref_tok.data(), DType::f32, {B, T, F}), Tensor(img.data(), DType::f32, {B, C, H, W}),
                static_cast<int>(p));
  Tensor timg = env.upload(DType::f32, {B, C, H, W}, img);
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor tok = env.tensor(dt, {B, T, F}), back = env.tensor(DType::f32, {B, C, H, W});
    env.poison(tok), env.poison(back);
    env.be().patchify(tok, timg, static_cast<int>(p));
    EXPECT_EQ(env.get(tok), round_to(dt, ref_tok));
    env.be().unpatchify(back, tok, static_cast<int>(p));
    EXPECT_EQ(env.get(back), round_to(dt, img));
  }
}

// RMSNorm's element path (rows not 16-byte aligned, or C off the pack) against the CPU.
TEST(GPU_DiffusionOps, RmsNormElementPathMatchesCpu) {
  GPU_SKIP_IF_NONE();
  GpuEnv env(small_dims());
  auto cpu = make_cpu_backend();
  std::mt19937 g(63);
  for (DType dt : kDtypes)
    for (auto [N, C, offset] : {std::array<int64_t, 3>{33, 64, 1}, {13, 37, 0}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " C=" << C << " offset=" << offset);
      const auto x = round_to(dt, randn(N * C, g)), d = round_to(dt, randn(N * C, g)), g0 = round_to(dt, randn(N * C, g));
      std::vector<float> out(N * C), rstd(N), gx = g0;
      auto host = [](std::vector<float>& v, int64_t r, int64_t c) { return Tensor(v.data(), DType::f32, {r, c}); };
      std::vector<float> xc = x, dc = d;
      cpu->rmsnorm_forward(host(out, N, C), Tensor(rstd.data(), DType::f32, {N}), host(xc, N, C));
      cpu->rmsnorm_backward(host(gx, N, C), host(dc, N, C), host(xc, N, C), Tensor(rstd.data(), DType::f32, {N}));
      // device buffers one element past a 256-byte boundary when offset = 1
      auto at = [&](const std::vector<float>& v) {
        Tensor big = env.tensor(dt, {N * C + offset});
        std::vector<float> padded(offset, 0.f);
        padded.insert(padded.end(), v.begin(), v.end());
        env.put(big, padded);
        Tensor t = big;
        t.data = static_cast<char*>(big.data) + offset * dtype_size(dt);
        return t.view({N, C});
      };
      Tensor tx = at(x), td = at(d), tg = at(g0), to = at(std::vector<float>(N * C, 0.f));
      Tensor tr = env.tensor(DType::f32, {N});
      env.be().rmsnorm_forward(to, tr, tx);
      env.be().rmsnorm_backward(tg, td, tx, tr);
      EXPECT_LT(rel_err(env.get(to), out), tol(dt));
      EXPECT_LT(rel_err(env.get(tr), rstd), 1e-5);
      EXPECT_LT(rel_err(env.get(tg), gx), tol(dt));
    }
}

}  // namespace ft::gputest
