// Dynamic loss scaling for fp16 training: the loss gradient is multiplied by `scale` so small
// gradients survive fp16's narrow range; a step whose gradients overflow (non-finite sum of
// squares) is skipped and the scale halves; after `growth_interval` clean steps it doubles.
// AdamW then unscales through AdamWStep::grad_scale, so no extra pass over the gradients.
#pragma once
#include <cmath>
#include <cstdint>

namespace ft {

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(double init_scale = 65536.0, int64_t growth_interval = 1000,
                             double min_scale = 1.0, double max_scale = 16777216.0)
      : scale_(init_scale), growth_interval_(growth_interval), min_scale_(min_scale), max_scale_(max_scale) {}

  double scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_; }
  int64_t clean_steps() const { return clean_; }

  // Takes the sum of squares of the *scaled* gradients. Returns true when the step may be
  // applied; false when it overflowed (the caller skips the update). Adjusts the scale.
  bool update(double scaled_grad_sum_squares) {
    if (!std::isfinite(scaled_grad_sum_squares)) {
      scale_ = std::fmax(min_scale_, scale_ * 0.5);
      clean_ = 0;
      ++skipped_;
      return false;
    }
    if (++clean_ >= growth_interval_) {
      scale_ = std::fmin(max_scale_, scale_ * 2.0);
      clean_ = 0;
    }
    return true;
  }

  // For checkpoints: the state that makes a resumed run continue identically.
  void restore(double scale, int64_t clean, int64_t skipped) {
    scale_ = scale;
    clean_ = clean;
    skipped_ = skipped;
  }

 private:
  double scale_;
  int64_t growth_interval_;
  double min_scale_, max_scale_;
  int64_t clean_ = 0, skipped_ = 0;
};

}  // namespace ft
