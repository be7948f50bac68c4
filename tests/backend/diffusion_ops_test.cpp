// The diffusion ops on the CPU reference: what the op table (tests/ops/ops_diffusion.cpp)
// cannot check, because on the CPU it compares the reference with itself: hand-computed
// values (a small known image's patches, the patch embedding as a Conv2d, the mix with known
// noise, MSE values, the timestep embedding's formula, RMSNorm and no-affine LayerNorm), the
// noise generator (Random123's known answers, moments, independence of keys, of the batch
// and of the thread count), round trips, aliasing, and refusals. The table has the
// finite-difference gradients and the GPU comparisons.
#include <omp.h>

#include <string>

#include "backend/diffusion_rng.h"
#include "core/error.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

template <class F> void expect_refused(F&& f, const std::string& words) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected an error naming: " << words;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

// ---- patchify ---------------------------------------------------------------------------------

TEST(Patchify, SmallKnownImage) {
  Harness h;
  // B=1, C=2, H=2, W=4, p=2: img[c][y][x] = 100c + 10y + x; two tokens (tx = 0, 1)
  std::vector<float> img(16), tok(16);
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 4; ++x) img[(c * 2 + y) * 4 + x] = 100.f * c + 10.f * y + x;
  h->patchify(tf(tok, {1, 2, 8}), tf(img, {1, 2, 2, 4}), 2);
  // features (c, py, px): token 0 holds x = 0,1; token 1 x = 2,3
  const std::vector<float> want = {0, 1, 10, 11, 100, 101, 110, 111, 2, 3, 12, 13, 102, 103, 112, 113};
  EXPECT_EQ(tok, want);
  std::vector<float> back(16);
  h->unpatchify(tf(back, {1, 2, 2, 4}), tf(tok, {1, 2, 8}), 2);
  EXPECT_EQ(back, img);
}

// The patch embedding is matmul_forward of the tokens with the Conv2d(kernel = stride = p)
// weight [hidden, C, p, p] flattened: the same numbers as the convolution itself.
TEST(Patchify, MatmulOfTokensIsTheConvolution) {
  Harness h;
  const int64_t B = 2, C = 3, H = 6, W = 9, p = 3, O = 5, T = (H / p) * (W / p), F = C * p * p;
  std::vector<float> img = randn(B * C * H * W, 201), w = randn(O * F, 202), bias = randn(O, 203);
  std::vector<float> tok(B * T * F), emb(B * T * O);
  h->patchify(tf(tok, {B, T, F}), tf(img, {B, C, H, W}), p);
  h->matmul_forward(tf(emb, {B * T, O}), tf(tok, {B * T, F}), tf(w, {O, F}), tf(bias, {O}));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t ty = 0; ty < H / p; ++ty)
      for (int64_t tx = 0; tx < W / p; ++tx)
        for (int64_t o = 0; o < O; ++o) {
          double s = bias[o];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t ky = 0; ky < p; ++ky)
              for (int64_t kx = 0; kx < p; ++kx)
                s += static_cast<double>(w[((o * C + c) * p + ky) * p + kx]) *
                     img[((b * C + c) * H + ty * p + ky) * W + tx * p + kx];
          EXPECT_NEAR(emb[(b * T + ty * (W / p) + tx) * O + o], s, 1e-4) << b << " " << ty << " " << tx << " " << o;
        }
}

