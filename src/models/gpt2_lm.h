// GPT-2 language model: the GPT-2 backbone with the language-model head (logits through the
// tied input embedding wte, fused softmax + cross-entropy + its gradient). Inputs per sample:
// "tokens" and "targets", int32 x T, and with packed inputs "positions" (int32 x T: each
// token's position in its own sample); loss values: one per token (targets < 0 count 0).
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "models/gpt2_backbone.h"
#include "models/host_transfer.h"
#include "models/model.h"

namespace ft {

class GPT2LM final : public Model, public Generator {
 public:
  explicit GPT2LM(const GPT2Config& c);
  const GPT2Config& gpt2_config() const { return cfg_; }

  std::string family() const override { return "gpt2"; }
  nlohmann::json config() const override { return cfg_.to_json(); }
  std::string describe() const override { return cfg_.describe(); }
  const ParamTable& param_table() const override { return params_; }
  // GPT-2's initialisation: N(0, 0.02) for matrices and embeddings, N(0, 0.02/sqrt(2L)) for
  // the two residual projections, zeros for biases, ones for layernorm weights; the padded
  // vocabulary rows are zero (they never receive gradient).
  void init_range(uint64_t seed, int64_t begin, int64_t count, float* out) const override;

  std::vector<FieldSpec> input_fields() const override;
  bool set_packed_inputs(bool on) override {
    backbone_.set_packed(on);
    return true;
  }
  int64_t loss_values_per_sample() const override { return cfg_.seq_len; }
  int64_t rows_per_sample() const override { return cfg_.seq_len; }
  // Per-block recompute (a second forward of each block in the backward) cost 22% of a step
  // without it: GPT-2 XL on 2 H200s, fitted with plan/fit.h's SpeedModel (docs/PERFORMANCE.md, session 37).
  double recompute_cost() const override { return 0.22; }
  int num_phases() const override { return GPT2Schedule{cfg_.n_layer}.num_phases(); }
  int optimizer_phase() const override { return GPT2Schedule{cfg_.n_layer}.optimizer(); }
  void declare_buffers(BufferTable& t, const PlanShape& s, const Backend& be) const override;
  std::vector<OpShape> ops(const PlanShape& s) const override;
  void check_supported(const Backend& be, Precision p) const override;

  void keep_buffers(BufferTable& t, const PlanShape& s, const Backend& be) override;
  void bind(const ModelBinding& m) override;
  double forward_backward(const Batch& batch, float dloss, GradWrite gw, const GradReadyFn& ready) override;
  double eval_loss(const Batch& batch) override;
  Generator* generator() override { return this; }

  // Generator
  int64_t vocab_size() const override { return cfg_.vocab_size; }
  int64_t context_length() const override { return cfg_.seq_len; }
  void next_token_logits(const int32_t* tokens, int64_t t, float* logits_out) override;
  std::vector<std::vector<int32_t>> generate(const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& opt) override;
  int64_t max_generate_batch() const override { return shape_.eval_batch; }
  // generate(), handing each row's logits of every step to `hook` (prompt index, step, V
  // floats), for tests against next_token_logits. The logits then come to the host every
  // step, greedy or not.
  using StepLogitsFn = std::function<void(int64_t prompt, int64_t step, std::span<const float> logits)>;
  std::vector<std::vector<int32_t>> generate(const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& opt, const StepLogitsFn& hook);

  // Evaluation forward; writes the logits [b, T, V] (padding columns dropped) as fp32 to host
  // memory. For parity tests against other implementations.
  void eval_logits(const int32_t* tokens, int64_t b, float* logits_out);

 private:
  struct HeadIds {
    BufferId targets = kNoBuffer, logits = kNoBuffer, losses = kNoBuffer;
    BufferId e_targets = kNoBuffer, e_logits = kNoBuffer, e_losses = kNoBuffer;
    BufferId g_logits = kNoBuffer, g_next = kNoBuffer;  // generation: [G, Vp], i32[G]
  };
  // One chunk of at most max_generate_batch() prompts, from index `first` of the call.
  void generate_chunk(const std::vector<std::vector<int32_t>>& prompts, size_t first, size_t count,
                      const GenerateOptions& opt, const StepLogitsFn& hook,
                      std::vector<std::vector<int32_t>>& out);
  void declare(BufferTable& t, const PlanShape& s, const Backend& be, GPT2BackboneIds& bb, HeadIds& h) const;
  void logits_rows_to_host(Tensor logits, int64_t rows, float* out);

  GPT2Config cfg_;
  GPT2Backbone backbone_;
  ParamTable params_;
  GPT2BackboneIds bb_ids_;
  HeadIds head_ids_;
  Backend* be_ = nullptr;
  Arena* arena_ = nullptr;
  PlanShape shape_;
  DType act_ = DType::f32;
  LossReadback losses_;  // the per-token losses, read back (models/host_transfer.h)
};

// A Batch of b token windows (host arrays [b, T]) in GPT2LM's input fields.
Batch lm_batch(const int32_t* tokens, const int32_t* targets, int64_t b, int64_t T);

}  // namespace ft
