#include "models/gpt2_backbone.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace ft {

namespace {

std::string block_buffer(BlockMode mode, int layer, const char* what) {
  switch (mode) {
    case BlockMode::saved: return "l" + std::to_string(layer) + "." + what;
    case BlockMode::recompute_fwd: return std::string("rf.") + what;
    case BlockMode::recompute_bwd: return std::string("rb.") + what;
    case BlockMode::eval: return "e" + std::to_string(layer) + "." + what;
  }
  return what;
}

}  // namespace

// ---- parameters --------------------------------------------------------------------------

void GPT2Backbone::add_params(ParamTable& t) {
  const int64_t L = cfg_.n_layer, C = cfg_.n_embd, Vp = cfg_.padded_vocab_size(), T = cfg_.seq_len;
  const float sd = 0.02f;
  // GPT-2 scales the two projections that write into the residual stream by 1/sqrt(2L).
  const float sd_resid = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg_.n_layer));
  const ParamInit N = ParamInit::normal, Z = ParamInit::zeros, O = ParamInit::ones;
  wte_ = t.add("wte", {Vp, C}, true, false, N, sd);  // tied with the LM head's output projection
  wpe_ = t.add("wpe", {T, C}, true, false, N, sd);
  ln1w_ = t.add("ln1w", {L, C}, false, true, O);
  ln1b_ = t.add("ln1b", {L, C}, false, true, Z);
  qkvw_ = t.add("qkvw", {L, 3 * C, C}, true, true, N, sd);
  qkvb_ = t.add("qkvb", {L, 3 * C}, false, true, Z);
  attprojw_ = t.add("attprojw", {L, C, C}, true, true, N, sd_resid);
  attprojb_ = t.add("attprojb", {L, C}, false, true, Z);
  ln2w_ = t.add("ln2w", {L, C}, false, true, O);
  ln2b_ = t.add("ln2b", {L, C}, false, true, Z);
  fcw_ = t.add("fcw", {L, 4 * C, C}, true, true, N, sd);
  fcb_ = t.add("fcb", {L, 4 * C}, false, true, Z);
  fcprojw_ = t.add("fcprojw", {L, C, 4 * C}, true, true, N, sd_resid);
  fcprojb_ = t.add("fcprojb", {L, C}, false, true, Z);
  lnfw_ = t.add("lnfw", {C}, false, false, O);
  lnfb_ = t.add("lnfb", {C}, false, false, Z);
}

// ---- plan ------------------------------------------------------------------------------------

OpShape GPT2Backbone::attention_shape(int64_t b, int64_t t, bool packed) const {
  return OpShape::attention(b, t, cfg_.n_head, cfg_.n_embd / cfg_.n_head, /*causal=*/true, /*varlen=*/false, packed);
}

size_t GPT2Backbone::attention_saved_bytes(const Backend& be, int64_t b, int64_t t, Precision p) const {
  // Packed inputs run packed attention in training and evaluation, and plain causal
  // attention in a generation's prefill: the saved state must hold either.
  size_t n = be.attention_saved_bytes(attention_shape(b, t, false), p);
  if (packed_) n = std::max(n, be.attention_saved_bytes(attention_shape(b, t, true), p));
  return n;
}

std::vector<OpShape> GPT2Backbone::ops(int64_t b, int64_t t) const {
  const int64_t T = t > 0 ? t : cfg_.seq_len, N = b * T, C = cfg_.n_embd;
  std::vector<OpShape> o{OpShape::embedding(N, C), OpShape::sum_squares(0), OpShape::layernorm(N, C)};
  for (int64_t oc : {C, 3 * C, 4 * C}) o.push_back(OpShape::matmul(N, C, oc));  // proj, qkv, fc
  o.push_back(attention_shape(b, T, false));
  if (packed_) o.push_back(attention_shape(b, T, true));
  return o;
}

