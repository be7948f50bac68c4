// DDIM sampling (Song, Meng, Ermon, "Denoising Diffusion Implicit Models", ICLR 2021, eq. 12)
// for a Denoiser (models/dit.h), as CDEIT reconstructs EIT images: a host loop that calls
// Denoiser::predict once per step on the whole chunk of images.
//
// Timesteps: CDEIT's ddim_sampleEIT spacing, torch.linspace(-1, 999, steps + 1) cast to int
// (truncation toward zero) and reversed, computed here in double: steps 5 visits 999, 799,
// 599, 399, 199 (steps 1000 visits every t). Step k goes from t_k to t_{k+1}; the last step
// (t_next = -1) returns the x0 prediction itself, as CDEIT does.
//
// One step at t with a = alpha_bar_t, a' = alpha_bar_{t_next} (the linear schedule of
// models/dit_config.h, in double):
//   x0^  = the network's x0, or sqrt(1/a) x_t - sqrt(1/a - 1) eps (predict eps), clipped to
//          [-1, 1] (CDEIT's ddim_sampleEIT does not clip by default; the images are in
//          [-1, 1], so clipping only removes overshoot)
//   eps^ = (sqrt(1/a) x_t - x0^) / sqrt(1/a - 1)      (re-derived from the clipped x0^)
//   sigma = eta sqrt((1 - a/a') (1 - a') / (1 - a)),  c = sqrt(1 - a' - sigma^2)
//   x_{t_next} = sqrt(a') x0^ + c eps^ + sigma z
// eta 0 is the deterministic DDIM, eta 1 (CDEIT's default) the DDPM-like variance.
//
// Noise: x_T and every step's z are standard normals from backend/diffusion_rng.h (Philox +
// Box-Muller) keyed by (seed, image id, step): image i's reconstruction depends on its id, its
// condition and the seed only, not on the batch, the chunking or the other images.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "models/dit.h"

namespace ft {

struct DdimOptions {
  int steps = 5;         // --sample-steps
  double eta = 1.0;      // --eta
  uint64_t seed = 0;     // noise seed
  bool clip_x0 = true;   // clip x0 predictions to [-1, 1]
};

// The timesteps visited, descending (steps in [1, 1000]).
std::vector<int> ddim_timesteps(int steps);

// Standard normal i of image `id` at DDIM step k (k = 0: x_T; k >= 1: step k's z).
float ddim_noise(uint64_t seed, uint64_t id, int k, int64_t i);

// Reconstructs images: cond [n, cond_elems] (null when the model has none), ids [n] (the
// noise of each), out [n, image_elems]. Chunks of d.max_predict_batch() images.
void ddim_sample(Denoiser& d, const float* cond, std::span<const uint64_t> ids, const DdimOptions& o, float* out);

}  // namespace ft
