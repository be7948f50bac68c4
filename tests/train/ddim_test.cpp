// DDIM (train/ddim.h) against direct formulas, with fake denoisers whose predictions are known:
// an oracle that returns the true x0 (or the eps that goes with it) must give x0 back; a linear
// "network" must match eq. 12 written out by hand; noise is seeded per image, so results do not
// depend on the batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "models/dit_config.h"
#include "train/ddim.h"

namespace ft {
namespace {

// A Denoiser computing its prediction with a host function of (x_t, cond, t).
class FakeDenoiser final : public Denoiser {
 public:
  using Fn = std::function<float(float xt, const float* cond, int64_t i, int t)>;
  FakeDenoiser(int64_t elems, int64_t cond_elems, int64_t batch, std::string predicts, Fn fn)
      : e_(elems), ce_(cond_elems), g_(batch), p_(std::move(predicts)), fn_(std::move(fn)) {}
  int64_t image_elems() const override { return e_; }
  int64_t cond_elems() const override { return ce_; }
  int64_t max_predict_batch() const override { return g_; }
  std::string predicts() const override { return p_; }
  void predict(const float* x_t, const float* cond, const int32_t* t, int64_t n, float* out) override {
    EXPECT_LE(n, g_);
    calls += 1;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < e_; ++i) out[b * e_ + i] = fn_(x_t[b * e_ + i], cond + b * ce_, i, t[b]);
  }
  int calls = 0;

 private:
  int64_t e_, ce_, g_;
  std::string p_;
  Fn fn_;
};

// Ground truth per image: the condition carries it (the oracle "reads" x0 from it).
std::vector<float> truth(int64_t n, int64_t e) {
  std::vector<float> v(static_cast<size_t>(n * e));
  for (size_t k = 0; k < v.size(); ++k) v[k] = std::sin(0.37f * static_cast<float>(k)) * 0.9f;
  return v;
}

std::vector<uint64_t> iota_ids(int64_t n, uint64_t from = 0) {
  std::vector<uint64_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), from);
  return ids;
}

TEST(Ddim, TimestepsAreCdeitsLinspace) {
  EXPECT_EQ(ddim_timesteps(5), (std::vector<int>{999, 799, 599, 399, 199}));
  EXPECT_EQ(ddim_timesteps(1), (std::vector<int>{999}));
  EXPECT_EQ(ddim_timesteps(3), (std::vector<int>{999, 665, 332}));
  const std::vector<int> all = ddim_timesteps(1000);
  ASSERT_EQ(all.size(), 1000u);
  for (int k = 0; k < 1000; ++k) EXPECT_EQ(all[static_cast<size_t>(k)], 999 - k);
}

TEST(Ddim, OracleX0GivesTheImageBackForAnyEta) {
  const int64_t n = 5, E = 37;
  const std::vector<float> x0 = truth(n, E);
  FakeDenoiser d(E, E, 2, "x0", [](float, const float* c, int64_t i, int) { return c[i]; });
  for (double eta : {0.0, 0.5, 1.0}) {
    DdimOptions o;
    o.eta = eta;
    std::vector<float> out(x0.size());
    ddim_sample(d, x0.data(), iota_ids(n), o, out.data());
    for (size_t k = 0; k < out.size(); ++k) ASSERT_EQ(out[k], x0[k]) << "eta " << eta << " element " << k;
  }
}

TEST(Ddim, OracleEpsGivesTheImageBack) {
  // The eps that goes with the true x0 at (x_t, t): the x0 it implies is the truth up to rounding.
  const int64_t n = 3, E = 50;
  const std::vector<float> x0 = truth(n, E);
  const std::vector<double>& ab = diffusion_alpha_bars();
  FakeDenoiser d(E, E, 3, "eps", [&](float xt, const float* c, int64_t i, int t) {
    const double a = ab[static_cast<size_t>(t)];
    return static_cast<float>((std::sqrt(1 / a) * xt - c[i]) / std::sqrt(1 / a - 1));
  });
  for (double eta : {0.0, 1.0}) {
    DdimOptions o;
    o.eta = eta;
    o.steps = 10;
    std::vector<float> out(x0.size());
    ddim_sample(d, x0.data(), iota_ids(n), o, out.data());
    for (size_t k = 0; k < out.size(); ++k) ASSERT_NEAR(out[k], x0[k], 2e-5) << "eta " << eta << " element " << k;
  }
}