TEST(Patchify, RoundTripsAreIdentity) {
  Harness h;
  for (auto [C, H, W, p] : {std::array<int64_t, 4>{3, 8, 12, 4}, {1, 5, 5, 1}, {4, 10, 6, 2}}) {
    const int64_t B = 3, n = B * C * H * W, T = (H / p) * (W / p), F = C * p * p;
    std::vector<float> img = randn(n, 211), tok(n), back(n);
    h->patchify(tf(tok, {B, T, F}), tf(img, {B, C, H, W}), static_cast<int>(p));
    h->unpatchify(tf(back, {B, C, H, W}), tf(tok, {B, T, F}), static_cast<int>(p));
    EXPECT_TRUE(bit_equal(back, img)) << "unpatchify(patchify(img)) C=" << C << " p=" << p;
    std::vector<float> tok2 = randn(n, 212), img2(n), tok2b(n);
    h->unpatchify(tf(img2, {B, C, H, W}), tf(tok2, {B, T, F}), static_cast<int>(p));
    h->patchify(tf(tok2b, {B, T, F}), tf(img2, {B, C, H, W}), static_cast<int>(p));
    EXPECT_TRUE(bit_equal(tok2b, tok2)) << "patchify(unpatchify(tokens)) C=" << C << " p=" << p;
  }
}

TEST(Patchify, Refusals) {
  Harness h;
  std::vector<float> img(2 * 6 * 8), tok(2 * 6 * 8);
  expect_refused([&] { h->patchify(tf(tok, {1, 12, 8}), tf(img, {1, 2, 6, 8}), 4); }, "multiples of p");
  expect_refused([&] { h->unpatchify(tf(img, {1, 2, 6, 8}), tf(tok, {1, 12, 8}), 4); }, "multiples of p");
  expect_refused([&] { h->patchify(tf(tok, {1, 48, 2}), tf(img, {1, 2, 6, 8}), 2); }, "should be [B=1,T=12,C*p*p=8]");
  expect_refused([&] { h->patchify(tf(tok, {1, 12, 8}), tf(img, {1, 2, 6, 8}), 0); }, "p=0");
  expect_refused([&] { h->patchify(tf(img, {1, 12, 8}), tf(img, {1, 2, 6, 8}), 2); }, "alias");
}

// ---- the noise generator ------------------------------------------------------------------------

TEST(DiffusionRng, PhiloxKnownAnswers) {
  // Random123 tests/kat_vectors, "philox4x32 10": ctr[4] key[2] -> result[4]
  struct Kat {
    uint32_t ctr[4], key[2], want[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t got[4];
    philox4x32_10(k.ctr, k.key, got);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], k.want[i]) << std::hex << k.ctr[0] << " word " << i;
  }
}

TEST(DiffusionRng, StandardNormalMoments) {
  const int64_t n = 1 << 20;
  double s1 = 0, s2 = 0, s4 = 0, within1 = 0, mx = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double z = diffusion_normal(42, static_cast<uint32_t>(i % 64), static_cast<uint64_t>(i / 64));
    s1 += z, s2 += z * z, s4 += z * z * z * z;
    within1 += std::fabs(z) < 1.0;
    mx = std::max(mx, std::fabs(z));
  }
  const double mean = s1 / n, var = s2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5.0 / std::sqrt(static_cast<double>(n)));  // 5 sigma
  EXPECT_NEAR(var, 1.0, 5.0 * std::sqrt(2.0 / n));
  EXPECT_NEAR(s4 / n, 3.0, 0.05);                 // kurtosis of a normal
  EXPECT_NEAR(within1 / n, 0.682689, 0.003);      // P(|z| < 1)
  EXPECT_LE(mx, 6.67);                            // sqrt(2 ln 2^32): u1 is never 0
}

// Correlation of two sequences of m draws: |r| within 5 / sqrt(m) for independent ones.
double corr(const std::vector<double>& a, const std::vector<double>& b) {
  double sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0;
  const double m = static_cast<double>(a.size());
  for (size_t i = 0; i < a.size(); ++i) sa += a[i], sb += b[i], sab += a[i] * b[i], saa += a[i] * a[i], sbb += b[i] * b[i];
  return (sab / m - sa / m * sb / m) / std::sqrt((saa / m - sa * sa / (m * m)) * (sbb / m - sb * sb / (m * m)));
}

