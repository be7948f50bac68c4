// The synthetic EIT simulator (data/synthetic_eit.h): the measurement layout, determinism in
// (seed, split, index) whatever the order or thread, the phantoms' geometry and range, a J
// that no seed changes (and that obeys reciprocity), voltages within the noise of J xs, and
// a Tikhonov baseline that is correlated with the truth yet far from perfect.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <set>
#include <thread>
#include <vector>

#include "data/synthetic_eit.h"
#include "test_util.h"
#include "train/image_metrics.h"

namespace ft {
namespace {

using test::expect_user_error;

// Most tests run at 64 x 64 (J in ~0.2 s); the baseline numbers at the default 128.
EitSimConfig small_config(uint64_t seed = 7) {
  EitSimConfig c;
  c.image = 64;
  c.seed = seed;
  return c;
}

struct Sample {
  std::vector<float> xs, ys, tr;
  bool operator==(const Sample&) const = default;
};

Sample draw(const EitSimulator& sim, int split, int64_t index) {
  Sample s;
  sim.sample(split, index, s.xs, s.ys, s.tr);
  return s;
}

// Pearson correlation of a and b over the disk pixels.
double disk_correlation(const EitSimulator& sim, const std::vector<float>& a, const std::vector<float>& b) {
  double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
  const double n = static_cast<double>(sim.disk_pixels().size());
  for (int32_t p : sim.disk_pixels()) {
    sa += a[p], sb += b[p], saa += double{a[p]} * a[p], sbb += double{b[p]} * b[p], sab += double{a[p]} * b[p];
  }
  const double cov = sab / n - sa / n * (sb / n);
  return cov / std::sqrt((saa / n - sa / n * (sa / n)) * (sbb / n - sb / n * (sb / n)));
}

TEST(SyntheticEit, MeasurementLayout) {
  const auto pairs = eit_measurement_pairs(16);
  ASSERT_EQ(pairs.size(), 208u);
  // drive 0 skips measure pairs 15, 0, 1; drive 1 skips 0, 1, 2; drive-major, m increasing
  EXPECT_EQ(pairs[0], std::make_pair(0, 2));
  EXPECT_EQ(pairs[12], std::make_pair(0, 14));
  EXPECT_EQ(pairs[13], std::make_pair(1, 3));
  EXPECT_EQ(pairs[25], std::make_pair(1, 15));
  EXPECT_EQ(pairs[207], std::make_pair(15, 13));
  for (auto [d, m] : pairs) {
    EXPECT_NE(m, d);
    EXPECT_NE(m, (d + 1) % 16);
    EXPECT_NE(m, (d + 15) % 16);
  }
  std::vector<float> ys(208);
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<float>(i + 1);
  const std::vector<float> sq = eit_square_layout(ys, 16);
  ASSERT_EQ(sq.size(), 256u);
  // row 0: columns 15, 0, 1 empty, then 1..13 in columns 2..14
  EXPECT_EQ(sq[0], 0.0f);
  EXPECT_EQ(sq[1], 0.0f);
  EXPECT_EQ(sq[2], 1.0f);
  EXPECT_EQ(sq[14], 13.0f);
  EXPECT_EQ(sq[15], 0.0f);
  // row 5: columns 4, 5, 6 empty, 0..3 then 7..15
  EXPECT_EQ(sq[5 * 16 + 0], 66.0f);
  EXPECT_EQ(sq[5 * 16 + 4], 0.0f);
  EXPECT_EQ(sq[5 * 16 + 6], 0.0f);
  EXPECT_EQ(sq[5 * 16 + 7], 70.0f);
  int zeros = 0;
  for (float v : sq) zeros += v == 0.0f;
  EXPECT_EQ(zeros, 48);
  expect_user_error([&] { eit_square_layout(std::span<const float>(ys).first(200), 16); }, {"200 voltages", "208"});
}

TEST(SyntheticEit, DeterministicInSeedSplitIndex) {
  const EitSimulator a(small_config()), b(small_config());
  EXPECT_EQ(a.measurements(), 208);
  const Sample s = draw(a, 0, 5);
  EXPECT_EQ(s.xs.size(), 64u * 64u);
  EXPECT_EQ(s.ys.size(), 208u);
  EXPECT_EQ(s.tr.size(), 64u * 64u);
  EXPECT_EQ(s, draw(b, 0, 5));  // another simulator, same config: bit for bit
  EXPECT_EQ(s, draw(a, 0, 5));  // and again
  EXPECT_NE(s.xs, draw(a, 1, 5).xs);  // split matters
  EXPECT_NE(s.xs, draw(a, 0, 6).xs);  // index matters
  EXPECT_NE(s.xs, draw(a, 0, 5 + (int64_t{1} << 40)).xs);  // all 64 bits of it
  std::vector<float> xs;
  a.phantom(0, 5, xs);
  EXPECT_EQ(xs, s.xs);
}

TEST(SyntheticEit, DifferentSeedsDiffer) {
  const EitSimulator a(small_config(1)), b(small_config(2));
  for (int i = 0; i < 5; ++i) {
    const Sample sa = draw(a, 0, i), sb = draw(b, 0, i);
    EXPECT_NE(sa.xs, sb.xs) << i;
    EXPECT_NE(sa.ys, sb.ys) << i;
  }
}

TEST(SyntheticEit, IndependentOfOrderAndThreads) {
  const EitSimulator sim(small_config());
  constexpr int kN = 12;
  std::vector<Sample> forward_order(kN), reverse_order(kN), threaded(kN);
  for (int i = 0; i < kN; ++i) forward_order[i] = draw(sim, 2, i);
  for (int i = kN - 1; i >= 0; --i) reverse_order[i] = draw(sim, 2, i);
  // Concurrent calls on one const simulator: 3 threads, interleaved indices.
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int i = t; i < kN; i += 3) threaded[i] = draw(sim, 2, i);
    });
  for (auto& t : threads) t.join();
  std::vector<Sample> omp(kN);
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < kN; ++i) omp[i] = draw(sim, 2, i);
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(forward_order[i], reverse_order[i]) << i;
    EXPECT_EQ(forward_order[i], threaded[i]) << i;
    EXPECT_EQ(forward_order[i], omp[i]) << i;
  }
}

