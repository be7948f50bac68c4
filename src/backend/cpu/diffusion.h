// Diffusion ops on the CPU (see backend.h's diffusion section): the noising / sampling mix
// with counter-based noise, the per-sample MSE loss and its gradient, and DiT's sinusoidal
// timestep embedding. fp32 storage; one sample (or one (sample, noise block)) per OpenMP
// iteration, sums per sample in double in index order: the same bits at any thread count.
#pragma once
#include <cstdint>

namespace ft {

// out[b,i] = coef[b,0]*x[b,i] + coef[b,1]*y[b,i] + coef[b,2]*z(seed, keys[b], i)
// (y == nullptr: no y term); noise_out[b,i] = z when noise_out != nullptr. x, y, out [B,n];
// out may alias x or y (each element is read before it is written).
void diffusion_mix_cpu(float* out, float* noise_out, const float* x, const float* y, const float* coef,
                       const int32_t* keys, uint64_t seed, int64_t B, int64_t n);

// losses[b] = mean_i (pred - target)^2 over the n elements of sample b; dpred (when not
// nullptr) = dloss * 2 (pred - target) / n, overwritten (may alias pred).
void mse_loss_cpu(float* losses, float* dpred, const float* pred, const float* target, int64_t B, int64_t n,
                  float dloss);

// out[b, i] = cos(t_b f_i), out[b, half + i] = sin(t_b f_i), f_i = exp(-ln(max_period) i / half),
// half = D/2; an odd D's last column 0.
void timestep_embedding_cpu(float* out, const float* t, int64_t B, int64_t D, float max_period);

}  // namespace ft
