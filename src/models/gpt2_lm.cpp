#include "models/gpt2_lm.h"

#include <algorithm>

#include "core/error.h"
#include "core/half.h"
#include "models/host_transfer.h"

namespace ft {

Batch lm_batch(const int32_t* tokens, const int32_t* targets, int64_t b, int64_t T) {
  Batch batch;
  batch.size = b;
  batch.fields.push_back(BatchField{FieldSpec{"tokens", DType::i32, T}, tokens});
  batch.fields.push_back(BatchField{FieldSpec{"targets", DType::i32, T}, targets});
  return batch;
}

GPT2LM::GPT2LM(const GPT2Config& c) : cfg_(c), backbone_(c) {
  cfg_.validate();
  backbone_.add_params(params_);  // the head is tied to wte: no parameters of its own
}

void GPT2LM::init_range(uint64_t seed, int64_t begin, int64_t count, float* out) const {
  params_.init_range(seed, begin, count, out);
  // the padded vocabulary rows are zero
  const int64_t C = cfg_.n_embd;  // 64-bit: V x C passes 2^31 for large vocabularies
  ParamTable::for_overlap(params_.at("wte"), cfg_.vocab_size * C, cfg_.padded_vocab_size() * C, begin, count,
                          [&](int64_t a, int64_t b) { std::fill(out + a, out + b, 0.0f); });
}

std::vector<FieldSpec> GPT2LM::input_fields() const {
  std::vector<FieldSpec> f{FieldSpec{"tokens", DType::i32, cfg_.seq_len}, FieldSpec{"targets", DType::i32, cfg_.seq_len}};
  if (backbone_.packed()) f.push_back(FieldSpec{"positions", DType::i32, cfg_.seq_len});
  return f;
}

void GPT2LM::declare(BufferTable& t, const PlanShape& s, const Backend& be, GPT2BackboneIds& bb, HeadIds& h) const {
  const GPT2Schedule sch{cfg_.n_layer};
  const int64_t T = cfg_.seq_len, Vp = cfg_.padded_vocab_size();
  const size_t a = dtype_size(activation_dtype(s.precision));
  h = HeadIds{};
  if (s.training) {
    const int64_t B = s.micro_batch;
    const size_t bt4 = static_cast<size_t>(B * T) * 4;
    h.targets = t.add("targets", BufferClass::inputs, bt4, sch.embed_fwd(), sch.head());
    h.logits = t.add("h.logits", BufferClass::transient, static_cast<size_t>(B * T * Vp) * a, sch.head(), sch.head());
    h.losses = t.add("h.losses", BufferClass::transient, bt4, sch.head(), sch.head());
  }
  {
    const int64_t B = s.eval_batch;
    const size_t bt4 = static_cast<size_t>(B * T) * 4;
    const int e0 = sch.eval_embed(), eh = sch.eval_head();
    h.e_targets = t.add("e.targets", BufferClass::inputs, bt4, e0, eh);
    h.e_logits = t.add("eh.logits", BufferClass::transient, static_cast<size_t>(B * T * Vp) * a, eh, eh);
    h.e_losses = t.add("eh.losses", BufferClass::transient, bt4, eh, eh);
    const int gd = sch.gen_decode();
    h.g_logits = t.add("gd.logits", BufferClass::transient, static_cast<size_t>(B * Vp) * a, gd, gd);
    h.g_next = t.add("gd.next", BufferClass::transient, static_cast<size_t>(B) * 4, gd, gd);
  }
  backbone_.declare(t, s, be, bb);
}

void GPT2LM::declare_buffers(BufferTable& t, const PlanShape& s, const Backend& be) const {
  GPT2BackboneIds bb;
  HeadIds h;
  declare(t, s, be, bb, h);
}

void GPT2LM::keep_buffers(BufferTable& t, const PlanShape& s, const Backend& be) {
  declare(t, s, be, bb_ids_, head_ids_);
}

std::vector<OpShape> GPT2LM::ops(const PlanShape& s) const {
  const int64_t b = std::max(s.training ? s.micro_batch : 1, s.eval_batch), N = b * cfg_.seq_len;
  std::vector<OpShape> o = backbone_.ops(b);
  // the head: logits through the tied wte, then the fused classifier
  o.push_back(OpShape::matmul(N, cfg_.n_embd, cfg_.padded_vocab_size()));
  o.push_back(OpShape::classifier(N, cfg_.vocab_size, cfg_.padded_vocab_size()));
  return o;
}

void GPT2LM::check_supported(const Backend& be, Precision p) const {
  check_ops_supported(be, p, "--n-head/--n-embd: ");
}

void GPT2LM::bind(const ModelBinding& m) {
  be_ = m.backend;
  arena_ = m.arena;
  shape_ = m.shape;
  act_ = activation_dtype(m.shape.precision);
  FT_CHECK(m.params.numel() == params_.total(), "params buffer of ", m.params.numel(), " elements");
  const int64_t maxb = std::max(shape_.training ? shape_.micro_batch : 1, shape_.eval_batch);
  losses_.bind(*be_, maxb * cfg_.seq_len);
  backbone_.bind(m, &params_, &bb_ids_);
}

double GPT2LM::forward_backward(const Batch& batch, float dloss, GradWrite gw, const GradReadyFn& ready) {
  const int64_t b = batch.size, T = cfg_.seq_len, Vp = cfg_.padded_vocab_size(), N = b * T;
  const GPT2Schedule sch{cfg_.n_layer};
  Arena& ar = *arena_;
  ar.set_phase(sch.embed_fwd());
  Tensor tgt = ar.tensor(head_ids_.targets, DType::i32, {b, T});
  be_->copy_to_device(tgt.data, batch.data<int32_t>("targets"), tgt.bytes());
  const int32_t* positions = backbone_.packed() ? batch.data<int32_t>("positions") : nullptr;
  Tensor lnf = backbone_.forward_train(batch.data<int32_t>("tokens"), b, positions);  // now in the head phase
  Tensor logits = ar.tensor(head_ids_.logits, act_, {b, T, Vp});
  Tensor losses = ar.tensor(head_ids_.losses, DType::f32, {b, T});
  Tensor wte = backbone_.wte(false);
  be_->matmul_forward(logits.view({N, Vp}), lnf, wte, Tensor());
  be_->classifier_forward_backward(losses, logits, tgt, cfg_.vocab_size, dloss);
  losses_.start(losses);  // summed after the backward is queued (LossReadback)
  // the head's backward: dlnf, and wte's first gradient (the embedding's is added later)
  be_->matmul_backward(backbone_.hidden_grad(b), backbone_.wte(true), Tensor(), logits.view({N, Vp}), lnf, wte, gw);
  backbone_.backward_train(b, gw, ready);
  return losses_.sum();
}

double GPT2LM::eval_loss(const Batch& batch) {
  const int64_t b = batch.size, T = cfg_.seq_len, Vp = cfg_.padded_vocab_size(), N = b * T;
  const GPT2Schedule sch{cfg_.n_layer};
  Arena& ar = *arena_;
  ar.set_phase(sch.eval_embed());
  Tensor tgt = ar.tensor(head_ids_.e_targets, DType::i32, {b, T});
  be_->copy_to_device(tgt.data, batch.data<int32_t>("targets"), tgt.bytes());
  const int32_t* positions = backbone_.packed() ? batch.data<int32_t>("positions") : nullptr;
  Tensor lnf = backbone_.forward_eval(batch.data<int32_t>("tokens"), b, T, positions);
  Tensor logits = ar.tensor(head_ids_.e_logits, act_, {b, T, Vp});
  Tensor losses = ar.tensor(head_ids_.e_losses, DType::f32, {b, T});
  be_->matmul_forward(logits.view({N, Vp}), lnf, backbone_.wte(false), Tensor());
  be_->classifier_forward_backward(losses, logits, tgt, cfg_.vocab_size, 0.0f);
  return losses_.read(losses);
}

void GPT2LM::logits_rows_to_host(Tensor logits, int64_t rows, float* out) {
  // Rows are Vp wide on the device; only the first V columns are real.
  const int64_t V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size();
  const size_t es = dtype_size(act_);
  be_->synchronize();
  std::vector<uint16_t> h(static_cast<size_t>(V));
  for (int64_t r = 0; r < rows; ++r) {
    const void* src = static_cast<const char*>(logits.data) + r * Vp * es;
    if (act_ == DType::f32) {
      be_->copy_to_host(out + r * V, src, static_cast<size_t>(V) * 4);
    } else {
      be_->copy_to_host(h.data(), src, h.size() * 2);
      for (int64_t k = 0; k < V; ++k) out[r * V + k] = half_bits_to_float(act_, h[k]);
    }
  }
}

void GPT2LM::next_token_logits(const int32_t* tokens, int64_t t, float* logits_out) {
  FT_CHECK(t >= 1 && t <= cfg_.seq_len, "sequence length ", t);
  const int64_t C = cfg_.n_embd, Vp = cfg_.padded_vocab_size();
  Tensor lnf = backbone_.forward_eval(tokens, 1, t);
  // Only the last position's logits are needed: one row of the output projection.
  Tensor last_row(static_cast<char*>(lnf.data) + (t - 1) * C * dtype_size(act_), act_, {1, C});
  Tensor logits = arena_->tensor(head_ids_.e_logits, act_, {1, Vp});
  be_->matmul_forward(logits, last_row, backbone_.wte(false), Tensor());
  logits_rows_to_host(logits, 1, logits_out);
}

void GPT2LM::eval_logits(const int32_t* tokens, int64_t b, float* logits_out) {
  const int64_t T = cfg_.seq_len, Vp = cfg_.padded_vocab_size(), N = b * T;
  Tensor lnf = backbone_.forward_eval(tokens, b, T);
  Tensor logits = arena_->tensor(head_ids_.e_logits, act_, {N, Vp});
  be_->matmul_forward(logits, lnf, backbone_.wte(false), Tensor());
  logits_rows_to_host(logits, N, logits_out);
}

}  // namespace ft