TEST(SyntheticEit, PhantomsInsideTheDiskAndInRange) {
  EitSimConfig c = small_config();
  c.max_inclusions = 4;
  const EitSimulator sim(c);
  const int n = c.image;
  const double h = 2.0 / n;
  std::set<int> counts;
  for (int i = 0; i < 60; ++i) {
    const Sample s = draw(sim, 0, i);
    std::set<float> values;
    for (int r = 0; r < n; ++r)
      for (int col = 0; col < n; ++col) {
        const float v = s.xs[r * n + col];
        const float t = s.tr[r * n + col];
        ASSERT_GE(t, -1.0f);
        ASSERT_LE(t, 1.0f);
        const double x = -1 + (col + 0.5) * h, y = 1 - (r + 0.5) * h, rad = std::hypot(x, y);
        if (rad >= 1.0) EXPECT_EQ(t, 0.0f) << "tr outside the disk";
        if (v == 0.0f) continue;
        values.insert(v);
        // inclusions lie within radius 0.9 (pixel centres tested, so no slack needed)
        EXPECT_LT(rad, 0.9) << "sample " << i << " pixel " << r << "," << col;
        EXPECT_GE(std::abs(v), 0.2f);
        EXPECT_LE(std::abs(v), 1.0f);
      }
    // at least one inclusion shows; no more distinct values than inclusions
    EXPECT_GE(values.size(), 1u) << i;
    EXPECT_LE(values.size(), 4u) << i;
    counts.insert(static_cast<int>(values.size()));
  }
  EXPECT_GE(counts.size(), 3u);  // 1..4 inclusions all occur over 60 samples (usually all four)
}

TEST(SyntheticEit, ForwardOperatorIsFixedAndReciprocal) {
  const EitSimulator a(small_config(1)), b(small_config(12345));
  EXPECT_EQ(a.lambda(), b.lambda());
  const int64_t pixels = 64 * 64;
  for (int64_t row = 0; row < 208; row += 13)
    for (int64_t p = 0; p < pixels; p += 97) ASSERT_EQ(a.jacobian(row, p), b.jacobian(row, p));
  // a phantom of one seed maps to the same voltages under the other's J
  std::vector<float> xs;
  a.phantom(0, 3, xs);
  EXPECT_EQ(a.forward(xs), b.forward(xs));

  // J is 0 outside the disk and smooth, nonzero inside
  EXPECT_EQ(a.jacobian(0, 0), 0.0);                   // the corner
  EXPECT_NE(a.jacobian(0, 32 * 64 + 32), 0.0);        // near the centre
  // reciprocity: driving d and measuring m equals driving m and measuring d
  const auto pairs = eit_measurement_pairs(16);
  int checked = 0;
  for (size_t i = 0; i < pairs.size(); ++i)
    for (size_t k = 0; k < pairs.size(); ++k)
      if (pairs[k].first == pairs[i].second && pairs[k].second == pairs[i].first) {
        for (int64_t p = 0; p < pixels; p += 31)
          ASSERT_NEAR(a.jacobian(static_cast<int64_t>(i), p), a.jacobian(static_cast<int64_t>(k), p), 1e-15);
        ++checked;
      }
  EXPECT_EQ(checked, 208);
}