void GPT2Backbone::declare_block(BufferTable& t, const PlanShape& s, const Backend& be, BlockMode mode,
                                 int layer, int64_t b, BufferClass cls, int first, int last,
                                 GPT2BlockIds& o) const {
  const int64_t T = cfg_.seq_len, C = cfg_.n_embd;
  const size_t a = dtype_size(activation_dtype(s.precision));
  const size_t btc = static_cast<size_t>(b * T * C) * a, bt = static_cast<size_t>(b * T) * 4;
  auto add = [&](const char* what, size_t bytes) { return t.add(block_buffer(mode, layer, what), cls, bytes, first, last); };
  o.ln1 = add("ln1", btc);
  o.ln1_mean = add("ln1_mean", bt);
  o.ln1_rstd = add("ln1_rstd", bt);
  o.qkv = add("qkv", 3 * btc);
  o.atty = add("atty", btc);
  o.att = add("att", attention_saved_bytes(be, b, T, s.precision));
  o.res2 = add("res2", btc);
  o.ln2 = add("ln2", btc);
  o.ln2_mean = add("ln2_mean", bt);
  o.ln2_rstd = add("ln2_rstd", bt);
  o.fch = add("fch", 4 * btc);
  o.fch_gelu = add("fch_gelu", 4 * btc);
}

void GPT2Backbone::declare(BufferTable& t, const PlanShape& s, const Backend& be, GPT2BackboneIds& ids) const {
  FT_CHECK(s.micro_batch >= 1 && s.eval_batch >= 1, "batch sizes must be >= 1");
  const int L = cfg_.n_layer;
  const int64_t T = cfg_.seq_len, C = cfg_.n_embd;
  const size_t a = dtype_size(activation_dtype(s.precision));
  const GPT2Schedule& sch = sch_;
  ids = GPT2BackboneIds{};
  if (s.training) {
    const int64_t B = s.micro_batch;
    const size_t btc = static_cast<size_t>(B * T * C) * a, bt4 = static_cast<size_t>(B * T) * 4;
    ids.tokens = t.add("tokens", BufferClass::inputs, bt4, sch.embed_fwd(), sch.embed_bwd());
    // packed: read by the embedding and every block's attention, forward and backward
    if (packed_) ids.positions = t.add("positions", BufferClass::inputs, bt4, sch.embed_fwd(), sch.embed_bwd());
    ids.encoded = t.add("encoded", BufferClass::activations, btc, sch.embed_fwd(), sch.block_bwd(0));
    for (int l = 0; l < L; ++l) {
      const int res_last = (l == L - 1) ? sch.head() : sch.block_bwd(l + 1);
      ids.res3.push_back(t.add("l" + std::to_string(l) + ".res3", BufferClass::activations, btc,
                               sch.block_fwd(l), res_last));
      if (s.recompute == Recompute::none) {
        ids.saved.emplace_back();
        declare_block(t, s, be, BlockMode::saved, l, B, BufferClass::activations, sch.block_fwd(l),
                      sch.block_bwd(l), ids.saved.back());
      }
      // Backward scratch of block l; same-sized scratch of other layers shares its bytes.
      const std::string g = "g" + std::to_string(l) + ".";
      const int p = sch.block_bwd(l);
      ids.d_btc.push_back(t.add(g + "d_btc", BufferClass::transient, btc, p, p));
      ids.d_bt3c.push_back(t.add(g + "d_bt3c", BufferClass::transient, 3 * btc, p, p));
      ids.d_bt4c.push_back(t.add(g + "d_bt4c", BufferClass::transient, 4 * btc, p, p));
    }
    if (s.recompute == Recompute::block) {
      // One set of block internals for the forward pass, one for the backward pass (where
      // each block's forward is redone just before its backward). Their lifetimes don't
      // overlap the head's, so the logits can reuse their bytes.
      declare_block(t, s, be, BlockMode::recompute_fwd, 0, B, BufferClass::transient, sch.block_fwd(0),
                    sch.block_fwd(L - 1), ids.rf);
      declare_block(t, s, be, BlockMode::recompute_bwd, 0, B, BufferClass::transient, sch.block_bwd(L - 1),
                    sch.block_bwd(0), ids.rb);
    }
    const int h = sch.head();
    ids.lnf = t.add("h.lnf", BufferClass::transient, btc, h, h);
    ids.lnf_mean = t.add("h.lnf_mean", BufferClass::transient, bt4, h, h);
    ids.lnf_rstd = t.add("h.lnf_rstd", BufferClass::transient, bt4, h, h);
    ids.dlnf = t.add("h.dlnf", BufferClass::transient, btc, h, h);
    ids.dres = t.add("dres", BufferClass::transient, btc, h, sch.embed_bwd());
  }
  {
    const int64_t B = s.eval_batch;
    const size_t btc = static_cast<size_t>(B * T * C) * a, bt4 = static_cast<size_t>(B * T) * 4;
    const int e0 = sch.eval_embed(), eh = sch.eval_head();
    ids.e_tokens = t.add("e.tokens", BufferClass::inputs, bt4, e0, eh);
    if (packed_) ids.e_positions = t.add("e.positions", BufferClass::inputs, bt4, e0, eh);
    ids.e_res0 = t.add("e.res0", BufferClass::transient, btc, e0, eh);
    ids.e_res1 = t.add("e.res1", BufferClass::transient, btc, e0, eh);
    for (int l = 0; l < L; ++l) {
      ids.eval.emplace_back();
      declare_block(t, s, be, BlockMode::eval, l, B, BufferClass::transient, sch.eval_block(l),
                    sch.eval_block(l), ids.eval.back());
    }
    ids.eh_lnf = t.add("eh.lnf", BufferClass::transient, btc, eh, eh);
    ids.eh_lnf_mean = t.add("eh.lnf_mean", BufferClass::transient, bt4, eh, eh);
    ids.eh_lnf_rstd = t.add("eh.lnf_rstd", BufferClass::transient, bt4, eh, eh);
  }
  if (generation_) declare_generation(t, s, ids);
}

