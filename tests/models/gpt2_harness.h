// GPT-2 language model bound to a backend through the engine's ModelRuntime, with the
// token-array calls the model tests use (tokens/targets host arrays [b, T]).
#pragma once
#include <memory>
#include <vector>

#include "models/gpt2_lm.h"
#include "models/host_copies.h"
#include "train/runtime.h"

namespace ft::testing {

class GPT2Harness {
 public:
  // Plans, allocates and binds; parameters initialised from `seed` (GPT-2's init).
  // packed: the model reads packed inputs (a positions field; Model::set_packed_inputs).
  GPT2Harness(Backend& be, const GPT2Config& c, const PlanShape& s, uint64_t seed = 42, bool packed = false)
      : model_(make_model(c, packed)), rt_(std::make_unique<ModelRuntime>(*model_, be, s)) {
    std::vector<float> host(static_cast<size_t>(model_->num_params()));
    model_->init_params(seed, host.data());
    rt_->load_params_from_host(host.data());
  }
  GPT2LM& model() { return *model_; }
  ModelRuntime& runtime() { return *rt_; }
  Arena& arena() { return rt_->arena(); }
  const MemoryPlan& plan() const { return rt_->plan(); }
  const ParamTable& layout() const { return model_->param_table(); }
  int64_t T() const { return model_->gpt2_config().seq_len; }

  void zero_grads() { rt_->zero_grads(); }
  double forward_backward(const int32_t* tok, const int32_t* tgt, int64_t b, float dloss,
                          const GradReadyFn& ready = {}) {
    return rt_->forward_backward(lm_batch(tok, tgt, b, T()), dloss, ready);
  }
  // Packed inputs: positions [b, T] (each token's position in its own sample).
  double forward_backward(const int32_t* tok, const int32_t* tgt, const int32_t* pos, int64_t b, float dloss) {
    Batch batch = lm_batch(tok, tgt, b, T());
    batch.fields.push_back(BatchField{FieldSpec{"positions", DType::i32, T()}, pos});
    return rt_->forward_backward(batch, dloss);
  }
  double eval_loss(const int32_t* tok, const int32_t* tgt, const int32_t* pos, int64_t b) {
    Batch batch = lm_batch(tok, tgt, b, T());
    batch.fields.push_back(BatchField{FieldSpec{"positions", DType::i32, T()}, pos});
    return rt_->eval_loss(batch);
  }
  double eval_loss(const int32_t* tok, const int32_t* tgt, int64_t b) {
    return rt_->eval_loss(lm_batch(tok, tgt, b, T()));
  }
  void eval_logits(const int32_t* tok, int64_t b, float* out) { model_->eval_logits(tok, b, out); }
  double grad_sum_squares() { return rt_->grad_sum_squares_part(); }
  void adamw_step(const AdamWStep& st) { rt_->adamw_step(st); }
  void load_params_from_host(const float* p) { rt_->load_params_from_host(p); }
  void copy_params_to_host(float* p) const { rt_->copy_params_to_host(p); }
  void copy_grads_to_host(float* g) const { rt_->copy_grads_to_host(g); }
  std::vector<float> grads() const { return host_grads(*rt_, model_->num_params()); }
  std::vector<float> params() const { return host_params(*rt_, model_->num_params()); }

 private:
  static std::unique_ptr<GPT2LM> make_model(const GPT2Config& c, bool packed) {
    auto m = std::make_unique<GPT2LM>(c);
    m->set_packed_inputs(packed);
    return m;
  }
  std::unique_ptr<GPT2LM> model_;
  std::unique_ptr<ModelRuntime> rt_;
};

}  // namespace ft::testing
