// When and how strongly the EMA of the weights moves (--ema-decay, --ema-every, --ema-warmup,
// --ema-power): ema_pytorch's EMA (lucidrains/ema-pytorch, the one CDEIT trains with:
// EMA(model, beta=0.995, update_every=10), its defaults update_after_step=100, inv_gamma=1,
// power=2/3), so a fittrain run averages the weights at the same steps with the same decays.
//
// ema_pytorch's update() runs after every optimizer step and counts its calls from 0 (u = the
// step number - 1 here, steps counting from 1). At calls u % every == 0 it
//   - copies the weights while u <= warmup (the EMA starts as the weights: the first update
//     is always a copy, whatever was in the buffer before);
//   - else averages ema = ema - (ema - w) * (1 - d) with d = min(decay, 1 - (1 + e)^-power),
//     e = u - warmup - 1 (d = 0, a copy, while e <= 0): the decay ramps up, so early weights
//     do not dominate for long (d reaches 0.995 after ~2,800 steps at power 2/3).
// power 0 (fittrain's addition) skips the ramp: d = decay from the first average on.
#pragma once
#include <cstdint>

namespace ft {

struct EmaSchedule {
  double decay = 0.995;   // the largest decay (beta)
  int64_t every = 10;     // steps between updates
  int64_t warmup = 100;   // steps that only copy the weights (update_after_step)
  double power = 2.0 / 3.0;  // the ramp's exponent (0: no ramp)
};

// The decay of the EMA update after optimizer step `step` (1-based): 0 = copy the weights,
// < 0 = no update at this step.
double ema_decay_at(const EmaSchedule& s, int64_t step);

}  // namespace ft
