// The synthetic EIT simulator; see synthetic_eit.h for the model and the choices behind it.
#include "data/synthetic_eit.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "core/rng.h"

namespace ft {
namespace {

constexpr double kPi = std::numbers::pi;
// Inclusions stay inside this radius: clear of the electrodes, whose fields are singular.
constexpr double kInclusionRadius = 0.9;

// The stream of one sample: a hash of (seed, split, index) chained through splitmix64, so any
// sample is reachable directly (a counter-based stream) and neighbouring keys are unrelated.
Rng sample_rng(uint64_t seed, int split, int64_t index) {
  uint64_t x = seed ^ 0x4549545F53494Dull;  // "EIT_SIM": a stream of its own for this seed
  uint64_t h = splitmix64(x);
  x = h ^ static_cast<uint64_t>(static_cast<int64_t>(split));
  h = splitmix64(x);
  x = h ^ static_cast<uint64_t>(index);
  return Rng(splitmix64(x));
}

double uniform(Rng& rng, double lo, double hi) {
  // 53 random bits: the geometry is drawn in double.
  const double u = static_cast<double>(rng.next_u64() >> 11) * (1.0 / 9007199254740992.0);
  return lo + (hi - lo) * u;
}

enum class Shape { kCircle, kEllipse, kRoundedRect };

struct Inclusion {
  Shape shape;
  double cx, cy, cos_a, sin_a;
  double a, b;         // radius (circle), semi-axes (ellipse), half-sides (rectangle)
  double corner = 0;   // rounded rectangle's corner radius
  float value;