TEST(DiffusionRng, KeysSeedsAndNeighboursUncorrelated) {
  const int64_t m = 1 << 16;
  auto seq = [&](uint64_t seed, uint32_t key, int64_t shift) {
    std::vector<double> v(m);
    for (int64_t i = 0; i < m; ++i) v[i] = diffusion_normal(seed, key, static_cast<uint64_t>(i + shift));
    return v;
  };
  const double lim = 5.0 / std::sqrt(static_cast<double>(m));
  const auto base = seq(7, 1, 0);
  EXPECT_LT(std::fabs(corr(base, seq(7, 2, 0))), lim) << "adjacent keys";
  EXPECT_LT(std::fabs(corr(base, seq(7, 0x80000001u, 0))), lim) << "keys differing in the top bit";
  EXPECT_LT(std::fabs(corr(base, seq(8, 1, 0))), lim) << "adjacent seeds";
  EXPECT_LT(std::fabs(corr(base, seq(7ull | (1ull << 32), 1, 0))), lim) << "seeds differing in the high word";
  for (int64_t lag : {1, 2, 3, 4})  // inside a Box-Muller pair, across pairs, across blocks
    EXPECT_LT(std::fabs(corr(base, seq(7, 1, lag))), lim) << "lag " << lag;
}

// ---- diffusion_mix ------------------------------------------------------------------------------

struct MixCase {
  int64_t B = 3, n = 11;  // n: two full noise blocks and a partial one
  std::vector<float> x = randn(B * n, 301), y = randn(B * n, 302), out = std::vector<float>(B * n),
                     noise = std::vector<float>(B * n);
  std::vector<float> coef = {0.8f, 0.1f, 0.6f, -1.5f, 2.0f, 0.25f, 1.0f, 0.0f, 0.0f};
  std::vector<int32_t> keys = {17, -1, 17};  // a repeated key draws the same noise
  static constexpr uint64_t kSeed = 0xabcdef0123456789ull;
  Tensor full(std::vector<float>& v) { return tf(v, {B, n}); }
};

TEST(DiffusionMix, ValuesWithKnownNoise) {
  Harness h;
  MixCase k;
  h->diffusion_mix(k.full(k.out), k.full(k.noise), k.full(k.x), k.full(k.y), tf(k.coef, {3, 3}),
                   ti(k.keys, {3}), MixCase::kSeed);
  for (int64_t b = 0; b < k.B; ++b)
    for (int64_t i = 0; i < k.n; ++i) {
      const float z = diffusion_normal(MixCase::kSeed, static_cast<uint32_t>(k.keys[b]), i);
      const int64_t e = b * k.n + i;
      EXPECT_EQ(k.noise[e], z);
      const float want = k.coef[b * 3] * k.x[e] + k.coef[b * 3 + 1] * k.y[e] + k.coef[b * 3 + 2] * z;
      EXPECT_FLOAT_EQ(k.out[e], want) << b << " " << i;
    }
  for (int64_t i = 0; i < k.n; ++i) EXPECT_EQ(k.noise[i], k.noise[2 * k.n + i]) << "same key, same noise";
  EXPECT_NE(k.noise[0], k.noise[k.n]);
  // sample 2's coefficients (1, 0, 0): x itself
  for (int64_t i = 0; i < k.n; ++i) EXPECT_EQ(k.out[2 * k.n + i], k.x[2 * k.n + i]);
}