// ---- running ---------------------------------------------------------------------------------

struct GPT2Backbone::BlockTensors {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, att, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  int64_t b = 0, T = 0;
};

void GPT2Backbone::bind(const ModelBinding& m, const ParamTable* params, const GPT2BackboneIds* ids) {
  be_ = m.backend;
  arena_ = m.arena;
  params_ = params;
  ids_ = ids;
  shape_ = m.shape;
  param_buf_ = m.params;
  grad_buf_ = m.grads;
  need_ = m.params_needed;
  act_ = activation_dtype(m.shape.precision);
}

Tensor GPT2Backbone::param(int entry, std::initializer_list<int64_t> dims, bool grad) const {
  return params_->view(grad ? grad_buf_ : param_buf_, entry, dims, grad);
}

Tensor GPT2Backbone::layer_param(int entry, int layer, std::initializer_list<int64_t> dims, bool grad) const {
  return params_->layer_view(grad ? grad_buf_ : param_buf_, entry, layer, dims, grad);
}

Tensor GPT2Backbone::wte(bool grad) const {
  return param(wte_, {cfg_.padded_vocab_size(), cfg_.n_embd}, grad);
}

GPT2Backbone::BlockTensors GPT2Backbone::block_tensors(const GPT2BlockIds& i, int64_t b, int64_t T) {
  const int64_t C = cfg_.n_embd;
  const DType a = act_;
  Arena& ar = *arena_;
  BlockTensors r;
  r.b = b;
  r.T = T;
  r.ln1 = ar.tensor(i.ln1, a, {b * T, C});
  r.ln1_mean = ar.tensor(i.ln1_mean, DType::f32, {b * T});
  r.ln1_rstd = ar.tensor(i.ln1_rstd, DType::f32, {b * T});
  r.qkv = ar.tensor(i.qkv, a, {b, T, 3 * C});
  r.atty = ar.tensor(i.atty, a, {b, T, C});
  // The saved attention state's layout is the backend's business; pass its bytes as a flat
  // fp32 buffer sized by the backend for this batch.
  r.att = ar.tensor(i.att, DType::f32,
                    {static_cast<int64_t>(attention_saved_bytes(*be_, b, T, shape_.precision) / 4)});
  r.res2 = ar.tensor(i.res2, a, {b * T, C});
  r.ln2 = ar.tensor(i.ln2, a, {b * T, C});
  r.ln2_mean = ar.tensor(i.ln2_mean, DType::f32, {b * T});
  r.ln2_rstd = ar.tensor(i.ln2_rstd, DType::f32, {b * T});
  r.fch = ar.tensor(i.fch, a, {b * T, 4 * C});
  r.fch_gelu = ar.tensor(i.fch_gelu, a, {b * T, 4 * C});
  return r;
}

