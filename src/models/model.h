// Model: what the engine needs from any model it trains. A model
//  - declares its parameters once (ParamTable: names, shapes, decay, initialisation), from
//    which the parameter count, the AdamW slices, checkpoints and the views are all made;
//  - declares the buffers one step and one evaluation touch, with lifetimes in its own
//    schedule of phases (declare_buffers: pure, so the planner can try thousands of shapes),
//    and the ops it will run (for the backend's workspace and support checks);
//  - once bound to an arena, runs forward+backward on a Batch of named host fields and
//    reports, through a hook, each group of parameter gradients as soon as it is final
//    (data parallelism starts reducing there), evaluates, and generates where it can.
// The engine owns parameters, gradients and optimizer state (train/runtime.h, optim/); the
// model receives views of them in bind(). Adding a model: docs/ADDING_A_MODEL.md.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/arena.h"
#include "core/batch.h"
#include "models/param_table.h"
#include "plan/buffer_table.h"
#include "plan/shape.h"

namespace ft {

class InputUploads;  // models/host_transfer.h

// Called with parameter-gradient ranges that no later op of this micro-batch writes.
using GradReadyFn = std::function<void(std::span<const ParamRange>)>;

// Called with the parameter ranges the next ops read, before they are queued (forward,
// recompute and evaluation alike). With ZeRO-1 the engine may still be gathering parameters
// from the other ranks: the hook orders the compute stream after that group's gather.
using ParamNeededFn = std::function<void(std::span<const ParamRange>)>;

// What bind() hands a model: the device, its arena, and the flat buffers the engine owns.
struct ModelBinding {
  Backend* backend = nullptr;
  Arena* arena = nullptr;
  PlanShape shape;
  Tensor params;  // [P] in the compute dtype
  Tensor grads;   // [P] (empty when not training)
  ParamNeededFn params_needed;  // may be empty; a model that never calls it still works
  InputUploads* uploads = nullptr;  // training: large inputs uploaded beside the compute stream (may be null)
};

// How generate() continues prompts. Temperature, then top-k, then top-p (as Hugging Face
// applies them); models/sampling.h holds the rule.
struct GenerateOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0;   // 0: greedy (argmax)
  int top_k = 0;            // 0: all
  double top_p = 1.0;       // nucleus: smallest set of most likely tokens with mass >= top_p
  int32_t stop_token = -1;  // a row stops after producing it (not included in its output); -1: none
  uint64_t seed = 0;        // sampling is deterministic in (seed, prompt index within the call, step)
  // Tokens are chosen only below this id (0: the whole vocabulary): a model whose vocabulary
  // is larger than its tokenizer's (--vocab-size 300 on byte data) never emits an id the
  // tokenizer cannot decode.
  int64_t vocab_limit = 0;
};

// Generation, for models that produce tokens.
class Generator {
 public:
  virtual ~Generator() = default;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t context_length() const = 0;  // longest input
  // Logits of the position after tokens[0..t) (vocab_size floats) into host memory. Runs the
  // whole context (O(t) per token): the reference generate() is tested against.
  virtual void next_token_logits(const int32_t* tokens, int64_t t, float* logits_out) = 0;
  // Continues each prompt (1 .. context_length()-1 tokens; UserError otherwise). Returns each
  // prompt's new tokens (without the stop token). Rows stop at stop_token, max_new_tokens or
  // the context length (prompt + new tokens <= context_length()). Prompts may have different
  // lengths; any number of prompts (processed in chunks of max_generate_batch()), with a KV
  // cache planned in the model's buffers: one forward per new token, not per context.
  virtual std::vector<std::vector<int32_t>> generate(const std::vector<std::vector<int32_t>>& prompts,
                                                     const GenerateOptions& opt) = 0;
  virtual int64_t max_generate_batch() const = 0;
};

// Ranking, for models that recommend items (the GPT-2 recommender): items are 1..N, 0 is
// padding.
class Ranker {
 public:
  virtual ~Ranker() = default;
  virtual int64_t num_items() const = 0;    // N
  virtual int64_t max_history() const = 0;  // a longer history is cut to its most recent items
  virtual int64_t max_rank_batch() const = 0;
  // The score of every item as the next one after each history (items 1..N, in time order,
  // at least one): out [histories, N+1] f32, column 0 (padding) = -infinity. Any number of
  // histories (processed in chunks of max_rank_batch()); scores are fp32 dot products, so
  // the activation dtype's rounding does not create ties among close items.
  virtual void score_next(std::span<const std::span<const uint32_t>> histories, float* out) = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  // ---- identity (recorded in checkpoints) --------------------------------------------
  virtual std::string family() const = 0;           // registry family, e.g. "gpt2"
  virtual nlohmann::json config() const = 0;        // everything that shapes the parameters
  virtual std::string describe() const = 0;         // one line for people