TEST(SyntheticEit, VoltagesAreJxWithinTheNoise) {
  EitSimConfig quiet = small_config();
  quiet.noise = 0;
  const EitSimulator clean(quiet), noisy(small_config());
  double rel = 0;
  for (int i = 0; i < 20; ++i) {
    const Sample s = draw(clean, 0, i), t = draw(noisy, 0, i);
    EXPECT_EQ(s.xs, t.xs);  // the noise level never changes the phantom
    const std::vector<double> jx = clean.forward(s.xs);
    double mean = 0, var = 0, err = 0;
    for (double v : jx) mean += v / 208;
    for (size_t k = 0; k < jx.size(); ++k) {
      EXPECT_EQ(s.ys[k], static_cast<float>(jx[k]));
      var += (jx[k] - mean) * (jx[k] - mean) / 208;
      err += (t.ys[k] - jx[k]) * (t.ys[k] - jx[k]) / 208;
    }
    ASSERT_GT(var, 0);
    rel += std::sqrt(err / var) / 20;
  }
  EXPECT_NEAR(rel, 0.01, 0.002);  // noise = 1% of the voltage std, per sample
}

// The default 128 x 128 simulator: J's cost, and the Tikhonov baseline against the truth and
// against the all-background guess.
TEST(SyntheticEit, TikhonovBaselineIsBlurryButCorrelated) {
  const auto t0 = std::chrono::steady_clock::now();
  const EitSimulator sim(EitSimConfig{});
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(build_s, 20.0);  // ~1 s on 2 cores; loose for loaded machines and debug builds
  ImageMetricsAccumulator tr_metrics, blank_metrics;
  double corr = 0;
  constexpr int kN = 16;
  for (int i = 0; i < kN; ++i) {
    const Sample s = draw(sim, 0, i);
    tr_metrics.add_image(s.tr, s.xs, 128, 128);
    blank_metrics.add_image(std::vector<float>(s.xs.size(), 0.0f), s.xs, 128, 128);
    corr += disk_correlation(sim, s.tr, s.xs) / kN;
  }
  const ImageMetrics tr = tr_metrics.result(), blank = blank_metrics.result();
  std::printf("EIT 128x128: J + Cholesky %.2f s, lambda %.3g; over %d samples TR: RMSE %.4f PSNR %.2f dB SSIM %.3f "
              "corr %.3f; blank guess: PSNR %.2f dB SSIM %.3f\n",
              build_s, sim.lambda(), kN, tr.rmse, tr.psnr, tr.ssim, corr, blank.psnr, blank.ssim);
  EXPECT_GT(tr.psnr, 10.0);
  EXPECT_LT(tr.psnr, 30.0);
  EXPECT_GT(tr.psnr, blank.psnr + 2.0);  // it sees the inclusions...
  EXPECT_GT(corr, 0.5);
  EXPECT_LT(tr.ssim, 0.95);  // ...but far from perfectly
}

TEST(SyntheticEit, RejectsBadConfigs) {
  auto make = [](auto edit) {
    EitSimConfig c = small_config();
    edit(c);
    EitSimulator sim(c);
  };
  expect_user_error([&] { make([](EitSimConfig& c) { c.image = 4; }); }, {"image size 4"});
  expect_user_error([&] { make([](EitSimConfig& c) { c.electrodes = 3; }); }, {"3"});
  expect_user_error([&] { make([](EitSimConfig& c) { c.noise = -1; }); }, {"noise"});
  expect_user_error([&] { make([](EitSimConfig& c) { c.tikhonov_lambda = 0; }); }, {"tikhonov_lambda"});
  expect_user_error([&] { make([](EitSimConfig& c) { c.max_inclusions = 0; }); }, {"max_inclusions"});
  const EitSimulator sim(small_config());
  expect_user_error([&] { sim.forward(std::vector<float>(10)); }, {"10 values"});
  expect_user_error([&] { sim.reconstruct(std::vector<float>(10)); }, {"10 voltages"});
}

}  // namespace
}  // namespace ft
