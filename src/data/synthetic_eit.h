// A synthetic electrical impedance tomography (EIT) data set shaped like CDEIT's (Shi, Kang,
// Liatsis, IEEE TIM 2025): per sample a conductivity image xs [image x image], the boundary
// voltages ys [electrodes * (electrodes - 3)] and a Tikhonov reconstruction tr [image x image]
// that a conditional diffusion model refines. Demos and tests need no download; the physics
// is linearised and simplified on purpose (see below), what matters is that the problem is
// smooth and ill-posed, so that the Tikhonov baseline is blurry and a learned model can beat it.
//
// Geometry. The domain is the unit disk inscribed in the square [-1, 1]^2; pixel (r, c) of
// the image (row-major, row 0 at the top) has its centre at x = -1 + (c + 0.5) h,
// y = 1 - (r + 0.5) h, h = 2 / image; it is "in the disk" when x^2 + y^2 < 1. The E point
// electrodes sit on the unit circle at angles 2 pi k / E, k = 0..E-1 (electrode 0 at (1, 0),
// counter-clockwise).
//
// Images. xs is the conductivity change from a homogeneous background, scaled to [-1, 1]
// (the range the diffusion model works in; the metrics map x / 2 + 0.5 into [0, 1]):
//   - 0 for the background inside the disk AND outside the disk. Outside carries no
//     information (J is 0 there), so any constant would do; 0 keeps the background one value
//     and keeps the Tikhonov image (also 0 outside) from scoring points for free there.
//   - 1..max_inclusions inclusions: circles, ellipses and rounded rectangles (random size,
//     centre and rotation), each wholly inside radius 0.9 (clear of the electrodes), with a
//     contrast uniform in [-1, -0.2] or [0.2, 1] (sign by a coin: conductive or resistive).
//     Later inclusions paint over earlier ones, so values stay in [-1, 1].
//
// Forward operator J [M x image^2], M = E (E - 3), fixed: it depends on image and electrodes
// only, never on the seed. Adjacent drive: drive d injects a unit current at electrode d and
// takes it out at d + 1 (mod E); the measurement pair m reads electrode m minus m + 1. Pairs
// touching a drive electrode are skipped (m = d - 1, d, d + 1), leaving E - 3 per drive. The
// order is drive-major, measurement pairs in increasing m: row d of CDEIT's E x E layout holds
// its E - 3 values, skipping columns d - 1, d, d + 1 (eit_square_layout below).
// For point electrodes on the unit disk the potential of a boundary dipole is exact in closed
// form: u(x) = -(1/pi) (log|x - e_in| - log|x - e_out|) satisfies the Neumann condition away
// from the electrodes. The linearised (Geselowitz) sensitivity of measurement (d, m) to a
// conductivity change in pixel p is then
//   J[(d, m), p] = -grad u_d(p) . grad u_m(p) * h^2,
// with u_m the field of a unit current through the measurement pair (reciprocity), 0 outside
// the disk. ys are the difference voltages J xs (volts for a background of conductivity 1).
// J is smooth, large near the electrodes and small in the centre: deep inclusions are barely
// seen, which is what makes EIT ill-posed.
//
// Noise: ys = J xs + noise * std(J xs) * N(0, 1) per measurement, std over the sample's own M
// clean voltages (a per-sample signal-to-noise ratio, as in CDEIT's simulated data).
//
// Tikhonov: tr = clip(J^T (J J^T + lambda I)^{-1} ys, -1, 1) in the dual form (an M x M SPD
// system, Cholesky-factored once in the constructor and reused by every sample), with
// lambda = tikhonov_lambda * trace(J J^T) / M, i.e. relative to the mean eigenvalue, so the
// setting means the same at any image size. At the defaults (128 x 128, noise 0.01, lambda
// 1e-3) the Tikhonov image scores RMSE ~0.05, PSNR ~25-28 dB and SSIM ~0.87-0.89 against xs
// (train/image_metrics.h), with a correlation of ~0.75 inside the disk; it underestimates the
// contrast (peaks ~0.4-1) and rings near the electrodes. The all-background guess scores
// PSNR ~21-23 dB but SSIM ~0.91: SSIM rewards flat backgrounds, and most of the image is one.
// J + Cholesky take ~0.15 s at 128 x 128 on 2 cores, a sample ~5 ms on one core.
//
// Determinism. Each sample draws from its own stream keyed by (seed, split, index), so sample
// i never depends on samples 0..i-1: files can be written in parallel, in any order, and
// reproduce bit for bit on every machine (no BLAS in the per-sample path or in J J^T; sums
// run in a fixed order whatever the thread count).
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace ft {

struct EitSimConfig {
  int image = 128;       // xs and tr are image x image
  int electrodes = 16;   // measurements = electrodes * (electrodes - 3) = 208
  double noise = 0.01;   // Gaussian noise std relative to the sample's clean-voltage std
  // Relative to the mean eigenvalue of J J^T (see above). 1e-3 gives a blurry image with the
  // inclusions' signs and rough places right (correlation ~0.6-0.9 with xs inside the disk);
  // 1e-2 blurs more, 1e-4 starts to ring.
  double tikhonov_lambda = 1e-3;
  uint64_t seed = 0;     // the phantoms and noise; never J
  int max_inclusions = 3;
};

// The (drive, measure) electrode index pairs of the M measurements, in ys order.
std::vector<std::pair<int, int>> eit_measurement_pairs(int electrodes);

// ys [E (E - 3)] spread into CDEIT's E x E layout (row d = drive d, column m = measure pair m;
// 0 in the three skipped columns d - 1, d, d + 1 of each row).
std::vector<float> eit_square_layout(std::span<const float> ys, int electrodes);

class EitSimulator {
 public:
  // Builds J and factors J J^T + lambda I. UserError for an image below 8, fewer than 4
  // electrodes, a negative noise, a lambda <= 0 or max_inclusions < 1.
  explicit EitSimulator(const EitSimConfig& config);

  // Sample `index` of `split` (any integers: e.g. 0 train, 1 valid, 2 test). Resizes and fills
  // xs and tr (image^2 floats, row-major) and ys (measurements() floats). Thread-safe: const,
  // no shared mutable state, so samples may be drawn concurrently.
  void sample(int split, int64_t index, std::vector<float>& xs, std::vector<float>& ys, std::vector<float>& tr) const;

  // The pieces of sample(), for tests and tools. phantom: xs alone (the same as sample's).
  void phantom(int split, int64_t index, std::vector<float>& xs) const;
  // Clean voltages J x for any image x (image^2 values).
  std::vector<double> forward(std::span<const float> x) const;
  // The Tikhonov image of any ys (measurements() values), clipped to [-1, 1].
  std::vector<float> reconstruct(std::span<const float> ys) const;

  int64_t measurements() const { return m_; }
  int image() const { return config_.image; }
  const EitSimConfig& config() const { return config_; }
  // The absolute lambda used (tikhonov_lambda * trace(J J^T) / M).
  double lambda() const { return lambda_; }
  // J[row, pixel] with pixel = r * image + c (0 outside the disk).
  double jacobian(int64_t row, int64_t pixel) const;
  // Pixels inside the disk, in increasing order.
  const std::vector<int32_t>& disk_pixels() const { return disk_; }

 private:
  EitSimConfig config_;
  int64_t m_ = 0;
  std::vector<int32_t> disk_;     // pixel index of each disk pixel
  std::vector<int32_t> column_;   // image^2: the disk column of a pixel, -1 outside
  std::vector<double> j_;         // [m_ x disk_.size()], row-major
  std::vector<double> chol_;      // [m_ x m_] lower Cholesky factor of J J^T + lambda I
  double lambda_ = 0;
};

}  // namespace ft