void GPT2Backbone::block_forward(int l, const BlockTensors& a, Tensor res_in, Tensor res_out,
                                 Tensor kcache, Tensor vcache) {
  const int64_t C = cfg_.n_embd, b = a.b, T = a.T;
  auto p = [&](int e, std::initializer_list<int64_t> dims) { return layer_param(e, l, dims, false); };
  need_layer_params(l, {ln1w_, ln1b_, qkvw_, qkvb_});
  be_->layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, res_in, p(ln1w_, {C}), p(ln1b_, {C}));
  be_->matmul_forward(a.qkv.view({b * T, 3 * C}), a.ln1, p(qkvw_, {3 * C, C}), p(qkvb_, {3 * C}));
  if (!kcache.empty()) be_->kv_cache_store(kcache, vcache, a.qkv, Tensor());  // generation's prefill
  be_->attention_forward(a.atty, a.att, a.qkv, cfg_.n_head, attn_opt_);
  // each projection adds the residual stream as it writes (fused on CUDA: no separate pass)
  need_layer_params(l, {attprojw_, attprojb_});
  be_->matmul_residual_forward(a.res2, a.atty.view({b * T, C}), p(attprojw_, {C, C}), p(attprojb_, {C}), res_in);
  need_layer_params(l, {ln2w_, ln2b_, fcw_, fcb_});
  be_->layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p(ln2w_, {C}), p(ln2b_, {C}));
  be_->matmul_gelu_forward(a.fch, a.fch_gelu, a.ln2, p(fcw_, {4 * C, C}), p(fcb_, {4 * C}));
  if (res_out.empty()) return;  // recompute before backward needs nothing past this point
  need_layer_params(l, {fcprojw_, fcprojb_});
  be_->matmul_residual_forward(res_out, a.fch_gelu, p(fcprojw_, {C, 4 * C}), p(fcprojb_, {C}), a.res2);
}

void GPT2Backbone::block_backward(int l, const BlockTensors& a, Tensor res_in, Tensor dres, GradWrite gw,
                                  bool defer_qkv_weight) {
  const int64_t C = cfg_.n_embd, b = a.b, T = a.T, N = b * T;
  auto p = [&](int e, std::initializer_list<int64_t> dims) { return layer_param(e, l, dims, false); };
  auto g = [&](int e, std::initializer_list<int64_t> dims) { return layer_param(e, l, dims, true); };
  Tensor d4 = arena_->tensor(ids_->d_bt4c[l], act_, {N, 4 * C});
  Tensor d1 = arena_->tensor(ids_->d_btc[l], act_, {N, C});
  Tensor d3 = arena_->tensor(ids_->d_bt3c[l], act_, {b, T, 3 * C});
  // MLP: dres is the gradient of the block's output
  // d4 = d(fch): the projection's input gradient with GELU's backward applied; fcb's
  // gradient (colsum of d4) comes from the same epilogue where the backend has it
  const bool fcb_done = be_->matmul_backward_gelu(d4, g(fcprojw_, {C, 4 * C}), g(fcprojb_, {C}), dres,
                                                  a.fch_gelu, p(fcprojw_, {C, 4 * C}), a.fch, gw,
                                                  g(fcb_, {4 * C}));
  be_->matmul_backward(d1, g(fcw_, {4 * C, C}), fcb_done ? Tensor() : g(fcb_, {4 * C}), d4, a.ln2,
                       p(fcw_, {4 * C, C}), gw);
  be_->layernorm_backward(dres, g(ln2w_, {C}), g(ln2b_, {C}), d1, a.res2, p(ln2w_, {C}), a.ln2_mean,
                          a.ln2_rstd);  // dres now holds d(res2)
  // attention
  be_->matmul_backward(d1, g(attprojw_, {C, C}), g(attprojb_, {C}), dres, a.atty.view({N, C}),
                       p(attprojw_, {C, C}), gw);
  be_->attention_backward(d3, d1.view({b, T, C}), a.qkv, a.atty, a.att, cfg_.n_head, attn_opt_);
  be_->matmul_backward(d1, defer_qkv_weight ? Tensor() : g(qkvw_, {3 * C, C}),
                       defer_qkv_weight ? Tensor() : g(qkvb_, {3 * C}), d3.view({N, 3 * C}), a.ln1,
                       p(qkvw_, {3 * C, C}), gw);
  be_->layernorm_backward(dres, g(ln1w_, {C}), g(ln1b_, {C}), d1, res_in, p(ln1w_, {C}), a.ln1_mean,
                          a.ln1_rstd);  // dres now holds d(block input)
}

