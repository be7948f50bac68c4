// The option and argument structs of Backend's ops (backend/backend.h): attention's masks,
// Swin window order, norm + modulate's options, how a gradient is written, and the fused
// residual norm's backward arguments. Shapes and conventions are backend.h's.
#pragma once
#include "core/tensor.h"

namespace ft {

// Options of attention_forward/backward (both calls of one step take the same options).
struct AttentionOptions {
  // false: every query attends to every (unmasked) key of its sample.
  bool causal = true;
  // Optional device i32[B]: sample b has real length len_b in [1, T]; keys at positions >=
  // len_b are masked out for every query of b, query rows >= len_b produce output 0 and
  // gradient 0 (their dq, dk, dv rows are 0). Empty: every sample is T long.
  Tensor seq_lens;
  // Optional device i32[B,T]: several samples packed into each row, positions[b,t] being
  // token t's position inside its own sample (0 at a sample's first token; the embedding's
  // positions). Query t of row b then sees exactly the keys [t - positions[b,t], t]: causal
  // inside its sample, nothing of the samples before it (a block-diagonal causal mask), so
  // no sample's output or gradient depends on another's tokens. Requires causal = true and
  // excludes seq_lens. The caller guarantees positions[b,t] <= t and that positions go up
  // by 1 inside a sample (each token either starts a sample, 0, or follows its previous
  // token's position + 1); the CPU backend checks it, CUDA trusts it. Backward keys receive
  // gradient only from the queries that see them. Empty: one sample per row.
  Tensor positions;
};

// A [B, T, C] operand held in Swin window order (window > 0): its row r (of the windows
// [B*nW, w*w, C] flattened like [B, T, C]) is the grid's row window::partition_src(g, r), g =
// {B, grid_h, grid_w, C, window, shift}; T must equal grid_h*grid_w. window 0: token order.
// Lets an op read or write what window_partition/window_reverse would have copied.
struct WindowOrder {
  int grid_h = 0, grid_w = 0, window = 0, shift = 0;
  bool active() const { return window > 0; }
};

// Options of norm_modulate_forward/backward (both calls of one step take the same options).
enum class NormKind { layer, rms };  // no-affine LayerNorm (eps kLayerNormEps) / RMSNorm (eps kRmsNormEps)
struct NormModulateOptions {
  NormKind norm = NormKind::layer;
  // active: out is in window order (out row r is the fused result of inp's grid row
  // window::partition_src(g, r)); inactive: the same order as inp
  WindowOrder out_order;
  // norm_modulate_backward only: dinp is written, not added to (its old bytes, NaN included,
  // are never read), for the first op to write a gradient, which then needs no zeroed buffer
  // (the final layer's norm at the top of a diffusion model's residual stream). The fused
  // residual backward (ResidualNormGrads, dr accumulates) refuses it.
  bool overwrite_dinp = false;
};

// How an op writes parameter gradients: add into them (backend/backend.h's convention) or overwrite
// them. The model overwrites in the first micro-batch of a step, whose gradients would start
// from zero: the weight products then run with beta = 0, and cuBLASLt picks kernels that do
// not read dW (H200, GPT-2 124M: ~0.5 ms of a 30 ms step).
enum class GradWrite { add, overwrite };

// The backward of Backend::gated_residual_norm_modulate_forward, named as there: first
// norm_modulate_backward(dr, dshift, dscale, dout, r, mean, rstd, scale, o), then
// gated_residual_backward(dy, dgate, dr, y, gate, y_order, dbias_y, gw) on the new dr.
struct ResidualNormGrads {
  Tensor dr, dshift, dscale, dout, r, mean, rstd, scale;  // dr ACCUMULATES; dshift, dscale overwritten
  NormModulateOptions o;
  Tensor dy, dgate, y, gate;  // dy (y_order), dgate overwritten
  WindowOrder y_order;
  Tensor dbias_y;  // optional: the bias gradient of y's product (GradWrite gw)
  GradWrite gw = GradWrite::add;
};

}  // namespace ft