  // ---- parameters -----------------------------------------------------------------------
  virtual const ParamTable& param_table() const = 0;
  int64_t num_params() const { return param_table().total(); }
  // Fresh parameters, deterministic in seed: elements [begin, begin + count) of the fp32
  // layout into out[0, count), the same values whatever the range, so that the start draws
  // and uploads them a block at a time (no host copy of the whole layout).
  virtual void init_range(uint64_t seed, int64_t begin, int64_t count, float* out) const {
    param_table().init_range(seed, begin, count, out);
  }
  // The whole layout: host fp32 memory of num_params() elements.
  void init_params(uint64_t seed, float* host) const { init_range(seed, 0, num_params(), host); }

  // ---- inputs, schedule, plan -------------------------------------------------------------
  // The fields a batch must carry, per sample (the task must provide them).
  virtual std::vector<FieldSpec> input_fields() const = 0;
  // Samples packed into rows: several samples per row, each token with its position inside
  // its own sample (an extra "positions" field), so attention and position embeddings stay
  // inside a sample. Set before planning; returns false when the model cannot (on = false
  // always succeeds).
  virtual bool set_packed_inputs(bool on) { return !on; }
  // Whether PlanShape::item_cache changes this model's plan (the fitter then chooses it).
  virtual bool has_item_cache() const { return false; }
  // The highest PlanShape::keep_level (every block keeps the intermediates it would otherwise
  // recompute; 0: the model has none), and how many blocks keep them at a level (by default
  // the level itself: level k keeps k blocks).
  virtual int max_keep_level() const { return 0; }
  virtual int kept_blocks(int level) const { return level; }
  // For the planner's choice between recompute at a larger micro-batch and none at a smaller
  // one (SpeedModel, plan/fit.h): the rows each sample gives the products (GPT-2: its tokens),
  // and recompute's measured extra time as a fraction of a step without it. 0: not measured,
  // so recompute is only taken when nothing fits without it.
  virtual int64_t rows_per_sample() const { return 0; }
  virtual double recompute_cost() const { return 0; }
  // Whether a micro-batch run with GradWrite::overwrite writes every gradient element that any
  // micro-batch writes, before anything adds to it: each weight's first product overwrites,
  // and no op only adds (an embedding's scatter does, into rows another op has not written).
  // The runtime then zeroes the gradients once, not every step (the elements no op writes keep
  // those zeros): a memset of every gradient at each step's start, 145 MB and 32 us of a CDEIT
  // step on an H200. Tested per model by poisoning the gradients with NaN before a step.
  virtual bool overwrites_every_grad() const { return false; }
  // Per-sample floats read back to the host (per-token losses), for the host plan.
  virtual int64_t loss_values_per_sample() const = 0;
  virtual int num_phases() const = 0;       // of one step and one evaluation pass
  virtual int optimizer_phase() const = 0;  // where the optimizer runs
  // Declares the model's own buffers (activations, inputs, scratch) for a shape. Pure.
  virtual void declare_buffers(BufferTable& table, const PlanShape& s, const Backend& be) const = 0;
  // Every op the model runs at this shape, once per distinct shape, at its largest: the
  // backend sizes the shared workspace from these (Backend::workspace_bytes).
  virtual std::vector<OpShape> ops(const PlanShape& s) const = 0;
  // Throws UserError naming the flag when the backend cannot run one of the model's ops
  // (Backend::unsupported): models call check_ops_supported with their flags' words.
  virtual void check_supported(const Backend& be, Precision p) const = 0;

  // ---- running ------------------------------------------------------------------------------
  // The run's declaration: as declare_buffers, into the table the arena will be placed
  // from, keeping the ids for the views (the same code path, so plan and views agree).
  virtual void keep_buffers(BufferTable& table, const PlanShape& s, const Backend& be) = 0;
  // Binds to the arena placed from that table.
  virtual void bind(const ModelBinding& binding) = 0;
  // One micro-batch of forward + backward. Parameter gradients are written (gw overwrite)
  // or accumulated (add); each sample's loss values are weighted by dloss in the gradient.
  // Returns the sum of this micro-batch's loss values. `ready` (may be empty) hears each
  // group of gradients once it is final for this micro-batch.
  virtual double forward_backward(const Batch& batch, float dloss, GradWrite gw,
                                  const GradReadyFn& ready) = 0;
  // Evaluation forward: the sum of the loss values of the batch.
  virtual double eval_loss(const Batch& batch) = 0;
  virtual Generator* generator() { return nullptr; }
  virtual Ranker* ranker() { return nullptr; }

 protected:
  // Every op of ops() at an evaluation shape of one sample, asked of the backend; the first it
  // cannot run throws UserError "<what><the backend's reason>".
  void check_ops_supported(const Backend& be, Precision p, const std::string& what) const;
};

}  // namespace ft