void GPT2Backbone::qkv_weight_backward(int l, const BlockTensors& a, GradWrite gw, const GradReadyFn& ready) {
  const int64_t C = cfg_.n_embd, N = a.b * a.T;
  Tensor d3 = arena_->tensor(ids_->d_bt3c[l], act_, {N, 3 * C});
  auto report = [&](int entry) {
    if (!ready) return;
    const ParamRange r = params_->layer_range(entry, l);
    ready(std::span<const ParamRange>(&r, 1));
  };
  // The bias first (the same column sums as the product's separate bias pass), so that its
  // chunk is reduced beside the weight product and only the weight's chunks follow it.
  be_->column_sums(layer_param(qkvb_, l, {3 * C}, true), d3, 0, gw);
  report(qkvb_);
  be_->matmul_backward(Tensor(), layer_param(qkvw_, l, {3 * C, C}, true), Tensor(), d3, a.ln1,
                       layer_param(qkvw_, l, {3 * C, C}, false), gw);
  report(qkvw_);
}

void GPT2Backbone::embedding_backward(int64_t b, const GradReadyFn& ready) {
  const int64_t T = cfg_.seq_len, C = cfg_.n_embd, Vp = cfg_.padded_vocab_size();
  Arena& ar = *arena_;
  be_->embedding_backward(param(wte_, {Vp, C}, true), param(wpe_, {cfg_.seq_len, C}, true),
                          ar.tensor(ids_->dres, act_, {b, T, C}), ar.tensor(ids_->tokens, DType::i32, {b, T}),
                          packed_ ? ar.tensor(ids_->positions, DType::i32, {b, T}) : Tensor());
  if (ready) {
    const ParamRange r[2] = {{params_->at(wte_).offset, params_->at(wte_).count},
                             {params_->at(wpe_).offset, params_->at(wpe_).count}};
    ready(r);
  }
}

Tensor GPT2Backbone::forward_train(const int32_t* tokens, int64_t b, const int32_t* positions) {
  FT_CHECK(shape_.training && b >= 1 && b <= shape_.micro_batch, "micro-batch ", b);
  const int L = cfg_.n_layer;
  const int64_t T = cfg_.seq_len, C = cfg_.n_embd, Vp = cfg_.padded_vocab_size(), N = b * T;
  const bool rc = shape_.recompute == Recompute::block;
  Arena& ar = *arena_;
  auto res3 = [&](int l) { return ar.tensor(ids_->res3[l], act_, {N, C}); };

  ar.set_phase(sch_.embed_fwd());
  Tensor tok = ar.tensor(ids_->tokens, DType::i32, {b, T});
  be_->copy_to_device(tok.data, tokens, tok.bytes());
  Tensor pos = input_positions(ids_->positions, positions, b, T);
  Tensor enc = ar.tensor(ids_->encoded, act_, {N, C});
  need_embeddings();
  be_->embedding_forward(enc.view({b, T, C}), tok, param(wte_, {Vp, C}, false),
                         param(wpe_, {cfg_.seq_len, C}, false), pos);
  for (int l = 0; l < L; ++l) {
    ar.set_phase(sch_.block_fwd(l));
    BlockTensors a = block_tensors(rc ? ids_->rf : ids_->saved[l], b, T);
    block_forward(l, a, l == 0 ? enc : res3(l - 1), res3(l));
  }
  ar.set_phase(sch_.head());
  Tensor lnf = ar.tensor(ids_->lnf, act_, {N, C});
  need_final_norm();
  be_->layernorm_forward(lnf, ar.tensor(ids_->lnf_mean, DType::f32, {N}), ar.tensor(ids_->lnf_rstd, DType::f32, {N}),
                         res3(L - 1), param(lnfw_, {C}, false), param(lnfb_, {C}, false));
  return lnf;
}