  bool contains(double x, double y) const {
    const double dx = x - cx, dy = y - cy;
    const double lx = cos_a * dx + sin_a * dy, ly = -sin_a * dx + cos_a * dy;
    switch (shape) {
      case Shape::kCircle:
        return dx * dx + dy * dy <= a * a;
      case Shape::kEllipse:
        return (lx / a) * (lx / a) + (ly / b) * (ly / b) <= 1.0;
      case Shape::kRoundedRect: {
        // Signed distance of a rounded box: the inner box shrunk by the corner radius, grown back.
        const double qx = std::abs(lx) - (a - corner), qy = std::abs(ly) - (b - corner);
        const double ox = std::max(qx, 0.0), oy = std::max(qy, 0.0);
        return std::sqrt(ox * ox + oy * oy) + std::min(std::max(qx, qy), 0.0) - corner <= 0.0;
      }
    }
    return false;
  }
};

Inclusion draw_inclusion(Rng& rng) {
  Inclusion in{};
  in.shape = static_cast<Shape>(rng.next_u64() % 3);
  double bound = 0;  // radius of a circle around the centre holding the whole shape
  switch (in.shape) {
    case Shape::kCircle:
      in.a = in.b = uniform(rng, 0.08, 0.3);
      bound = in.a;
      break;
    case Shape::kEllipse:
      in.a = uniform(rng, 0.08, 0.35);
      in.b = uniform(rng, 0.08, 0.35);
      bound = std::max(in.a, in.b);
      break;
    case Shape::kRoundedRect:
      in.a = uniform(rng, 0.08, 0.28);
      in.b = uniform(rng, 0.08, 0.28);
      in.corner = uniform(rng, 0.0, 0.5) * std::min(in.a, in.b);
      bound = std::hypot(in.a, in.b);
      break;
  }
  const double angle = uniform(rng, 0.0, 2 * kPi);
  in.cos_a = std::cos(angle);
  in.sin_a = std::sin(angle);
  // Centre uniform over the disk of radius 0.9 - bound (sqrt: uniform by area).
  const double rho = (kInclusionRadius - bound) * std::sqrt(uniform(rng, 0.0, 1.0));
  const double phi = uniform(rng, 0.0, 2 * kPi);
  in.cx = rho * std::cos(phi);
  in.cy = rho * std::sin(phi);
  const double magnitude = uniform(rng, 0.2, 1.0);
  in.value = static_cast<float>(rng.next_u64() & 1 ? magnitude : -magnitude);
  return in;
}

void draw_phantom(const EitSimConfig& c, Rng& rng, std::vector<float>& xs) {
  const int n = c.image;
  const double h = 2.0 / n;
  xs.assign(static_cast<size_t>(n) * n, 0.0f);
  const int count = 1 + static_cast<int>(rng.next_u64() % static_cast<uint64_t>(c.max_inclusions));
  for (int k = 0; k < count; ++k) {
    const Inclusion in = draw_inclusion(rng);
    for (int r = 0; r < n; ++r) {
      const double y = 1.0 - (r + 0.5) * h;
      for (int col = 0; col < n; ++col) {
        const double x = -1.0 + (col + 0.5) * h;
        if (in.contains(x, y)) xs[static_cast<size_t>(r) * n + col] = in.value;
      }
    }
  }
}

}  // namespace

std::vector<std::pair<int, int>> eit_measurement_pairs(int electrodes) {
  FT_USER_CHECK(electrodes >= 4, "EIT: need at least 4 electrodes, got ", electrodes);
  const int e = electrodes;
  std::vector<std::pair<int, int>> pairs;
  pairs.reserve(static_cast<size_t>(e) * (e - 3));
  for (int d = 0; d < e; ++d)
    for (int m = 0; m < e; ++m)
      if (m != (d + e - 1) % e && m != d && m != (d + 1) % e) pairs.emplace_back(d, m);
  return pairs;
}

std::vector<float> eit_square_layout(std::span<const float> ys, int electrodes) {
  const auto pairs = eit_measurement_pairs(electrodes);
  FT_USER_CHECK(ys.size() == pairs.size(), "EIT: ", ys.size(), " voltages for ", electrodes, " electrodes, want ",
                pairs.size());
  std::vector<float> sq(static_cast<size_t>(electrodes) * electrodes, 0.0f);
  for (size_t i = 0; i < pairs.size(); ++i)
    sq[static_cast<size_t>(pairs[i].first) * electrodes + pairs[i].second] = ys[i];
  return sq;
}

EitSimulator::EitSimulator(const EitSimConfig& config) : config_(config) {
  const EitSimConfig& c = config_;
  FT_USER_CHECK(c.image >= 8, "EIT: image size ", c.image, " is below 8");
  FT_USER_CHECK(c.electrodes >= 4, "EIT: need at least 4 electrodes, got ", c.electrodes);
  FT_USER_CHECK(c.noise >= 0 && std::isfinite(c.noise), "EIT: noise ", c.noise, " must be finite and >= 0");
  FT_USER_CHECK(c.tikhonov_lambda > 0 && std::isfinite(c.tikhonov_lambda), "EIT: tikhonov_lambda ",
                c.tikhonov_lambda, " must be > 0");
  FT_USER_CHECK(c.max_inclusions >= 1, "EIT: max_inclusions ", c.max_inclusions, " must be >= 1");

  const int n = c.image, e = c.electrodes;
  const double h = 2.0 / n;
  column_.assign(static_cast<size_t>(n) * n, -1);
  for (int r = 0; r < n; ++r)
    for (int col = 0; col < n; ++col) {
      const double x = -1.0 + (col + 0.5) * h, y = 1.0 - (r + 0.5) * h;
      if (x * x + y * y < 1.0) {
        column_[static_cast<size_t>(r) * n + col] = static_cast<int32_t>(disk_.size());
        disk_.push_back(r * n + col);
      }
    }
  const auto pairs = eit_measurement_pairs(e);
  m_ = static_cast<int64_t>(pairs.size());
  const size_t D = disk_.size(), M = pairs.size();

  // J: per pixel, the gradient of each adjacent pair's dipole potential, then their products.
  j_.assign(M * D, 0.0);
  std::vector<double> ex(e), ey(e), gx(e), gy(e);
  for (int k = 0; k < e; ++k) {
    ex[k] = std::cos(2 * kPi * k / e);
    ey[k] = std::sin(2 * kPi * k / e);
  }
  for (size_t p = 0; p < D; ++p) {
    const double x = -1.0 + (disk_[p] % n + 0.5) * h, y = 1.0 - (disk_[p] / n + 0.5) * h;
    // grad log|x - e_k| = (x - e_k) / |x - e_k|^2
    for (int k = 0; k < e; ++k) {
      const double dx = x - ex[k], dy = y - ey[k], r2 = dx * dx + dy * dy;
      gx[k] = dx / r2;
      gy[k] = dy / r2;
    }
    for (size_t i = 0; i < M; ++i) {
      const int d = pairs[i].first, m = pairs[i].second;
      const int d1 = (d + 1) % e, m1 = (m + 1) % e;
      // u = -(1/pi) (log|x - e_in| - log|x - e_out|) for each pair; J = -grad u_d . grad u_m h^2
      const double udx = gx[d] - gx[d1], udy = gy[d] - gy[d1];
      const double umx = gx[m] - gx[m1], umy = gy[m] - gy[m1];
      j_[i * D + p] = -(udx * umx + udy * umy) * (h * h) / (kPi * kPi);
    }
  }

  // J J^T, lower triangle; each entry a sequential sum, so threads never change the result.
  chol_.assign(M * M, 0.0);
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t i = 0; i < static_cast<int64_t>(M); ++i) {
    const double* a = &j_[static_cast<size_t>(i) * D];
    for (int64_t k = 0; k <= i; ++k) {
      const double* b = &j_[static_cast<size_t>(k) * D];
      double s = 0;
      for (size_t p = 0; p < D; ++p) s += a[p] * b[p];
      chol_[static_cast<size_t>(i) * M + k] = s;
    }
  }
  double trace = 0;
  for (size_t i = 0; i < M; ++i) trace += chol_[i * M + i];
  lambda_ = c.tikhonov_lambda * trace / static_cast<double>(M);
  for (size_t i = 0; i < M; ++i) chol_[i * M + i] += lambda_;

