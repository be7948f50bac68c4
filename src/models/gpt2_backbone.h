// GPT-2's backbone: token and position embeddings, L pre-LN transformer blocks (causal
// attention, GELU-tanh MLP of width 4C) and the final layernorm; it turns tokens [b, T] into
// hidden states [b*T, C]. Heads sit on top: the language-model head (models/gpt2_lm.h, tied to
// wte) today, the recommender's own head next. The architecture is exactly GPT-2's so weights
// can be exchanged with Hugging Face's GPT2LMHeadModel.
//
// The backbone declares its parameters into the model's ParamTable and its buffers into the
// run's BufferTable (keeping the ids), and runs its part of GPT2Schedule's phases:
// forward_train() the embedding and block phases and the final layernorm in the head phase;
// backward_train() the final layernorm's backward (head phase), the block and embedding
// backward phases. Activation recompute (Recompute::block) keeps only each block's input.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "models/gpt2_config.h"
#include "models/model.h"
#include "models/param_table.h"
#include "plan/buffer_table.h"
#include "plan/shape.h"

namespace ft {

// How a block's internal activations are named in the plan (and so where they live).
enum class BlockMode { saved, recompute_fwd, recompute_bwd, eval };

// The internals of one block, as buffer ids.
struct GPT2BlockIds {
  BufferId ln1, ln1_mean, ln1_rstd, qkv, atty, att, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
};

struct GPT2BackboneIds {
  // training
  BufferId positions = kNoBuffer, e_positions = kNoBuffer;  // packed inputs only
  BufferId tokens = kNoBuffer, encoded = kNoBuffer, lnf = kNoBuffer, lnf_mean = kNoBuffer,
           lnf_rstd = kNoBuffer, dlnf = kNoBuffer, dres = kNoBuffer;
  std::vector<BufferId> res3, d_btc, d_bt3c, d_bt4c;  // per layer
  std::vector<GPT2BlockIds> saved;                    // per layer, without recompute
  GPT2BlockIds rf{}, rb{};                            // recompute: forward and backward sets
  // evaluation
  BufferId e_tokens = kNoBuffer, e_res0 = kNoBuffer, e_res1 = kNoBuffer, eh_lnf = kNoBuffer,
           eh_lnf_mean = kNoBuffer, eh_lnf_rstd = kNoBuffer;
  std::vector<GPT2BlockIds> eval;
  // generation, G = eval batch rows: each layer's cached keys and values [G, T, C] and the
  // decode step's buffers (one token per row)
  std::vector<BufferId> kcache, vcache;
  BufferId g_tokens = kNoBuffer, g_pos = kNoBuffer, g_lens = kNoBuffer, g_res0 = kNoBuffer,
           g_res1 = kNoBuffer, g_res2 = kNoBuffer, g_ln = kNoBuffer, g_ln_mean = kNoBuffer,
           g_ln_rstd = kNoBuffer, g_qkv = kNoBuffer, g_atty = kNoBuffer, g_fch = kNoBuffer,
           g_fch_gelu = kNoBuffer;
};

class GPT2Backbone {
 public:
  explicit GPT2Backbone(const GPT2Config& c) : cfg_(c), sch_{c.n_layer} {}
  const GPT2Config& config() const { return cfg_; }
  // Packed inputs (Model::set_packed_inputs): the forward passes take per-token positions.
  void set_packed(bool on) { packed_ = on; }
  bool packed() const { return packed_; }
  // Generation's KV cache and decode buffers are declared unless a head never generates
  // (the recommender scores items instead): off, they cost no bytes.
  void set_generation(bool on) { generation_ = on; }

  // Appends wte, wpe, the 12 per-layer tensors (stacked over layers) and lnfw, lnfb.
  void add_params(ParamTable& t);
  // The backbone's buffers for shape s (training and evaluation).
  void declare(BufferTable& t, const PlanShape& s, const Backend& be, GPT2BackboneIds& ids) const;
  // Every op the backbone runs at batch b, each at its largest shape (a head adds its own):
  // the backend sizes its workspace from these and says whether it runs them. t: the
  // sequence length (the planned T unless shorter).
  std::vector<OpShape> ops(int64_t b, int64_t t = 0) const;
  // The attention of a block at batch b and length t (packed: inside packed samples).
  OpShape attention_shape(int64_t b, int64_t t, bool packed = false) const;
  // Bytes of a block's saved attention state: packed inputs hold the larger of packed and
  // plain attention (a generation's prefill runs plain).
  size_t attention_saved_bytes(const Backend& be, int64_t b, int64_t t, Precision p) const;

  void bind(const ModelBinding& m, const ParamTable* params, const GPT2BackboneIds* ids);

  // Training forward of b samples (tokens: host [b, T]; positions: host [b, T] when packed,
  // else null). Leaves the arena in the head phase and returns the final layernorm's output
  // [b*T, C].
  Tensor forward_train(const int32_t* tokens, int64_t b, const int32_t* positions = nullptr);
  // The gradient of that output [b*T, C], for the head to write (head phase).
  Tensor hidden_grad(int64_t b);
  // Backward from hidden_grad(): final layernorm, blocks, embedding. Weight products write
  // or add their gradients per gw; `ready` hears each group of final gradients.
  void backward_train(int64_t b, GradWrite gw, const GradReadyFn& ready);
  // Evaluation forward of b sequences of length t <= T: the eval tokens' device view is
  // filled from host `tokens` (and positions, when packed); returns the final layernorm's
  // output [b*t, C] (eval head phase).
  Tensor forward_eval(const int32_t* tokens, int64_t b, int64_t t, const int32_t* positions = nullptr);

