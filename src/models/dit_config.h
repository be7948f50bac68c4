// DiT's configuration (Peebles & Xie 2023, "Scalable Diffusion Models with Transformers"),
// its diffusion schedule and its schedule of phases. The model is models/dit.h.
//
// Shapes (B samples, T = (image/patch)^2 tokens, D = hidden):
//   input image x0 [B, in_channels, image, image] in [-1, 1]; its noisy x_t the same
//   condition: a vector [B, cond_dim] (DiT's class-embedding slot: an MLP added to the
//              timestep embedding), or a map [B, cond_channels, image, image] concatenated to
//              x_t as extra input channels (CDEIT's way), or neither
//   tokens [B, T, D]; per block adaLN-Zero modulation [6, B, D]; prediction like x0
//
// Schedule (phases) of one micro-step, then the evaluation pass that shares the arena:
//   0                    embedding forward: noise mix (x_t), patchify, patch embedding +
//                        fixed 2-D sin-cos positions, timestep (+ condition) MLP -> c, silu(c)
//   1 .. L               block l forward              (phase 1 + l)
//   L+1                  head: final layer (adaLN, LayerNorm, modulate, linear), unpatchify,
//                        MSE loss, and the final layer's backward
//   L+2 .. 2L+1          block l backward, l = L-1 .. 0 (phase L+2 + (L-1-l))
//   2L+2                 embedding backward (patch embedding, timestep and condition MLPs)
//   2L+3                 optimizer (grad norm, AdamW)
//   2L+4                 evaluation embedding
//   2L+5 .. 3L+4         evaluation blocks (forward only)
//   3L+5                 evaluation head (prediction, loss)
// The conditioning vector silu(c) [B, D] lives from phase 0 to the embedding backward: every
// block's adaLN product reads it forward and backward, and its gradient is summed over the
// blocks' backward (dsc, from the head to the embedding backward).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft {

struct DiTConfig {
  int depth = 12;          // L blocks
  int hidden = 384;        // D
  int heads = 6;           // D % heads == 0
  int patch = 4;           // p: image % p == 0
  int image = 64;          // H = W
  int in_channels = 1;     // channels of the noisy image (and of the prediction)
  int cond_channels = 0;   // condition map channels concatenated to x_t (CDEIT); 0: none
  int cond_dim = 208;      // condition vector embedded by an MLP and added to t's; 0: none
  int mlp_ratio = 4;       // MLP width = mlp_ratio * D
  int freq_dim = 256;      // sinusoidal timestep features before the timestep MLP
  std::string predict = "x0";  // x0 (CDEIT's choice) | eps: what the network predicts (MSE target)

  int64_t grid() const { return image / patch; }
  int64_t tokens() const { return grid() * grid(); }                     // T
  int64_t patch_in() const { return int64_t{in_channels} * patch * patch; }   // x_t features a token
  int64_t patch_cond() const { return int64_t{cond_channels} * patch * patch; }
  int64_t image_elems() const { return int64_t{in_channels} * image * image; }
  int64_t cond_elems() const { return cond_channels > 0 ? int64_t{cond_channels} * image * image : cond_dim; }
  // Throws UserError naming the flag (or the configuration key) when a value makes no sense.
  void validate() const;
  std::string describe() const;
  nlohmann::json to_json() const;  // {"arch": "dit", ...}
  // Throws UserError naming `source` for a missing, unknown or ill-typed key.
  static DiTConfig from_json(const nlohmann::json& j, const std::string& source);
};

struct DiTSchedule {
  int L;
  int embed_fwd() const { return 0; }
  int block_fwd(int l) const { return 1 + l; }
  int head() const { return L + 1; }
  int block_bwd(int l) const { return L + 2 + (L - 1 - l); }
  int embed_bwd() const { return 2 * L + 2; }
  int optimizer() const { return 2 * L + 3; }
  int eval_embed() const { return 2 * L + 4; }
  int eval_block(int l) const { return 2 * L + 5 + l; }
  int eval_head() const { return 3 * L + 5; }
  int num_phases() const { return 3 * L + 6; }
};

// The forward process: DDPM's linear beta schedule (Ho et al. 2020; DiT's and CDEIT's), beta
// from 1e-4 to 0.02 over 1000 steps, alpha_bar_t = prod_{s <= t} (1 - beta_s), in double.
// q(x_t | x0) = sqrt(alpha_bar_t) x0 + sqrt(1 - alpha_bar_t) eps. Training draws t in [0, 1000).
inline constexpr int kDiffusionSteps = 1000;
const std::vector<double>& diffusion_alpha_bars();  // [kDiffusionSteps]

// The seed of diffusion_mix's counter-based noise (backend/diffusion_rng.h). A model constant:
// the randomness comes from each sample's noise key, which the task derives from the run seed
// and (sample, epoch) (train/diffusion_task.h), so runs with different seeds draw different
// noise, and the same key draws the same noise on any device, batch or world size.
inline constexpr uint64_t kDiTNoiseSeed = 0x6469742d6e6f6973ull;  // "dit-nois"

}  // namespace ft