  // Cholesky (J J^T + lambda I = L L^T), in place, lower triangle; M = 208 needs no blocking.
  for (size_t j = 0; j < M; ++j) {
    double diag = chol_[j * M + j];
    for (size_t k = 0; k < j; ++k) diag -= chol_[j * M + k] * chol_[j * M + k];
    FT_CHECK(diag > 0, "EIT: J J^T + lambda I is not positive definite at row ", j);
    const double ljj = std::sqrt(diag);
    chol_[j * M + j] = ljj;
    for (size_t i = j + 1; i < M; ++i) {
      double s = chol_[i * M + j];
      for (size_t k = 0; k < j; ++k) s -= chol_[i * M + k] * chol_[j * M + k];
      chol_[i * M + j] = s / ljj;
    }
  }
  for (size_t i = 0; i < M; ++i)
    for (size_t k = i + 1; k < M; ++k) chol_[i * M + k] = 0.0;
}

double EitSimulator::jacobian(int64_t row, int64_t pixel) const {
  FT_CHECK(row >= 0 && row < m_ && pixel >= 0 && pixel < static_cast<int64_t>(column_.size()), "EIT: J[", row,
           ", ", pixel, "] out of range");
  const int32_t col = column_[static_cast<size_t>(pixel)];
  return col < 0 ? 0.0 : j_[static_cast<size_t>(row) * disk_.size() + col];
}

std::vector<double> EitSimulator::forward(std::span<const float> x) const {
  FT_USER_CHECK(x.size() == column_.size(), "EIT: image of ", x.size(), " values, want ", column_.size());
  const size_t D = disk_.size();
  std::vector<double> xd(D);
  for (size_t p = 0; p < D; ++p) xd[p] = x[static_cast<size_t>(disk_[p])];
  std::vector<double> y(static_cast<size_t>(m_));
  for (size_t i = 0; i < y.size(); ++i) {
    const double* row = &j_[i * D];
    double s = 0;
    for (size_t p = 0; p < D; ++p) s += row[p] * xd[p];
    y[i] = s;
  }
  return y;
}

std::vector<float> EitSimulator::reconstruct(std::span<const float> ys) const {
  FT_USER_CHECK(static_cast<int64_t>(ys.size()) == m_, "EIT: ", ys.size(), " voltages, want ", m_);
  const size_t M = static_cast<size_t>(m_), D = disk_.size();
  // alpha = (L L^T)^{-1} ys: forward then backward substitution.
  std::vector<double> alpha(ys.begin(), ys.end());
  for (size_t i = 0; i < M; ++i) {
    double s = alpha[i];
    for (size_t k = 0; k < i; ++k) s -= chol_[i * M + k] * alpha[k];
    alpha[i] = s / chol_[i * M + i];
  }
  for (size_t i = M; i-- > 0;) {
    double s = alpha[i];
    for (size_t k = i + 1; k < M; ++k) s -= chol_[k * M + i] * alpha[k];
    alpha[i] = s / chol_[i * M + i];
  }
  // tr = J^T alpha, row by row so J is read contiguously.
  std::vector<double> acc(D, 0.0);
  for (size_t i = 0; i < M; ++i) {
    const double* row = &j_[i * D];
    const double a = alpha[i];
    for (size_t p = 0; p < D; ++p) acc[p] += row[p] * a;
  }
  std::vector<float> tr(column_.size(), 0.0f);
  for (size_t p = 0; p < D; ++p) tr[static_cast<size_t>(disk_[p])] = static_cast<float>(std::clamp(acc[p], -1.0, 1.0));
  return tr;
}

void EitSimulator::phantom(int split, int64_t index, std::vector<float>& xs) const {
  Rng rng = sample_rng(config_.seed, split, index);
  draw_phantom(config_, rng, xs);
}

void EitSimulator::sample(int split, int64_t index, std::vector<float>& xs, std::vector<float>& ys,
                          std::vector<float>& tr) const {
  Rng rng = sample_rng(config_.seed, split, index);
  draw_phantom(config_, rng, xs);
  const std::vector<double> clean = forward(xs);
  double mean = 0, var = 0;
  for (double v : clean) mean += v;
  mean /= static_cast<double>(clean.size());
  for (double v : clean) var += (v - mean) * (v - mean);
  const double sigma = config_.noise * std::sqrt(var / static_cast<double>(clean.size()));
  ys.resize(clean.size());
  for (size_t i = 0; i < clean.size(); ++i) ys[i] = static_cast<float>(clean[i] + sigma * rng.normal());
  tr = reconstruct(ys);
}

}  // namespace ft