// A sample's noise depends on its key only: not on its place in the batch, the batch size,
// the other samples or the thread count.
TEST(DiffusionMix, NoiseIndependentOfBatchAndThreads) {
  Harness h;
  const int64_t n = 1003;
  std::vector<float> coef1 = {0.f, 0.f, 1.f}, x1(n, 0.f), out1(n);
  std::vector<int32_t> key1 = {99};
  h->diffusion_mix(tf(out1, {1, n}), Tensor(), tf(x1, {1, n}), Tensor(), tf(coef1, {1, 3}), ti(key1, {1}), 5);
  const int threads = omp_get_max_threads();
  for (int nt : {1, 2, 3}) {
    omp_set_num_threads(nt);
    std::vector<float> coef(5 * 3, 0.f), x(5 * n, 0.f), out(5 * n);
    std::vector<int32_t> keys = {1, 2, 99, 3, 4};
    for (int b = 0; b < 5; ++b) coef[b * 3 + 2] = 1.f;
    h->diffusion_mix(tf(out, {5, n}), Tensor(), tf(x, {5, n}), Tensor(), tf(coef, {5, 3}), ti(keys, {5}), 5);
    EXPECT_TRUE(bit_equal(std::vector<float>(out.begin() + 2 * n, out.begin() + 3 * n), out1)) << nt << " threads";
  }
  omp_set_num_threads(threads);
}

// y empty: no y term, coef[b,1] ignored (NaN here); noise_out empty; out aliasing x.
TEST(DiffusionMix, WithoutYAndInPlace) {
  Harness h;
  MixCase k;
  for (int64_t b = 0; b < k.B; ++b) k.coef[b * 3 + 1] = NAN;
  h->diffusion_mix(k.full(k.out), Tensor(), k.full(k.x), Tensor(), tf(k.coef, {3, 3}), ti(k.keys, {3}), 1);
  std::vector<float> x2 = k.x;
  h->diffusion_mix(k.full(x2), Tensor(), k.full(x2), Tensor(), tf(k.coef, {3, 3}), ti(k.keys, {3}), 1);
  EXPECT_TRUE(bit_equal(x2, k.out));
  for (int64_t e = 0; e < k.B * k.n; ++e) {
    const int64_t b = e / k.n;
    const float z = diffusion_normal(1, static_cast<uint32_t>(k.keys[b]), e % k.n);
    EXPECT_FLOAT_EQ(k.out[e], k.coef[b * 3] * k.x[e] + k.coef[b * 3 + 2] * z);
  }
}

TEST(DiffusionMix, Refusals) {
  Harness h;
  MixCase k;
  std::vector<float> fkeys(3);
  expect_refused([&] { h->diffusion_mix(k.full(k.out), Tensor(), k.full(k.x), Tensor(), tf(k.coef, {9}),
                                        tf(fkeys, {3}), 1); }, "keys");
  expect_refused([&] { h->diffusion_mix(k.full(k.out), Tensor(), k.full(k.x), Tensor(), tf(k.coef, {3, 3}),
                                        ti(k.keys, {3}).view({2}), 1); }, "keys");
  std::vector<float> short_y(k.B * (k.n - 1));
  expect_refused([&] { h->diffusion_mix(k.full(k.out), Tensor(), k.full(k.x), tf(short_y, {k.B, k.n - 1}),
                                        tf(k.coef, {3, 3}), ti(k.keys, {3}), 1); }, "y ");
  expect_refused([&] { h->diffusion_mix(k.full(k.out), k.full(k.out), k.full(k.x), Tensor(), tf(k.coef, {3, 3}),
                                        ti(k.keys, {3}), 1); }, "alias");
}

// ---- mse_loss -----------------------------------------------------------------------------------