Tensor GPT2Backbone::input_positions(BufferId id, const int32_t* positions, int64_t b, int64_t T) {
  attn_opt_ = AttentionOptions{};
  FT_CHECK(packed_ || !positions, "positions given to a backbone planned without packed inputs");
  // No positions (a generation's prompt, one sample per row): plain causal rows.
  if (!positions) return Tensor();
  Tensor pos = arena_->tensor(id, DType::i32, {b, T});
  be_->copy_to_device(pos.data, positions, pos.bytes());
  attn_opt_.positions = pos;
  return pos;
}

Tensor GPT2Backbone::hidden_grad(int64_t b) {
  return arena_->tensor(ids_->dlnf, act_, {b * cfg_.seq_len, cfg_.n_embd});
}

void GPT2Backbone::report_layer(int l, const GradReadyFn& ready, bool but_qkv) const {
  if (!ready) return;
  ParamRange r[12];
  int n = 0;
  for (int e : {ln1w_, ln1b_, qkvw_, qkvb_, attprojw_, attprojb_, ln2w_, ln2b_, fcw_, fcb_, fcprojw_, fcprojb_})
    if (!but_qkv || (e != qkvw_ && e != qkvb_)) r[n++] = params_->layer_range(e, l);
  ready(std::span<const ParamRange>(r, n));
}

void GPT2Backbone::need_embeddings() const {
  if (!need_) return;
  const ParamRange r[2] = {{params_->at(wte_).offset, params_->at(wte_).count},
                           {params_->at(wpe_).offset, params_->at(wpe_).count}};
  need_(r);
}

void GPT2Backbone::need_layer(int l) const {
  if (need_) report_layer(l, need_);  // the same ranges as the layer's gradients
}

void GPT2Backbone::need_layer_params(int l, std::initializer_list<int> entries) const {
  if (!need_) return;
  FT_CHECK(entries.size() <= 4, "need_layer_params takes at most 4 entries");
  ParamRange r[4];
  size_t n = 0;
  for (int e : entries) r[n++] = params_->layer_range(e, l);
  need_(std::span<const ParamRange>(r, n));
}

void GPT2Backbone::need_final_norm() const {
  if (!need_) return;
  const ParamRange r[2] = {{params_->at(lnfw_).offset, params_->at(lnfw_).count},
                           {params_->at(lnfb_).offset, params_->at(lnfb_).count}};
  need_(r);
}