  // ---- generation with a KV cache (G = the plan's eval batch) ----
  // Prefill of b <= G prompts right-padded to length t: the evaluation forward, whose blocks
  // also store their keys and values at positions [0, t) of each row's cache. Returns the last
  // block's output [b*t, C] (still valid in the decode phase). Padded positions store keys
  // too; a row's decode steps overwrite them before attending to them (a step at position p
  // stores p first and reads [0, p]).
  Tensor prefill(const int32_t* tokens, int64_t b, int64_t t);
  // In the decode phase: the final layernorm of row (i, lens[i] - 1) of prefill's output, for
  // each row i < b: [b, C], for the head's logits of every prompt's first new token.
  Tensor prefill_last_rows(Tensor hidden, const std::vector<int64_t>& lens, int64_t t);
  // One decode step in the decode phase: row i < b feeds tokens[i] at position pos[i] (host
  // arrays; pos[i] < T), stores its keys and values there and attends to [0, pos[i]] of its
  // cache. Returns the final layernorm's output [b, C].
  Tensor decode_step(const int32_t* tokens, const int32_t* pos, int64_t b);

  // wte [Vp, C] (or its gradient), for a head tied to the input embedding.
  Tensor wte(bool grad) const;

 private:
  void declare_block(BufferTable& t, const PlanShape& s, const Backend& be, BlockMode mode, int layer,
                     int64_t b, BufferClass cls, int first, int last, GPT2BlockIds& out) const;
  struct BlockTensors;
  BlockTensors block_tensors(const GPT2BlockIds& ids, int64_t b, int64_t T);
  // kcache/vcache (optional: the prefill): where the block also stores its keys and values
  void block_forward(int layer, const BlockTensors& a, Tensor res_in, Tensor res_out,
                     Tensor kcache = Tensor(), Tensor vcache = Tensor());
  void declare_generation(BufferTable& t, const PlanShape& s, GPT2BackboneIds& ids) const;
  Tensor eval_embed(const int32_t* tokens, int64_t b, int64_t t, Tensor* res, const int32_t* positions = nullptr);
  // defer_qkv_weight: leave the qkv product's weight and bias gradients to qkv_weight_backward
  // (block 0 under data parallelism, see backward_train).
  void block_backward(int layer, const BlockTensors& a, Tensor res_in, Tensor dres, GradWrite gw,
                      bool defer_qkv_weight = false);
  // The deferred gradients: the qkv bias (reported), then the weight (reported).
  void qkv_weight_backward(int layer, const BlockTensors& a, GradWrite gw, const GradReadyFn& ready);
  // The embeddings' backward from dres (the first block's input gradient), and their report.
  void embedding_backward(int64_t b, const GradReadyFn& ready);
  Tensor param(int entry, std::initializer_list<int64_t> dims, bool grad) const;
  // Packed: copies host positions [b, T] into buffer `id` and returns its view (and sets the
  // pass's attention options); unpacked: an empty tensor.
  Tensor input_positions(BufferId id, const int32_t* positions, int64_t b, int64_t T);
  Tensor layer_param(int entry, int layer, std::initializer_list<int64_t> dims, bool grad) const;
  // Reports the layer's gradients as final (but_qkv: all but the qkv product's weight and bias).
  void report_layer(int layer, const GradReadyFn& ready, bool but_qkv = false) const;
  // The parameter groups the forward reads, in its order: embeddings, each block op by op,
  // final LN (handed to ModelBinding::params_needed just before their ops are queued). A block
  // names its ops' parameters one op at a time, so that under ZeRO-1 its first product waits
  // only for the gathers of what it reads, not for those of the block's last product.
  void need_embeddings() const;
  void need_layer(int layer) const;  // all of the block's (a generation's decode)
  void need_layer_params(int layer, std::initializer_list<int> entries) const;  // at most 4
  void need_final_norm() const;

  GPT2Config cfg_;
  GPT2Schedule sch_;
  bool packed_ = false;
  bool generation_ = true;
  // The current pass's attention options (packed: its positions), set by the forward.
  AttentionOptions attn_opt_;
  // parameter entries in the ParamTable
  int wte_ = -1, wpe_ = -1, ln1w_ = -1, ln1b_ = -1, qkvw_ = -1, qkvb_ = -1, attprojw_ = -1, attprojb_ = -1,
      ln2w_ = -1, ln2b_ = -1, fcw_ = -1, fcb_ = -1, fcprojw_ = -1, fcprojb_ = -1, lnfw_ = -1, lnfb_ = -1;
  // bound state
  Backend* be_ = nullptr;
  Arena* arena_ = nullptr;
  const ParamTable* params_ = nullptr;
  const GPT2BackboneIds* ids_ = nullptr;
  PlanShape shape_;
  Tensor param_buf_, grad_buf_;
  ParamNeededFn need_;
  DType act_ = DType::f32;
};

}  // namespace ft
