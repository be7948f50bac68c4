// Learning-rate schedule: linear warmup from lr/warmup to lr, then cosine decay to
// lr * min_ratio at the last step. A pure function of the step, so a resumed run follows
// the same curve.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ft {

// `step` and `total_steps` may be fractional: a run by --epochs counts its position in
// samples over this run's global batch (a resume with another batch lands between steps).
inline double learning_rate(double step, double total_steps, int64_t warmup, double lr, double min_ratio) {
  const double w = static_cast<double>(warmup);
  // min: a fractional position past w - 1 is still warmup, never above the peak.
  if (warmup > 0 && step < w) return lr * std::min(1.0, (step + 1) / w);
  const double min_lr = lr * min_ratio;
  const double decay_steps = std::max(1.0, total_steps - w);
  double progress = std::clamp((step - w) / decay_steps, 0.0, 1.0);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.14159265358979323846 * progress));
}

}  // namespace ft