void GPT2Backbone::backward_train(int64_t b, GradWrite gw, const GradReadyFn& ready) {
  const int L = cfg_.n_layer;
  const int64_t T = cfg_.seq_len, C = cfg_.n_embd, N = b * T;
  const bool rc = shape_.recompute == Recompute::block;
  Arena& ar = *arena_;
  auto res3 = [&](int l) { return ar.tensor(ids_->res3[l], act_, {N, C}); };

  // head phase: the final layernorm's backward starts the residual stream's gradient
  Tensor dres = ar.tensor(ids_->dres, act_, {N, C});
  be_->zero(dres);
  be_->layernorm_backward(dres, param(lnfw_, {C}, true), param(lnfb_, {C}, true), hidden_grad(b), res3(L - 1),
                          param(lnfw_, {C}, false), ar.tensor(ids_->lnf_mean, DType::f32, {N}),
                          ar.tensor(ids_->lnf_rstd, DType::f32, {N}));
  if (ready) {
    const ParamRange r[2] = {{params_->at(lnfw_).offset, params_->at(lnfw_).count},
                             {params_->at(lnfb_).offset, params_->at(lnfb_).count}};
    ready(r);
  }
  // With a gradient-ready hook (data parallelism) the embeddings' gradient is the last to be
  // final, and its reduction (wte: the largest) would follow the backward's last op with
  // nothing left to hide it. So block 0's qkv weight product (about 0.2 ms on an H100 for
  // GPT-2 124M at 32 x 1024 tokens) runs after the embeddings' backward and report, beside
  // their reduction (a device trace showed 0.2-0.3 ms of it exposed; docs/PERFORMANCE.md).
  // Block 0's other gradients are reported before the embeddings' backward, and the qkv bias
  // before the weight product, so that only the chunks holding block 0's qkv weight are
  // reduced after the backward's last op (on 2 H200s: 37 us of reduce-scatter there, against
  // 116-123 us for all of block 0's chunks; session 32). The gradients are the same either
  // way: the product writes its own, and the bias's column sums are the product's separate
  // bias pass. (n_layer >= 1.)
  const bool defer = static_cast<bool>(ready);
  for (int l = L - 1; l >= 0; --l) {
    ar.set_phase(sch_.block_bwd(l));
    Tensor res_in = l == 0 ? ar.tensor(ids_->encoded, act_, {N, C}) : res3(l - 1);
    BlockTensors a;
    if (rc) {
      a = block_tensors(ids_->rb, b, T);
      block_forward(l, a, res_in, Tensor());
    } else {
      a = block_tensors(ids_->saved[l], b, T);
    }
    block_backward(l, a, res_in, ar.tensor(ids_->dres, act_, {N, C}), gw, defer && l == 0);
    if (defer && l == 0) {
      report_layer(l, ready, /*but_qkv=*/true);
      embedding_backward(b, ready);  // its buffers live through block 0's phase too
      qkv_weight_backward(l, a, gw, ready);
    } else {
      report_layer(l, ready);
    }
  }
  ar.set_phase(sch_.embed_bwd());
  if (!defer) embedding_backward(b, ready);
}

Tensor GPT2Backbone::forward_eval(const int32_t* tokens, int64_t b, int64_t T, const int32_t* positions) {
  FT_CHECK(b >= 1 && b <= shape_.eval_batch && T >= 1 && T <= cfg_.seq_len, "eval batch ", b, " x ", T);
  const int64_t C = cfg_.n_embd, N = b * T;
  Arena& ar = *arena_;
  Tensor res[2];
  eval_embed(tokens, b, T, res, positions);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    ar.set_phase(sch_.eval_block(l));
    // Sampling runs sequences shorter than the planned T: every view takes the real T.
    BlockTensors a = block_tensors(ids_->eval[l], b, T);
    block_forward(l, a, res[l % 2], res[(l + 1) % 2]);
  }
  ar.set_phase(sch_.eval_head());
  Tensor lnf = ar.tensor(ids_->eh_lnf, act_, {N, C});
  need_final_norm();
  be_->layernorm_forward(lnf, ar.tensor(ids_->eh_lnf_mean, DType::f32, {N}),
                         ar.tensor(ids_->eh_lnf_rstd, DType::f32, {N}), res[cfg_.n_layer % 2],
                         param(lnfw_, {C}, false), param(lnfb_, {C}, false));
  return lnf;
}

Tensor GPT2Backbone::prefill(const int32_t* tokens, int64_t b, int64_t t) {
  FT_CHECK(b >= 1 && b <= shape_.eval_batch && t >= 1 && t <= cfg_.seq_len, "prefill ", b, " x ", t);
  const int64_t T = cfg_.seq_len, C = cfg_.n_embd;
  Arena& ar = *arena_;
  Tensor res[2];
  eval_embed(tokens, b, t, res);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    ar.set_phase(sch_.eval_block(l));
    BlockTensors a = block_tensors(ids_->eval[l], b, t);
    block_forward(l, a, res[l % 2], res[(l + 1) % 2], ar.tensor(ids_->kcache[l], act_, {b, T, C}),
                  ar.tensor(ids_->vcache[l], act_, {b, T, C}));
  }
  return res[cfg_.n_layer % 2];
}

}  // namespace ft
