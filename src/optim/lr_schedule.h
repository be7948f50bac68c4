// Learning-rate schedule: linear warmup from lr/warmup to lr, then cosine decay to
// lr * min_ratio at the last step. A pure function of the step, so a resumed run follows
// the same curve.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ft {

inline double learning_rate(int64_t step, int64_t total_steps, int64_t warmup, double lr,
                            double min_ratio) {
  if (warmup > 0 && step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double min_lr = lr * min_ratio;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup);
  double progress = std::clamp(static_cast<double>(step - warmup) / static_cast<double>(decay_steps), 0.0, 1.0);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.14159265358979323846 * progress));
}

}  // namespace ft
