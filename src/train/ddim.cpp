#include "train/ddim.h"

#include <algorithm>
#include <cmath>

#include "backend/diffusion_rng.h"
#include "core/error.h"
#include "core/rng.h"
#include "models/dit_config.h"

namespace ft {

std::vector<int> ddim_timesteps(int steps) {
  FT_CHECK(steps >= 1 && steps <= kDiffusionSteps, "ddim: ", steps, " steps");
  // linspace(-1, T-1, steps+1) as int, reversed, without its final -1 (the x0 step)
  std::vector<int> ts;
  for (int k = steps; k >= 1; --k) {
    const double v = -1.0 + static_cast<double>(kDiffusionSteps) * k / steps;
    ts.push_back(static_cast<int>(v));  // truncation toward zero, as Tensor.int()
  }
  return ts;
}

namespace {

// Philox's 64-bit key per (seed, image); the step is the counter's third word.
uint64_t image_key(uint64_t seed, uint64_t id) {
  uint64_t x = seed ^ 0x6464696d2d6e7a31ull;  // "ddim-nz1"
  const uint64_t h = splitmix64(x);
  x = h ^ (id * 0x9E3779B97F4A7C15ull);
  return splitmix64(x);
}

void fill_noise(uint64_t seed, uint64_t id, int k, int64_t n, float* out) {
  const uint64_t key = image_key(seed, id);
  float z[4];
  for (int64_t j = 0; j * 4 < n; ++j) {
    diffusion_normal4(key, static_cast<uint32_t>(k), static_cast<uint64_t>(j), z);
    for (int64_t r = 0; r < 4 && j * 4 + r < n; ++r) out[j * 4 + r] = z[r];
  }
}

}  // namespace

float ddim_noise(uint64_t seed, uint64_t id, int k, int64_t i) {
  return diffusion_normal(image_key(seed, id), static_cast<uint32_t>(k), static_cast<uint64_t>(i));
}

void ddim_sample(Denoiser& d, const float* cond, std::span<const uint64_t> ids, const DdimOptions& o, float* out) {
  const std::vector<int> ts = ddim_timesteps(o.steps);
  const std::vector<double>& ab = diffusion_alpha_bars();
  const int64_t E = d.image_elems(), CE = d.cond_elems(), n = static_cast<int64_t>(ids.size());
  const int64_t G = std::max<int64_t>(1, d.max_predict_batch());
  const bool eps_model = d.predicts() == "eps";
  FT_CHECK(eps_model || d.predicts() == "x0", "ddim: a model that predicts '", d.predicts(), "'");
  FT_CHECK(CE == 0 || cond, "ddim: the model takes a condition and none was given");
  std::vector<float> x(static_cast<size_t>(std::min(G, n) * E)), pred(x.size()), z(static_cast<size_t>(E));
  std::vector<int32_t> tv(static_cast<size_t>(G));
  for (int64_t first = 0; first < n; first += G) {
    const int64_t b = std::min(G, n - first);
    for (int64_t j = 0; j < b; ++j) fill_noise(o.seed, ids[static_cast<size_t>(first + j)], 0, E, x.data() + j * E);
    for (size_t s = 0; s < ts.size(); ++s) {
      const int t = ts[s], tn = s + 1 < ts.size() ? ts[s + 1] : -1;
      std::fill(tv.begin(), tv.begin() + b, t);
      d.predict(x.data(), CE ? cond + first * CE : nullptr, tv.data(), b, pred.data());
      const double a = ab[static_cast<size_t>(t)];
      const double sr = std::sqrt(1.0 / a), srm1 = std::sqrt(1.0 / a - 1.0);
      double an = 1, sigma = 0, c = 0;
      if (tn >= 0) {
        an = ab[static_cast<size_t>(tn)];
        sigma = o.eta * std::sqrt((1.0 - a / an) * (1.0 - an) / (1.0 - a));
        c = std::sqrt(std::max(0.0, 1.0 - an - sigma * sigma));
      }
      const double san = std::sqrt(an);
      for (int64_t j = 0; j < b; ++j) {
        float* xj = x.data() + j * E;
        const float* pj = pred.data() + j * E;
        if (tn >= 0 && sigma > 0) fill_noise(o.seed, ids[static_cast<size_t>(first + j)], static_cast<int>(s) + 1, E, z.data());
        for (int64_t i = 0; i < E; ++i) {
          double x0 = eps_model ? sr * xj[i] - srm1 * pj[i] : pj[i];
          if (o.clip_x0) x0 = std::clamp(x0, -1.0, 1.0);
          if (tn < 0) {
            out[(first + j) * E + i] = static_cast<float>(x0);
            continue;
          }
          const double eps = (sr * xj[i] - x0) / srm1;
          double next = san * x0 + c * eps;
          if (sigma > 0) next += sigma * z[static_cast<size_t>(i)];
          xj[i] = static_cast<float>(next);
        }
      }
    }
  }
}

}  // namespace ft
