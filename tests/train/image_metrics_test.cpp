// Image metrics (train/image_metrics.h): RMSE and PSNR by hand, SSIM against hand values of
// the formula and against a slow direct implementation (2-D windows, no separability, no
// shared code), its properties (1 for identical images, symmetric, falling with noise), and
// the batch means and the accumulator.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "train/image_metrics.h"

namespace ft {
namespace {

using F = std::vector<float>;

F random_image(int h, int w, uint64_t seed) {
  Rng rng(seed);
  F x(static_cast<size_t>(h) * w);
  for (float& v : x) v = 2 * rng.uniform() - 1;
  return x;
}

F plus_noise(const F& x, double sigma, uint64_t seed) {
  Rng rng(seed);
  F y(x);
  for (float& v : y) v = static_cast<float>(v + sigma * rng.normal());
  return y;
}

// The SSIM definition read directly: for every 11 x 11 window wholly inside the image, the
// Gaussian-weighted (2-D weights exp(-(i^2 + j^2) / (2 1.5^2)), normalised over the window)
// means, population variances and covariance of the [0, 1]-mapped images, then the mean of S.
double slow_ssim(const F& a, const F& b, int h, int w) {
  double g[11][11], sum = 0;
  for (int i = 0; i < 11; ++i)
    for (int j = 0; j < 11; ++j) sum += g[i][j] = std::exp(-((i - 5) * (i - 5) + (j - 5) * (j - 5)) / 4.5);
  double total = 0;
  int windows = 0;
  for (int r = 0; r + 11 <= h; ++r)
    for (int c = 0; c + 11 <= w; ++c) {
      double ma = 0, mb = 0;
      for (int i = 0; i < 11; ++i)
        for (int j = 0; j < 11; ++j) {
          const size_t p = static_cast<size_t>(r + i) * w + (c + j);
          ma += g[i][j] / sum * (a[p] / 2.0 + 0.5);
          mb += g[i][j] / sum * (b[p] / 2.0 + 0.5);
        }
      double va = 0, vb = 0, cov = 0;
      for (int i = 0; i < 11; ++i)
        for (int j = 0; j < 11; ++j) {
          const size_t p = static_cast<size_t>(r + i) * w + (c + j);
          const double da = a[p] / 2.0 + 0.5 - ma, db = b[p] / 2.0 + 0.5 - mb;
          va += g[i][j] / sum * da * da;
          vb += g[i][j] / sum * db * db;
          cov += g[i][j] / sum * da * db;
        }
      const double c1 = 1e-4, c2 = 9e-4;
      total += (2 * ma * mb + c1) * (2 * cov + c2) / ((ma * ma + mb * mb + c1) * (va + vb + c2));
      ++windows;
    }
  return total / windows;
}

TEST(ImageMetrics, RmseAndPsnrByHand) {
  // +1 vs -1 everywhere: mapped 1 vs 0, RMSE 1, PSNR 0
  EXPECT_DOUBLE_EQ(image_rmse(F(16, 1.0f), F(16, -1.0f)), 1.0);
  EXPECT_DOUBLE_EQ(image_psnr(F(16, 1.0f), F(16, -1.0f)), 0.0);
  // 0 vs 1: mapped 0.5 vs 1, RMSE 0.5, PSNR 20 log10 2
  EXPECT_DOUBLE_EQ(image_rmse(F(9, 0.0f), F(9, 1.0f)), 0.5);
  EXPECT_NEAR(image_psnr(F(9, 0.0f), F(9, 1.0f)), 6.020599913279624, 1e-12);
  // half the pixels off by 0.25 (0.125 mapped): RMSE sqrt(0.125^2 / 2)
  const F a{0.5f, 0.5f, -0.5f, -0.5f}, b{0.75f, 0.5f, -0.75f, -0.5f};
  EXPECT_NEAR(image_rmse(a, b), 0.125 / std::sqrt(2.0), 1e-15);
  EXPECT_NEAR(image_psnr(a, b), -20 * std::log10(0.125 / std::sqrt(2.0)), 1e-12);
  // identical: the cap, not infinity
  EXPECT_EQ(image_psnr(a, a), kPsnrCap);
  EXPECT_EQ(psnr_from_rmse(0.0), kPsnrCap);
  EXPECT_EQ(psnr_from_rmse(1e-300), kPsnrCap);
  EXPECT_NEAR(psnr_from_rmse(0.1), 20.0, 1e-12);
  EXPECT_TRUE(std::isnan(psnr_from_rmse(std::nan(""))));
  // values outside [-1, 1] are mapped, not clipped: 3 vs 1 is mapped 2 vs 1
  EXPECT_DOUBLE_EQ(image_rmse(F(4, 3.0f), F(4, 1.0f)), 1.0);
}

TEST(ImageMetrics, SsimHandValues) {
  // Constant images: variances and covariance vanish, S = (2 a b + C1) / (a^2 + b^2 + C1)
  // (to 1e-12: E[a^2] - E[a]^2 cancels to ~1e-16, which C2 = 9e-4 magnifies, as in skimage).
  // Raw 0 and 0.5 are mapped 0.5 and 0.75: (0.75 + 1e-4) / (0.8125 + 1e-4).
  EXPECT_NEAR(image_ssim(F(121, 0.0f), F(121, 0.5f), 11, 11), 0.9230863893674625, 1e-12);
  EXPECT_NEAR(image_ssim(F(40 * 30, 0.0f), F(40 * 30, 0.5f), 40, 30), 0.9230863893674625, 1e-12);
  // One 11 x 11 window; a: 0 (0.5 mapped) with 1 (1.0 mapped) in the centre, b: 0 everywhere.
  // The centre weight W = w0^2, w0 = 1 / sum_{x=-5..5} exp(-x^2 / 4.5) = 0.26601172486179436:
  // mu_a = 0.5 + 0.5 W, mu_b = 0.5, var_a = 0.25 W (1 - W), var_b = cov = 0, so
  // S = (2 mu_a mu_b + C1) C2 / ((mu_a^2 + mu_b^2 + C1)(var_a + C2)) = 0.05178583575072102.
  F spike(121, 0.0f);
  spike[60] = 1.0f;
  EXPECT_NEAR(image_ssim(spike, F(121, 0.0f), 11, 11), 0.05178583575072102, 1e-13);
  // A spike away from the centre of a 13 x 13 image: of its 9 windows, 8 see it off-centre.
  F big(169, 0.0f);
  big[6 * 13 + 6] = 1.0f;
  EXPECT_NEAR(image_ssim(big, F(169, 0.0f), 13, 13), slow_ssim(big, F(169, 0.0f), 13, 13), 1e-13);
}

TEST(ImageMetrics, SsimMatchesTheDirectDefinition) {
  for (auto [h, w] : {std::pair{11, 11}, std::pair{20, 17}, std::pair{16, 33}}) {
    const F a = random_image(h, w, 1 + h), b = random_image(h, w, 100 + w);
    EXPECT_NEAR(image_ssim(a, b, h, w), slow_ssim(a, b, h, w), 1e-12) << h << "x" << w;
    const F c = plus_noise(a, 0.1, 7);
    EXPECT_NEAR(image_ssim(a, c, h, w), slow_ssim(a, c, h, w), 1e-12) << h << "x" << w;
  }
}

TEST(ImageMetrics, SsimProperties) {
  const int h = 32, w = 40;
  // a smooth image with structure, so noise has something to destroy
  F x(static_cast<size_t>(h) * w);
  for (int r = 0; r < h; ++r)
    for (int c = 0; c < w; ++c) x[r * w + c] = static_cast<float>(0.8 * std::sin(r / 4.0) * std::cos(c / 5.0));
  EXPECT_NEAR(image_ssim(x, x, h, w), 1.0, 1e-12);
  const F y = plus_noise(x, 0.1, 3);
  EXPECT_DOUBLE_EQ(image_ssim(x, y, h, w), image_ssim(y, x, h, w));
  double last = 1.0;
  for (double sigma : {0.02, 0.05, 0.1, 0.2, 0.4}) {
    const double s = image_ssim(plus_noise(x, sigma, 11), x, h, w);
    EXPECT_LT(s, last) << sigma;
    EXPECT_GT(s, -1.0);
    last = s;
  }
  EXPECT_LT(last, 0.5);
  // an inverted image anticorrelates: SSIM below 0
  F inv(x);
  for (float& v : inv) v = -v;
  EXPECT_LT(image_ssim(inv, x, h, w), 0.0);
}

TEST(ImageMetrics, BatchMeansAndAccumulator) {
  const int h = 12, w = 14, hw = h * w;
  const F t0 = random_image(h, w, 1), t1 = random_image(h, w, 2), t2 = random_image(h, w, 3);
  const F r0 = plus_noise(t0, 0.1, 4), r1 = plus_noise(t1, 0.3, 5), r2 = t2;  // r2 exact: PSNR capped
  F recon, truth;
  for (const F* p : {&r0, &r1, &r2}) recon.insert(recon.end(), p->begin(), p->end());
  for (const F* p : {&t0, &t1, &t2}) truth.insert(truth.end(), p->begin(), p->end());

  const ImageMetrics m = image_metrics(recon, truth, h, w);
  EXPECT_EQ(m.images, 3);
  EXPECT_NEAR(m.rmse, (image_rmse(r0, t0) + image_rmse(r1, t1) + 0.0) / 3, 1e-15);
  EXPECT_NEAR(m.psnr, (image_psnr(r0, t0) + image_psnr(r1, t1) + kPsnrCap) / 3, 1e-12);
  EXPECT_NEAR(m.ssim, (image_ssim(r0, t0, h, w) + image_ssim(r1, t1, h, w) + 1.0) / 3, 1e-12);

  // the same over two batches and a merge
  ImageMetricsAccumulator a, b;
  a.add_batch(std::span<const float>(recon).first(hw), std::span<const float>(truth).first(hw), h, w);
  b.add_batch(std::span<const float>(recon).subspan(hw), std::span<const float>(truth).subspan(hw), h, w);
  a.add(b);
  const ImageMetrics merged = a.result();
  EXPECT_EQ(merged.images, 3);
  EXPECT_NEAR(merged.rmse, m.rmse, 1e-15);
  EXPECT_NEAR(merged.psnr, m.psnr, 1e-12);
  EXPECT_NEAR(merged.ssim, m.ssim, 1e-12);

  const ImageMetrics empty = ImageMetricsAccumulator().result();
  EXPECT_EQ(empty.images, 0);
  EXPECT_EQ(empty.psnr, 0.0);
}

TEST(ImageMetrics, RejectsBadShapes) {
  EXPECT_THROW(image_rmse(F(4), F(5)), UserError);
  EXPECT_THROW(image_rmse(F{}, F{}), UserError);
  EXPECT_THROW(image_ssim(F(100), F(100), 10, 10), UserError);   // below the 11 x 11 window
  EXPECT_THROW(image_ssim(F(121), F(121), 11, 12), UserError);   // size disagrees with h x w
  EXPECT_THROW(image_metrics(F(121 * 2 + 1), F(121 * 2 + 1), 11, 11), UserError);  // not whole images
}

}  // namespace
}  // namespace ft
