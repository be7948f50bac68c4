#include "optim/ema.h"

#include <algorithm>
#include <cmath>

namespace ft {

double ema_decay_at(const EmaSchedule& s, int64_t step) {
  const int64_t u = step - 1;  // ema_pytorch's call counter before this call
  if (u < 0 || s.every < 1 || u % s.every != 0) return -1.0;
  if (u <= s.warmup) return 0.0;
  const double e = static_cast<double>(u - s.warmup - 1);
  if (e <= 0) return 0.0;
  if (s.power <= 0) return s.decay;
  const double value = 1.0 - std::pow(1.0 + e, -s.power);
  return std::clamp(value, 0.0, s.decay);
}

}  // namespace ft
