// GPT-2's memory plan: every buffer one training step and one evaluation touch, with its
// lifetime in the step's schedule. A pure function of the configuration (no allocation), so
// the planner can evaluate thousands of candidate configurations in milliseconds.
//
// Schedule (phases) of one micro-step, then the evaluation pass that shares the arena:
//   0                    embedding forward
//   1 .. L               block l forward              (phase 1 + l)
//   L+1                  final layernorm, classifier + loss + dlogits, head backward
//   L+2 .. 2L+1          block l backward, l = L-1 .. 0 (phase L+2 + (L-1-l))
//   2L+2                 embedding backward
//   2L+3                 optimizer (grad norm, AdamW)
//   2L+4 .. 3L+5         evaluation: embedding, blocks, head (forward only)
// Persistent buffers (params, grads, master, Adam m/v) live in all phases; evaluation
// buffers share bytes with training's activations because their lifetimes never overlap.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "plan/memory_plan.h"

namespace ft {

struct GPT2Config {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int seq_len = 128;      // maximum sequence length (rows of wpe)
  int vocab_size = 257;   // real vocabulary
  int padded_vocab_size() const { return (vocab_size + 127) / 128 * 128; }
  // Throws UserError naming the flag when a value makes no sense.
  void validate() const;
  std::string describe() const;
};

enum class Recompute { none, block };  // block: keep only each block's input, redo its forward
const char* recompute_name(Recompute r);
// How a block's internal activations are named in the plan (and so where they live):
enum class BlockMode { saved, recompute_fwd, recompute_bwd, eval };

struct PlanShape {
  int64_t micro_batch = 1;   // training micro-batch per rank
  int64_t eval_batch = 1;    // evaluation micro-batch per rank
  int64_t seq_len = 0;       // T used by this run (<= config.seq_len)
  Precision precision = Precision::fp32;
  Recompute recompute = Recompute::none;
  int zero_stage = 0;        // 1: optimizer state (and master weights) sharded over ranks
  int world_size = 1;
  bool training = true;      // false: params + evaluation only (fittrain test / sample)
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
  int eval_head() const { return 3 * L + 5; }
  int num_phases() const { return 3 * L + 6; }
};

DType activation_dtype(Precision p);
DType param_dtype(Precision p);

// Number of parameters in the flat buffer (padded vocabulary included).
int64_t gpt2_num_params(const GPT2Config& c);

// Every buffer of the run, unplaced. Names are those GPT2 asks the arena for.
std::vector<BufferSpec> gpt2_buffers(const GPT2Config& c, const PlanShape& s, const Backend& be);
MemoryPlan gpt2_memory_plan(const GPT2Config& c, const PlanShape& s, const Backend& be);

// Buffer naming, shared by the plan and the model.
std::string block_buffer(BlockMode mode, int layer, const char* what);

}  // namespace ft
