// CDEIT's configuration (Shi, Kang, Liatsis, IEEE TIM 2025: conditional diffusion for
// electrical impedance tomography) and its block layout. The model is models/cdeit.h.
//
// The network: x_t [B, in_channels, H, W] and the condition map [B, cond_channels, H, W] (the
// 16x16 voltage map upsampled to the image, models it as a second input channel) are cut into
// p x p patches and embedded (one Conv2d over both, its weight split by channel group, as in
// models/dit.h), plus DiT's fixed 2-D sin-cos positions; the timestep alone gives the
// conditioning vector c (sinusoidal features -> MLP); then a U over S stages:
//   down stage s = 0..S-1: depths[s] DiT blocks at grid G_s = (H/p) / 2^s and width widths[s],
//     attention inside non-overlapping windows of windows[s] x windows[s] tokens (0: the whole
//     grid), between stages Swin's patch merging (2x2 tokens concatenated, 4 W_s -> W_{s+1})
//   up stage s = S-2..0: the previous stage's tokens through a 1x1 convolution (W_{s+1} -> W_s,
//     applied before the upsampling: the same numbers, a quarter of the work), nearest-
//     neighbour upsampling x2, then [up, skip_s] concatenated -> a linear back to W_s (two
//     products summed: no concatenated buffer; the upsampled half's product also runs before
//     the upsampling, which it commutes with), skip_s being down stage s's output; then
//     depths[s] blocks as on the way down
//   DiT's final layer (adaLN, RMSNorm, modulate, linear to p*p*in_channels), unpatchify.
// A block: adaLN-Zero modulation (6 x [B, W_s] from silu(c)), RMSNorm without affine, window
// or global attention, SiLU MLP of mlp_ratio * W_s. With shift = 1, the odd blocks of each
// windowed stage use windows shifted by window/2 (Swin), WITHOUT Swin's mask: tokens that
// the cyclic roll brings together from opposite edges of the grid attend to each other (the
// grid is treated as a torus). shift = 0 (the presets) is plain windows, which is exact.
//
// Reading of the paper's sizes (preset `cdeit`, models/registry.cpp): what is pinned is patch 2
// on 128x128 (64x64 tokens), hidden 512 and 8 heads (head size 64), adaLN-Zero from the
// timestep only, RMSNorm without affine, SiLU MLPs, window attention of 16x16 tokens in the
// high-resolution stages, 4 stages, x0 prediction. ASSUMED (not pinned by the facts at hand):
// 2 blocks a stage on each side (14 blocks), width 512 in every stage (no doubling; the paper's
// "hidden 512" read as every stage's width, which keeps head size 64 everywhere), windows in
// stages 0 and 1 (grids 64 and 32) and global attention in stages 2 and 3 (grids 16 and 8; a
// 16x16 window there would be the whole grid anyway), MLP ratio 4, 256 timestep frequencies,
// DiT's fixed 2-D sin-cos positions added after the patch embedding, plain (unshifted) windows,
// and RMSNorm in the final layer too. All are configuration keys.
//
// Schedule: DiTSchedule over K = sum(depths) + sum(depths[0..S-2]) blocks in order (down
// stages, then up stages); the transition into a stage (patch merge, or up + skip fusion) runs
// in the phase of the stage's first block, forward and backward.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/dit_config.h"

namespace ft {

struct CDEITConfig {
  int image = 128;          // H = W
  int patch = 2;            // p
  int in_channels = 1;      // x_t's channels (and the prediction's)
  int cond_channels = 1;    // condition map channels concatenated to x_t (0: unconditional)
  int heads = 8;            // every stage's attention heads (each width a multiple)
  std::vector<int> depths{2, 2, 2, 2};        // blocks per stage (down; the up path repeats 0..S-2)
  std::vector<int> widths{512, 512, 512, 512};  // token width per stage; widths[0] also c's
  std::vector<int> windows{16, 16, 0, 0};     // window side in tokens per stage; 0: global
  int shift = 0;            // 1: shifted windows in odd blocks (no mask: see above)
  int mlp_ratio = 4;
  int freq_dim = 256;
  std::string predict = "x0";  // x0 (CDEIT's) | eps

  int stages() const { return static_cast<int>(depths.size()); }
  int64_t grid(int s = 0) const { return (image / patch) >> s; }
  int64_t tokens(int s = 0) const { return grid(s) * grid(s); }
  int64_t hidden() const { return widths[0]; }  // the conditioning width
  int64_t patch_in() const { return int64_t{in_channels} * patch * patch; }
  int64_t patch_cond() const { return int64_t{cond_channels} * patch * patch; }
  int64_t image_elems() const { return int64_t{in_channels} * image * image; }
  int64_t cond_elems() const { return int64_t{cond_channels} * image * image; }
  // stage s's attention window (the grid side when global)
  int64_t window(int s) const { return windows[static_cast<size_t>(s)] == 0 ? grid(s) : windows[static_cast<size_t>(s)]; }
  int total_blocks() const;
  void validate() const;  // UserError naming the key
  std::string describe() const;
  // Run r's name in buffer and parameter names: down0.., then up<stage> for the up runs.
  std::string run_name(int run) const;
  nlohmann::json to_json() const;  // {"arch": "cdeit", ...; "cond_dim": 0 for the diffusion task}
  static CDEITConfig from_json(const nlohmann::json& j, const std::string& source);
};

// One block of the U, in running order.
struct CDEITBlock {
  int run = 0;          // stage run: 0..S-1 down stages, S + j the up stage S-2-j
  int stage = 0;        // the stage (grid, width, window)
  int index = 0;        // inside its run
  bool up = false;
  int64_t grid = 0, width = 0, hidden_mlp = 0;
  int64_t window = 0;   // side of the attention windows; == grid: global attention
  int shift = 0;        // window shift (0 or window/2)
  bool windowed() const { return window < grid; }
  bool shifted() const { return shift != 0; }
  bool first() const { return index == 0; }
};
std::vector<CDEITBlock> cdeit_blocks(const CDEITConfig& c);

}  // namespace ft
