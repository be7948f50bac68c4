// GPT-2's configuration and its schedule of phases.
//
// Schedule (phases) of one micro-step, then the evaluation pass that shares the arena:
//   0                    embedding forward
//   1 .. L               block l forward              (phase 1 + l)
//   L+1                  final layernorm, head (the LM head: logits, loss, dlogits and the
//                        head's backward), final layernorm backward
//   L+2 .. 2L+1          block l backward, l = L-1 .. 0 (phase L+2 + (L-1-l))
//   2L+2                 embedding backward
//   2L+3                 optimizer (grad norm, AdamW)
//   2L+4 .. 3L+4         evaluation: embedding, blocks (forward only)
//   3L+5                 generation: the decode steps (KV cache, one token per row)
//   3L+6                 evaluation head
// Persistent buffers (params, grads, optimizer state) live in all phases; evaluation
// buffers share bytes with training's activations because their lifetimes never overlap.
// Generation's prefill is the evaluation forward (its blocks store their keys and values in
// the cache of each layer, alive from that block's phase to the decode phase); the decode
// phase sits before the evaluation head so the cache never coexists with the head's
// [B, T, Vp] logits: the prefill takes each prompt's last row's logits in the decode phase.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace ft {

struct GPT2Config {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int seq_len = 128;      // maximum sequence length (rows of wpe); every sample is this long
  int vocab_size = 257;   // real vocabulary
  int padded_vocab_size() const { return (vocab_size + 127) / 128 * 128; }
  // Throws UserError naming the flag when a value makes no sense.
  void validate() const;
  std::string describe() const;
  nlohmann::json to_json() const;  // {"arch":"gpt2", "n_layer":..., ...}
  // Throws UserError naming `source` for a missing, unknown or ill-typed key.
  static GPT2Config from_json(const nlohmann::json& j, const std::string& source);
};

struct GPT2Schedule {
  int L;
  int embed_fwd() const { return 0; }
  int block_fwd(int l) const { return 1 + l; }
  int head() const { return L + 1; }
  int block_bwd(int l) const { return L + 2 + (L - 1 - l); }
  int embed_bwd() const { return 2 * L + 2; }
  int optimizer() const { return 2 * L + 3; }
  int eval_embed() const { return 2 * L + 4; }
  int eval_block(int l) const { return 2 * L + 5 + l; }
  int gen_decode() const { return 3 * L + 5; }
  int eval_head() const { return 3 * L + 6; }
  int num_phases() const { return 3 * L + 7; }
};

}  // namespace ft
