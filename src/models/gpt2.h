// GPT-2: configuration, flat parameter layout, initialisation, and one training step's
// forward and backward through the Backend interface.
//
// The architecture is exactly GPT-2's (pre-LN blocks, GELU-tanh MLP of width 4C, learned
// positions, tied input/output embedding, final layernorm) so weights can be exchanged with
// Hugging Face's GPT2LMHeadModel. All parameters live in ONE flat buffer in the order of
// gpt2_param_layout(); gradients, master weights and Adam moments use the same layout, which
// makes grad-norm, AdamW, checkpoints and collectives single contiguous operations.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "models/gpt2_plan.h"

namespace ft {

// One parameter tensor inside the flat buffer. Per-layer tensors are stacked over layers
// (shape [L, ...]) like llm.c, so layer l's slice starts at offset + l * count / L.
struct ParamEntry {
  std::string name;            // e.g. "qkvw"
  std::vector<int64_t> shape;  // e.g. {L, 3C, C}
  int64_t offset = 0;          // elements into the flat buffer
  int64_t count = 0;           // elements
  bool decay = false;          // weight decay applies (matrices and embeddings)
  bool per_layer = false;
};

struct ParamLayout {
  std::vector<ParamEntry> entries;
  int64_t total = 0;
  const ParamEntry& at(const std::string& name) const;
};
ParamLayout gpt2_param_layout(const GPT2Config& c);
// AdamW slices (contiguous runs with one decay setting), from the layout.
std::vector<ParamSlice> gpt2_param_slices(const ParamLayout& layout);
// GPT-2 initialisation into a host fp32 buffer of layout.total elements: N(0, 0.02) for
// matrices and embeddings, N(0, 0.02/sqrt(2L)) for the two residual projections (attproj,
// fcproj), zeros for biases, ones for layernorm weights; padded vocabulary rows are zero.
// Deterministic from seed, independent of thread count.
void gpt2_init_params(const GPT2Config& c, const ParamLayout& layout, uint64_t seed, float* out);

// The model bound to a backend and an arena built from gpt2_memory_plan().
class GPT2 {
 public:
  GPT2(const GPT2Config& config, const PlanShape& shape, Arena& arena);

  const GPT2Config& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  DType param_dtype() const { return param_dtype_; }

  // Persistent flat buffers (the whole layout), device-resident.
  Tensor params() const;
  Tensor grads() const;
  Tensor master() const;  // empty unless mixed precision
  Tensor adam_m() const;
  Tensor adam_v() const;

  // Host fp32 values -> params (and master). Used at init and when loading weights.
  void load_params_from_host(const float* host);
  void copy_params_to_host(float* host) const;  // fp32 (from master when present)
  void copy_grads_to_host(float* host) const;   // fp32
  void zero_grads();

  // One micro-batch of forward + backward, accumulating into grads. tokens/targets are host
  // arrays [b, T] with b <= the planned micro-batch. Each token's loss is weighted by dloss
  // in the gradient. Returns the sum of per-token losses of this micro-batch.
  double forward_backward(const int32_t* tokens, const int32_t* targets, int64_t b, float dloss);
  // Evaluation forward on the eval buffers: returns the sum of per-token losses.
  double eval_loss(const int32_t* tokens, const int32_t* targets, int64_t b);
  // Evaluation forward; writes the logits [b, T, V] (padding columns dropped) as fp32 to
  // host memory. For parity tests against other implementations.
  void eval_logits(const int32_t* tokens, int64_t b, float* logits_out);
  // Forward of one sequence of length t <= T on the eval buffers; writes the logits of the
  // last position (V floats) to host memory. Used by `fittrain sample`.
  void next_token_logits(const int32_t* tokens, int64_t t, float* logits_out);

  // Sum of squared gradients (for the norm) and the AdamW update over every parameter.
  double grad_sum_squares();
  void adamw_step(const AdamWStep& step);

 private:
  struct BlockTensors;
  BlockTensors block_tensors(int layer, int64_t b, int64_t T, BlockMode mode);
  void block_forward(int layer, const BlockTensors& a, Tensor res_in, Tensor res_out);
  void block_backward(int layer, const BlockTensors& a, Tensor res_in, Tensor dres, GradWrite gw);
  Tensor layer_param(const std::string& name, int layer, std::initializer_list<int64_t> dims,
                     bool grad) const;
  Tensor global_param(const std::string& name, std::initializer_list<int64_t> dims,
                      bool grad) const;
  void forward_to_lnf(Tensor tokens_dev, int64_t b, Tensor* lnf_out);
  void logits_rows_to_host(Tensor logits, int64_t rows, float* out);
  void copy_to_host_f32(Tensor t, float* out) const;  // any float dtype -> host fp32

  GPT2Config cfg_;
  PlanShape shape_;
  Arena& arena_;
  Backend& be_;
  ParamLayout layout_;
  std::vector<ParamSlice> slices_;
  DType param_dtype_;
  DType act_dtype_;
  bool grads_zeroed_ = false;  // zero_grads ran and no micro-batch since
  std::vector<float> host_losses_;
};

}  // namespace ft
