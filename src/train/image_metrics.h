// Image-reconstruction metrics (CDEIT's RMSE, PSNR and SSIM) of a reconstruction against its
// ground truth. Images come in the diffusion model's range [-1, 1] and are mapped by
// v / 2 + 0.5 into [0, 1] first, so the data range is 1. Values outside [-1, 1] are mapped,
// not clipped: a reconstruction that overshoots pays for it (clip before calling if the
// protocol says so).
//
//   RMSE = sqrt(mean over pixels of (a - b)^2), in the mapped [0, 1] units.
//   PSNR = 20 log10(1 / RMSE) dB; identical images (RMSE 0) score kPsnrCap = 100 dB instead of
//          infinity, so that a batch mean stays finite.
//   SSIM = Wang, Bovik, Sheikh, Simoncelli (IEEE TIP 2004) as scikit-image computes it with
//          structural_similarity(a, b, gaussian_weights=True, sigma=1.5,
//          use_sample_covariance=False, data_range=1):
//          local means, variances and covariance by a separable Gaussian (sigma 1.5, truncated
//          at 3.5 sigma: radius 5, an 11 x 11 window, weights normalised to sum 1, as scipy's
//          gaussian_filter), population (not sample) covariances, C1 = (0.01)^2,
//          C2 = (0.03)^2, and
//            S = (2 mu_a mu_b + C1)(2 cov_ab + C2) / ((mu_a^2 + mu_b^2 + C1)(var_a + var_b + C2))
//          averaged over the pixels whose window lies wholly inside the image (skimage filters
//          the whole image, then crops (11 - 1) / 2 = 5 pixels from every side before the mean,
//          so its border handling never reaches the average). Images must be at least 11 x 11.
//          Computed in double (skimage on float64 inputs; on float32 inputs it works in float32
//          and differs in the 6th or 7th digit).
// A batch's metrics are the means of the per-image values (CDEIT reports the mean PSNR over
// images, not the PSNR of the mean error).
#pragma once
#include <cstdint>
#include <span>

namespace ft {

inline constexpr double kPsnrCap = 100.0;

struct ImageMetrics {
  double rmse = 0, psnr = 0, ssim = 0;  // means over images (0 when there are none)
  int64_t images = 0;
};

// One image each; recon and truth have the same size (UserError otherwise).
double image_rmse(std::span<const float> recon, std::span<const float> truth);
// 20 log10(1 / rmse), kPsnrCap when rmse is 0 (or so small that the value would exceed it).
double psnr_from_rmse(double rmse);
double image_psnr(std::span<const float> recon, std::span<const float> truth);
// height x width row-major images; UserError when a side is below 11 or the sizes disagree.
double image_ssim(std::span<const float> recon, std::span<const float> truth, int height, int width);

// Sums per-image metrics; add(other) merges accumulators (threads, ranks, batches).
class ImageMetricsAccumulator {
 public:
  // One height x width image.
  void add_image(std::span<const float> recon, std::span<const float> truth, int height, int width);
  // A batch [n, height, width], n = size / (height * width) (UserError unless exact).
  void add_batch(std::span<const float> recon, std::span<const float> truth, int height, int width);
  void add(const ImageMetricsAccumulator& other);
  ImageMetrics result() const;

 private:
  double rmse_ = 0, psnr_ = 0, ssim_ = 0;
  int64_t images_ = 0;
};

// The means over a batch [n, height, width].
ImageMetrics image_metrics(std::span<const float> recon, std::span<const float> truth, int height, int width);

}  // namespace ft