TEST(MseLoss, Values) {
  Harness h;
  std::vector<float> pred = {1, 2, 3, 4, 0.5f, 0.5f, 0.5f, 0.5f}, target = {0, 0, 0, 0, 1, 0, 1, 0};
  std::vector<float> losses(2), dpred(8, NAN);
  h->mse_loss(tf(losses, {2}), tf(dpred, {2, 4}), tf(pred, {2, 4}), tf(target, {2, 4}), 0.5f);
  EXPECT_FLOAT_EQ(losses[0], 30.f / 4);
  EXPECT_FLOAT_EQ(losses[1], 0.25f);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(dpred[i], 0.5f * 2 * (pred[i] - target[i]) / 4) << i;
  // evaluation: losses only, dpred untouched (here: may be empty, or given and left alone)
  std::vector<float> l2(2, NAN), d2(8, 7.f);
  h->mse_loss(tf(l2, {2}), Tensor(), tf(pred, {2, 4}), tf(target, {2, 4}), 0.f);
  EXPECT_TRUE(bit_equal(l2, losses));
  h->mse_loss(tf(l2, {2}), tf(d2, {2, 4}), tf(pred, {2, 4}), tf(target, {2, 4}), 0.f);
  EXPECT_EQ(d2, std::vector<float>(8, 7.f));
  // in place: dpred == pred
  std::vector<float> p2 = pred;
  h->mse_loss(tf(l2, {2}), tf(p2, {2, 4}), tf(p2, {2, 4}), tf(target, {2, 4}), 0.5f);
  EXPECT_TRUE(bit_equal(p2, dpred));
  EXPECT_TRUE(bit_equal(l2, losses));
  expect_refused([&] { h->mse_loss(tf(l2, {2}), Tensor(), tf(pred, {2, 4}), tf(target, {2, 4}), 1.f); },
                 "dpred is empty");
  expect_refused([&] { h->mse_loss(tf(l2, {2}), Tensor(), tf(pred, {2, 4}), tf(target, {4, 2}), 0.f); }, "target");
}

// ---- timestep_embedding -------------------------------------------------------------------------

TEST(TimestepEmbedding, MatchesTheFormula) {
  Harness h;
  std::vector<float> t = {0.f, 1.f, 999.f, 0.25f};
  for (int64_t D : {256, 7, 4, 1}) {
    std::vector<float> out(t.size() * D, NAN);
    h->timestep_embedding(tf(out, {4, D}), tf(t, {4}));
    const int64_t half = D / 2;
    for (int64_t b = 0; b < 4; ++b) {
      for (int64_t i = 0; i < half; ++i) {
        const double f = std::exp(-std::log(10000.0) * i / half);
        const double a = static_cast<double>(t[b]) * f;  // exact argument: |err| <= ulp(a)
        const double tolr = 1e-6 + std::fabs(a) * 2.4e-7;
        EXPECT_NEAR(out[b * D + i], std::cos(a), tolr) << "cos D=" << D << " b=" << b << " i=" << i;
        EXPECT_NEAR(out[b * D + half + i], std::sin(a), tolr) << "sin D=" << D << " b=" << b << " i=" << i;
      }
      if (D % 2) EXPECT_EQ(out[b * D + D - 1], 0.f) << "odd D's last column";
    }
  }
  // t = 1, D = 4: freqs 1 and 1/100 (max_period^(-1/2)); another max_period
  std::vector<float> one = {1.f}, o4(4), o4b(4);
  h->timestep_embedding(tf(o4, {1, 4}), tf(one, {1}));
  EXPECT_NEAR(o4[0], std::cos(1.0), 1e-7);
  EXPECT_NEAR(o4[1], std::cos(0.01), 1e-7);
  EXPECT_NEAR(o4[2], std::sin(1.0), 1e-7);
  EXPECT_NEAR(o4[3], std::sin(0.01), 1e-7);
  h->timestep_embedding(tf(o4b, {1, 4}), tf(one, {1}), 100.f);
  EXPECT_NEAR(o4b[1], std::cos(0.1), 1e-7);
  expect_refused([&] { h->timestep_embedding(tf(o4, {2, 2}), tf(one, {1})); }, "[B=1,D]");
}

// ---- norms without affine -----------------------------------------------------------------------