// Eq. 12 by hand for a linear network x0^ = 0.5 x_t + 0.3 (clipped), two steps (999 -> 499 -> x0).
TEST(Ddim, TwoStepsMatchTheFormula) {
  const int64_t E = 9;
  const std::vector<double>& ab = diffusion_alpha_bars();
  for (const char* kind : {"x0", "eps"}) {
    const bool eps = std::string(kind) == "eps";
    auto x0_of = [](double xt) { return std::clamp(0.5 * xt + 0.3, -1.0, 1.0); };
    // the eps network returns the eps whose x0 is that line (before clipping)
    FakeDenoiser d(E, 0, 4, kind, [&](float xt, const float*, int64_t, int t) {
      const double a = ab[static_cast<size_t>(t)];
      const double lin = 0.5 * xt + 0.3;
      return static_cast<float>(eps ? (std::sqrt(1 / a) * xt - lin) / std::sqrt(1 / a - 1) : lin);
    });
    for (double eta : {0.0, 1.0}) {
      DdimOptions o;
      o.steps = 2;
      o.eta = eta;
      o.seed = 77;
      std::vector<float> out(static_cast<size_t>(E));
      const uint64_t id = 12;
      ddim_sample(d, nullptr, std::span<const uint64_t>(&id, 1), o, out.data());
      for (int64_t i = 0; i < E; ++i) {
        const double a = ab[999], an = ab[499];
        const double xT = ddim_noise(77, id, 0, i);
        const double x0 = x0_of(static_cast<float>(xT));
        const double e = (xT - std::sqrt(a) * x0) / std::sqrt(1 - a);
        const double sigma = eta * std::sqrt((1 - an) / (1 - a)) * std::sqrt(1 - a / an);
        const double x1 = std::sqrt(an) * x0 + std::sqrt(1 - an - sigma * sigma) * e + sigma * ddim_noise(77, id, 1, i);
        const double want = x0_of(static_cast<float>(x1));
        EXPECT_NEAR(out[static_cast<size_t>(i)], want, 2e-5) << kind << " eta " << eta << " element " << i;
      }
    }
  }
}

TEST(Ddim, DeterministicAndIndependentOfTheBatch) {
  const int64_t n = 7, E = 16, CE = 3;
  std::vector<float> cond(static_cast<size_t>(n * CE));
  for (size_t k = 0; k < cond.size(); ++k) cond[k] = 0.1f * static_cast<float>(k);
  auto net = [](float xt, const float* c, int64_t i, int t) { return 0.7f * xt + c[i % 3] - 0.001f * t; };
  DdimOptions o;
  o.seed = 5;
  std::vector<float> a(static_cast<size_t>(n * E)), b(a.size()), c(a.size());
  FakeDenoiser d2(E, CE, 2, "x0", net), d7(E, CE, 7, "x0", net);
  ddim_sample(d2, cond.data(), iota_ids(n), o, a.data());
  ddim_sample(d2, cond.data(), iota_ids(n), o, b.data());
  ddim_sample(d7, cond.data(), iota_ids(n), o, c.data());
  EXPECT_EQ(a, b);  // the same call, the same bits
  EXPECT_EQ(a, c);  // chunks of 2 or all 7 at once
  EXPECT_EQ(d2.calls, 2 * 4 * 5);  // 4 chunks x 5 steps per call
  // image 4 alone (its id and condition) is image 4 of the batch
  std::vector<float> one(static_cast<size_t>(E));
  const uint64_t id = 4;
  ddim_sample(d7, cond.data() + 4 * CE, std::span<const uint64_t>(&id, 1), o, one.data());
  for (int64_t i = 0; i < E; ++i) EXPECT_EQ(one[static_cast<size_t>(i)], a[static_cast<size_t>(4 * E + i)]);
  // another seed, other samples
  o.seed = 6;
  ddim_sample(d7, cond.data(), iota_ids(n), o, b.data());
  EXPECT_NE(a, b);
}

TEST(Ddim, NoiseIsStandardNormalAndKeyedPerImageAndStep) {
  double sum = 0, sq = 0;
  const int64_t N = 20000;
  for (int64_t i = 0; i < N; ++i) {
    const double z = ddim_noise(1, 2, 3, i);
    sum += z;
    sq += z * z;
  }
  EXPECT_NEAR(sum / N, 0.0, 0.03);
  EXPECT_NEAR(sq / N, 1.0, 0.05);
  EXPECT_NE(ddim_noise(1, 2, 3, 0), ddim_noise(1, 3, 3, 0));
  EXPECT_NE(ddim_noise(1, 2, 3, 0), ddim_noise(1, 2, 4, 0));
  EXPECT_NE(ddim_noise(1, 2, 3, 0), ddim_noise(2, 2, 3, 0));
}

}  // namespace
}  // namespace ft
