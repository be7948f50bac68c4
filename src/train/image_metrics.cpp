#include "train/image_metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace ft {
namespace {

constexpr int kRadius = 5;  // int(3.5 * 1.5 + 0.5), scipy's truncation of sigma 1.5
constexpr int kWindow = 2 * kRadius + 1;
constexpr double kC1 = 0.01 * 0.01, kC2 = 0.03 * 0.03;  // (K data_range)^2, data range 1

// scipy.ndimage's 1-D Gaussian: exp(-x^2 / (2 sigma^2)) for x = -5..5, normalised to sum 1.
std::array<double, kWindow> gaussian_weights() {
  std::array<double, kWindow> w{};
  double sum = 0;
  for (int t = 0; t < kWindow; ++t) {
    const double x = t - kRadius;
    sum += w[t] = std::exp(-0.5 * x * x / (1.5 * 1.5));
  }
  for (double& v : w) v /= sum;
  return w;
}

double mapped(float v) { return 0.5 * static_cast<double>(v) + 0.5; }

void check_pair(std::span<const float> recon, std::span<const float> truth) {
  FT_USER_CHECK(recon.size() == truth.size(), "image metrics: reconstruction of ", recon.size(),
                " values, ground truth of ", truth.size());
}

}  // namespace

double image_rmse(std::span<const float> recon, std::span<const float> truth) {
  check_pair(recon, truth);
  FT_USER_CHECK(!recon.empty(), "image metrics: empty image");
  double sum = 0;
  for (size_t i = 0; i < recon.size(); ++i) {
    const double d = mapped(recon[i]) - mapped(truth[i]);
    sum += d * d;
  }
  return std::sqrt(sum / static_cast<double>(recon.size()));
}

double psnr_from_rmse(double rmse) {
  if (!(rmse > 0)) return std::isnan(rmse) ? rmse : kPsnrCap;
  return std::min(kPsnrCap, -20.0 * std::log10(rmse));
}

double image_psnr(std::span<const float> recon, std::span<const float> truth) {
  return psnr_from_rmse(image_rmse(recon, truth));
}

double image_ssim(std::span<const float> recon, std::span<const float> truth, int height, int width) {
  check_pair(recon, truth);
  FT_USER_CHECK(height >= kWindow && width >= kWindow, "SSIM: image ", height, " x ", width,
                " is smaller than the 11 x 11 window");
  FT_USER_CHECK(static_cast<int64_t>(recon.size()) == int64_t{height} * width, "SSIM: ", recon.size(),
                " values for a ", height, " x ", width, " image");
  static const std::array<double, kWindow> w = gaussian_weights();
  const int vh = height - 2 * kRadius, vw = width - 2 * kRadius;  // the valid windows
  // Horizontal pass over every row, valid columns only: a, b, a^2, b^2, ab.
  std::vector<double> h(static_cast<size_t>(height) * vw * 5);
  for (int r = 0; r < height; ++r) {
    const size_t base = static_cast<size_t>(r) * width;
    for (int c = 0; c < vw; ++c) {
      double s[5] = {0, 0, 0, 0, 0};
      for (int t = 0; t < kWindow; ++t) {
        const double a = mapped(recon[base + c + t]), b = mapped(truth[base + c + t]);
        s[0] += w[t] * a;
        s[1] += w[t] * b;
        s[2] += w[t] * a * a;
        s[3] += w[t] * b * b;
        s[4] += w[t] * a * b;
      }
      for (int q = 0; q < 5; ++q) h[(static_cast<size_t>(r) * vw + c) * 5 + q] = s[q];
    }
  }
  // Vertical pass on valid rows, then the SSIM map's mean.
  double total = 0;
  for (int r = 0; r < vh; ++r)
    for (int c = 0; c < vw; ++c) {
      double s[5] = {0, 0, 0, 0, 0};
      for (int t = 0; t < kWindow; ++t)
        for (int q = 0; q < 5; ++q) s[q] += w[t] * h[(static_cast<size_t>(r + t) * vw + c) * 5 + q];
      const double ua = s[0], ub = s[1];
      const double va = s[2] - ua * ua, vb = s[3] - ub * ub, cov = s[4] - ua * ub;
      total += (2 * ua * ub + kC1) * (2 * cov + kC2) / ((ua * ua + ub * ub + kC1) * (va + vb + kC2));
    }
  return total / (static_cast<double>(vh) * vw);
}

void ImageMetricsAccumulator::add_image(std::span<const float> recon, std::span<const float> truth, int height,
                                        int width) {
  const double rmse = image_rmse(recon, truth);
  rmse_ += rmse;
  psnr_ += psnr_from_rmse(rmse);
  ssim_ += image_ssim(recon, truth, height, width);
  ++images_;
}

void ImageMetricsAccumulator::add_batch(std::span<const float> recon, std::span<const float> truth, int height,
                                        int width) {
  check_pair(recon, truth);
  FT_USER_CHECK(height > 0 && width > 0, "image metrics: image ", height, " x ", width);
  const size_t hw = static_cast<size_t>(height) * width;
  FT_USER_CHECK(recon.size() % hw == 0, "image metrics: ", recon.size(), " values are not a batch of ", height,
                " x ", width, " images");
  for (size_t off = 0; off < recon.size(); off += hw)
    add_image(recon.subspan(off, hw), truth.subspan(off, hw), height, width);
}

void ImageMetricsAccumulator::add(const ImageMetricsAccumulator& other) {
  rmse_ += other.rmse_;
  psnr_ += other.psnr_;
  ssim_ += other.ssim_;
  images_ += other.images_;
}

ImageMetrics ImageMetricsAccumulator::result() const {
  ImageMetrics m;
  m.images = images_;
  if (images_ > 0) {
    const double n = static_cast<double>(images_);
    m.rmse = rmse_ / n;
    m.psnr = psnr_ / n;
    m.ssim = ssim_ / n;
  }
  return m;
}

ImageMetrics image_metrics(std::span<const float> recon, std::span<const float> truth, int height, int width) {
  ImageMetricsAccumulator acc;
  acc.add_batch(recon, truth, height, width);
  return acc.result();
}

}  // namespace ft