TEST(RmsNorm, ValuesAndAccumulatingBackward) {
  Harness h;
  const int64_t N = 3, C = 5;
  std::vector<float> x = randn(N * C, 401, 2.f), out(N * C), rstd(N), g = randn(N * C, 402);
  std::vector<float> dx = randn(N * C, 403), dx0 = dx;
  h->rmsnorm_forward(tf(out, {N, C}), tf(rstd, {N}), tf(x, {N, C}));
  h->rmsnorm_backward(tf(dx, {N, C}), tf(g, {N, C}), tf(x, {N, C}), tf(rstd, {N}));
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0, dot = 0;
    for (int64_t c = 0; c < C; ++c) ms += static_cast<double>(x[n * C + c]) * x[n * C + c] / C;
    const double r = 1.0 / std::sqrt(ms + 1e-6);
    EXPECT_NEAR(rstd[n], r, 1e-6 * r);
    for (int64_t c = 0; c < C; ++c) dot += static_cast<double>(g[n * C + c]) * x[n * C + c] * r / C;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = n * C + c;
      EXPECT_NEAR(out[i], x[i] * r, 1e-6);
      // d/dx_c of sum_j g_j x_j r: r g_c - r^3 x_c (sum_j g_j x_j) / C, added to dx's start
      EXPECT_NEAR(dx[i] - dx0[i], r * (g[i] - x[i] * r * dot), 1e-5) << i;
    }
  }
  // all-zero row: eps keeps it finite (rstd = 1000)
  std::vector<float> z(4, 0.f), zo(4), zr(1);
  h->rmsnorm_forward(tf(zo, {1, 4}), tf(zr, {1}), tf(z, {1, 4}));
  EXPECT_NEAR(zr[0], 1000.f, 1e-2);
  EXPECT_EQ(zo, std::vector<float>(4, 0.f));
  expect_refused([&] { h->rmsnorm_forward(tf(out, {N, C}), tf(zr, {1}), tf(x, {N, C})); }, "rstd");
}

// No affine: the same bits as the affine op with w = 1, b = 0 (forward and dinp).
TEST(LayerNormNoAffine, EqualsUnitAffine) {
  Harness h;
  const int64_t N = 4, C = 6;
  std::vector<float> x = randn(N * C, 411, 2.f), g = randn(N * C, 412), ones(C, 1.f), zeros(C, 0.f);
  std::vector<float> o1(N * C), o2(N * C), m1(N), m2(N), r1(N), r2(N), dw(C), db(C);
  std::vector<float> d1 = randn(N * C, 413), d2 = d1;
  h->layernorm_forward(tf(o1, {N, C}), tf(m1, {N}), tf(r1, {N}), tf(x, {N, C}), Tensor(), Tensor());
  h->layernorm_forward(tf(o2, {N, C}), tf(m2, {N}), tf(r2, {N}), tf(x, {N, C}), tf(ones, {C}), tf(zeros, {C}));
  EXPECT_EQ(o1, o2);
  EXPECT_TRUE(bit_equal(m1, m2) && bit_equal(r1, r2));
  h->layernorm_backward(tf(d1, {N, C}), Tensor(), Tensor(), tf(g, {N, C}), tf(x, {N, C}), Tensor(), tf(m1, {N}),
                        tf(r1, {N}));
  h->layernorm_backward(tf(d2, {N, C}), tf(dw, {C}), tf(db, {C}), tf(g, {N, C}), tf(x, {N, C}), tf(ones, {C}),
                        tf(m1, {N}), tf(r1, {N}));
  EXPECT_TRUE(bit_equal(d1, d2));
  expect_refused([&] {
    h->layernorm_backward(tf(d1, {N, C}), Tensor(), Tensor(), tf(g, {N, C}), tf(x, {N, C}), tf(ones, {C}),
                          tf(m1, {N}), tf(r1, {N}));
  }, "is given but dw, db are empty");
  expect_refused([&] {
    h->layernorm_forward(tf(o1, {N, C}), tf(m1, {N}), tf(r1, {N}), tf(x, {N, C}), tf(ones, {C}), Tensor());
  }, "bias");
}

}  // namespace
}  // namespace ft::test
