#include "models/gpt2.h"

#include <cmath>

#include "core/half.h"
#include "core/rng.h"

namespace ft {

const ParamEntry& ParamLayout::at(const std::string& name) const {
  for (const auto& e : entries)
    if (e.name == name) return e;
  FT_CHECK(false, "no parameter '", name, "'");
  return entries.front();
}

ParamLayout gpt2_param_layout(const GPT2Config& c) {
  const int64_t L = c.n_layer, C = c.n_embd, Vp = c.padded_vocab_size(), T = c.seq_len;
  ParamLayout lay;
  auto add = [&](const char* name, std::vector<int64_t> shape, bool decay, bool per_layer) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    lay.entries.push_back(ParamEntry{name, std::move(shape), lay.total, n, decay, per_layer});
    lay.total += n;
  };
  add("wte", {Vp, C}, true, false);  // tied with the output projection
  add("wpe", {T, C}, true, false);
  add("ln1w", {L, C}, false, true);
  add("ln1b", {L, C}, false, true);
  add("qkvw", {L, 3 * C, C}, true, true);
  add("qkvb", {L, 3 * C}, false, true);
  add("attprojw", {L, C, C}, true, true);
  add("attprojb", {L, C}, false, true);
  add("ln2w", {L, C}, false, true);
  add("ln2b", {L, C}, false, true);
  add("fcw", {L, 4 * C, C}, true, true);
  add("fcb", {L, 4 * C}, false, true);
  add("fcprojw", {L, C, 4 * C}, true, true);
  add("fcprojb", {L, C}, false, true);
  add("lnfw", {C}, false, false);
  add("lnfb", {C}, false, false);
  FT_CHECK(lay.total == gpt2_num_params(c), "layout and gpt2_num_params disagree");
  return lay;
}

std::vector<ParamSlice> gpt2_param_slices(const ParamLayout& layout) {
  std::vector<ParamSlice> slices;
  for (const auto& e : layout.entries) {
    if (!slices.empty() && slices.back().decay == e.decay &&
        slices.back().offset + slices.back().count == e.offset)
      slices.back().count += e.count;
    else
      slices.push_back(ParamSlice{e.offset, e.count, e.decay});
  }
  return slices;
}

void gpt2_init_params(const GPT2Config& c, const ParamLayout& layout, uint64_t seed, float* out) {
  const float std_base = 0.02f;
  const float std_resid = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  // One stream per tensor (seeded by its index) so changing one tensor's size doesn't shift
  // every other tensor's values.
  for (size_t i = 0; i < layout.entries.size(); ++i) {
    const auto& e = layout.entries[i];
    float* p = out + e.offset;
    const std::string& n = e.name;
    if (n == "ln1w" || n == "ln2w" || n == "lnfw") {
      for (int64_t k = 0; k < e.count; ++k) p[k] = 1.0f;
    } else if (!e.decay) {
      for (int64_t k = 0; k < e.count; ++k) p[k] = 0.0f;
    } else {
      Rng rng(seed * 1000003ull + i);
      float sd = (n == "attprojw" || n == "fcprojw") ? std_resid : std_base;
      for (int64_t k = 0; k < e.count; ++k) p[k] = static_cast<float>(rng.normal()) * sd;
    }
  }
  // Padded vocabulary rows never receive gradient and must stay zero.
  const auto& wte = layout.at("wte");
  for (int64_t r = c.vocab_size; r < c.padded_vocab_size(); ++r)
    for (int64_t k = 0; k < c.n_embd; ++k) out[wte.offset + r * c.n_embd + k] = 0.0f;
}

// ---- the model ------------------------------------------------------------------------------

struct GPT2::BlockTensors {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, att, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  int64_t b = 0, T = 0;
  int layer = 0;
  BlockMode mode = BlockMode::saved;
};

GPT2::GPT2(const GPT2Config& config, const PlanShape& shape, Arena& arena)
    : cfg_(config),
      shape_(shape),
      arena_(arena),
      be_(arena.backend()),
      layout_(gpt2_param_layout(config)),
      slices_(gpt2_param_slices(layout_)),
      param_dtype_(ft::param_dtype(shape.precision)),
      act_dtype_(activation_dtype(shape.precision)) {
  const int64_t maxb = std::max(shape.training ? shape.micro_batch : 1, shape.eval_batch);
  host_losses_.resize(static_cast<size_t>(maxb * shape.seq_len));
  OpDims d{maxb, shape.seq_len, cfg_.n_embd, cfg_.n_head, cfg_.padded_vocab_size(), cfg_.vocab_size};
  be_.set_workspace(arena_.persistent_ptr("workspace"), be_.workspace_bytes(d));
}

Tensor GPT2::params() const {
  return Tensor(arena_.persistent_ptr("params"), param_dtype_, {layout_.total});
}
Tensor GPT2::grads() const {
  return Tensor(arena_.persistent_ptr("grads"), param_dtype_, {layout_.total});
}
Tensor GPT2::master() const {
  if (!arena_.has("master")) return Tensor();
  return Tensor(arena_.persistent_ptr("master"), DType::f32, {layout_.total});
}
Tensor GPT2::adam_m() const { return Tensor(arena_.persistent_ptr("adam_m"), DType::f32, {layout_.total}); }
Tensor GPT2::adam_v() const { return Tensor(arena_.persistent_ptr("adam_v"), DType::f32, {layout_.total}); }

Tensor GPT2::global_param(const std::string& name, std::initializer_list<int64_t> dims,
                          bool grad) const {
  const auto& e = layout_.at(name);
  void* base = arena_.persistent_ptr(grad ? "grads" : "params");
  Tensor t(static_cast<char*>(base) + e.offset * dtype_size(param_dtype_), param_dtype_, dims);
  FT_CHECK(t.numel() == e.count, name, " shape");
  return t;
}

Tensor GPT2::layer_param(const std::string& name, int layer, std::initializer_list<int64_t> dims,
                         bool grad) const {
  const auto& e = layout_.at(name);
  const int64_t per = e.count / cfg_.n_layer;
  void* base = arena_.persistent_ptr(grad ? "grads" : "params");
  Tensor t(static_cast<char*>(base) + (e.offset + layer * per) * dtype_size(param_dtype_),
           param_dtype_, dims);
  FT_CHECK(t.numel() == per, name, " shape");
  return t;
}

void GPT2::load_params_from_host(const float* host) {
  const size_t n = static_cast<size_t>(layout_.total);
  if (param_dtype_ == DType::f32) {
    be_.copy_to_device(params().data, host, n * 4);
    return;
  }
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = float_to_half_bits(param_dtype_, host[i]);
  be_.copy_to_device(params().data, h.data(), n * 2);
  Tensor m = master();
  if (!m.empty()) be_.copy_to_device(m.data, host, n * 4);
}

void GPT2::copy_params_to_host(float* host) const {
  Tensor m = master();
  copy_to_host_f32(m.empty() ? params() : m, host);  // fp32 master weights when there are any
}

void GPT2::copy_grads_to_host(float* host) const { copy_to_host_f32(grads(), host); }

void GPT2::copy_to_host_f32(Tensor t, float* out) const {
  be_.synchronize();
  if (t.dtype == DType::f32) {
    be_.copy_to_host(out, t.data, t.bytes());
    return;
  }
  std::vector<uint16_t> h(static_cast<size_t>(t.numel()));
  be_.copy_to_host(h.data(), t.data, t.bytes());
  for (size_t i = 0; i < h.size(); ++i) out[i] = half_bits_to_float(t.dtype, h[i]);
}

void GPT2::zero_grads() {
  be_.zero(grads());
  grads_zeroed_ = true;
}
double GPT2::grad_sum_squares() { return be_.sum_squares(grads()); }

void GPT2::adamw_step(const AdamWStep& step) {
  arena_.set_phase(GPT2Schedule{cfg_.n_layer}.optimizer());
  be_.adamw_update(params(), master(), grads(), adam_m(), adam_v(), slices_, step);
}

GPT2::BlockTensors GPT2::block_tensors(int layer, int64_t b, int64_t T, BlockMode mode) {
  const int64_t C = cfg_.n_embd, NH = cfg_.n_head;
  const DType a = act_dtype_;
  auto t = [&](const char* w, DType dt, std::initializer_list<int64_t> dims) {
    return arena_.tensor(block_buffer(mode, layer, w), dt, dims);
  };
  BlockTensors r;
  r.b = b;
  r.T = T;
  r.layer = layer;
  r.mode = mode;
  r.ln1 = t("ln1", a, {b * T, C});
  r.ln1_mean = t("ln1_mean", DType::f32, {b * T});
  r.ln1_rstd = t("ln1_rstd", DType::f32, {b * T});
  r.qkv = t("qkv", a, {b, T, 3 * C});
  r.atty = t("atty", a, {b, T, C});
  // The saved attention state's layout is the backend's business; pass its bytes as a flat
  // fp32 buffer sized by the backend for this batch.
  OpDims d{b, T, C, NH, cfg_.padded_vocab_size(), cfg_.vocab_size};
  r.att = t("att", DType::f32, {static_cast<int64_t>(be_.attention_saved_bytes(d, shape_.precision) / 4)});
  r.res2 = t("res2", a, {b * T, C});
  r.ln2 = t("ln2", a, {b * T, C});
  r.ln2_mean = t("ln2_mean", DType::f32, {b * T});
  r.ln2_rstd = t("ln2_rstd", DType::f32, {b * T});
  r.fch = t("fch", a, {b * T, 4 * C});
  r.fch_gelu = t("fch_gelu", a, {b * T, 4 * C});
  return r;
}

void GPT2::block_forward(int l, const BlockTensors& a, Tensor res_in, Tensor res_out) {
  const int64_t C = cfg_.n_embd, b = a.b, T = a.T;
  auto p = [&](const char* n, std::initializer_list<int64_t> dims) { return layer_param(n, l, dims, false); };
  be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, res_in, p("ln1w", {C}), p("ln1b", {C}));
  be_.matmul_forward(a.qkv.view({b * T, 3 * C}), a.ln1, p("qkvw", {3 * C, C}), p("qkvb", {3 * C}));
  be_.attention_forward(a.atty, a.att, a.qkv, cfg_.n_head);
  // each projection adds the residual stream as it writes (fused on CUDA: no separate pass)
  be_.matmul_residual_forward(a.res2, a.atty.view({b * T, C}), p("attprojw", {C, C}),
                              p("attprojb", {C}), res_in);
  be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p("ln2w", {C}), p("ln2b", {C}));
  be_.matmul_gelu_forward(a.fch, a.fch_gelu, a.ln2, p("fcw", {4 * C, C}), p("fcb", {4 * C}));
  if (res_out.empty()) return;  // recompute before backward needs nothing past this point
  be_.matmul_residual_forward(res_out, a.fch_gelu, p("fcprojw", {C, 4 * C}), p("fcprojb", {C}),
                              a.res2);
}

void GPT2::block_backward(int l, const BlockTensors& a, Tensor res_in, Tensor dres, GradWrite gw) {
  const int64_t C = cfg_.n_embd, b = a.b, T = a.T, N = b * T;
  auto p = [&](const char* n, std::initializer_list<int64_t> dims) { return layer_param(n, l, dims, false); };
  auto g = [&](const char* n, std::initializer_list<int64_t> dims) { return layer_param(n, l, dims, true); };
  const std::string s = "g" + std::to_string(l) + ".";
  Tensor d4 = arena_.tensor(s + "d_bt4c", act_dtype_, {N, 4 * C});
  Tensor d1 = arena_.tensor(s + "d_btc", act_dtype_, {N, C});
  Tensor d3 = arena_.tensor(s + "d_bt3c", act_dtype_, {b, T, 3 * C});
  // MLP: dres is the gradient of the block's output
  // d4 = d(fch): the projection's input gradient with GELU's backward applied; fcb's
  // gradient (colsum of d4) comes from the same epilogue where the backend has it
  const bool fcb_done = be_.matmul_backward_gelu(d4, g("fcprojw", {C, 4 * C}), g("fcprojb", {C}),
                                                 dres, a.fch_gelu, p("fcprojw", {C, 4 * C}), a.fch,
                                                 gw, g("fcb", {4 * C}));
  be_.matmul_backward(d1, g("fcw", {4 * C, C}), fcb_done ? Tensor() : g("fcb", {4 * C}), d4, a.ln2,
                      p("fcw", {4 * C, C}), gw);
  be_.layernorm_backward(dres, g("ln2w", {C}), g("ln2b", {C}), d1, a.res2, p("ln2w", {C}),
                         a.ln2_mean, a.ln2_rstd);  // dres now holds d(res2)
  // attention
  be_.matmul_backward(d1, g("attprojw", {C, C}), g("attprojb", {C}), dres, a.atty.view({N, C}),
                      p("attprojw", {C, C}), gw);
  be_.attention_backward(d3, d1.view({b, T, C}), a.qkv, a.atty, a.att, cfg_.n_head);
  be_.matmul_backward(d1, g("qkvw", {3 * C, C}), g("qkvb", {3 * C}), d3.view({N, 3 * C}), a.ln1,
                      p("qkvw", {3 * C, C}), gw);
  be_.layernorm_backward(dres, g("ln1w", {C}), g("ln1b", {C}), d1, res_in, p("ln1w", {C}),
                         a.ln1_mean, a.ln1_rstd);  // dres now holds d(block input)
}

double GPT2::forward_backward(const int32_t* tokens, const int32_t* targets, int64_t b, float dloss) {
  FT_CHECK(shape_.training && b >= 1 && b <= shape_.micro_batch, "micro-batch ", b);
  // Right after zero_grads, every weight's product writes its gradient instead of adding
  // to zeros (each weight has one product per micro-batch; wte's second gradient, from the
  // embedding, is added after the classifier's).
  const GradWrite gw = grads_zeroed_ ? GradWrite::overwrite : GradWrite::add;
  grads_zeroed_ = false;
  const GPT2Schedule sch{cfg_.n_layer};
  const int L = cfg_.n_layer;
  const int64_t T = shape_.seq_len, C = cfg_.n_embd, Vp = cfg_.padded_vocab_size(), N = b * T;
  const bool rc = shape_.recompute == Recompute::block;
  auto res3 = [&](int l) { return arena_.tensor("l" + std::to_string(l) + ".res3", act_dtype_, {N, C}); };

  arena_.set_phase(sch.embed_fwd());
  Tensor tok = arena_.tensor("tokens", DType::i32, {b, T});
  Tensor tgt = arena_.tensor("targets", DType::i32, {b, T});
  be_.copy_to_device(tok.data, tokens, tok.bytes());
  be_.copy_to_device(tgt.data, targets, tgt.bytes());
  Tensor wte = global_param("wte", {Vp, C}, false), wpe = global_param("wpe", {cfg_.seq_len, C}, false);
  Tensor enc = arena_.tensor("encoded", act_dtype_, {N, C});
  be_.embedding_forward(enc.view({b, T, C}), tok, wte, wpe);

  for (int l = 0; l < L; ++l) {
    arena_.set_phase(sch.block_fwd(l));
    BlockTensors a = block_tensors(l, b, T, rc ? BlockMode::recompute_fwd : BlockMode::saved);
    block_forward(l, a, l == 0 ? enc : res3(l - 1), res3(l));
  }

  arena_.set_phase(sch.head());
  Tensor lnf = arena_.tensor("h.lnf", act_dtype_, {N, C});
  Tensor mean = arena_.tensor("h.lnf_mean", DType::f32, {N});
  Tensor rstd = arena_.tensor("h.lnf_rstd", DType::f32, {N});
  Tensor logits = arena_.tensor("h.logits", act_dtype_, {b, T, Vp});
  Tensor losses = arena_.tensor("h.losses", DType::f32, {b, T});
  Tensor last = res3(L - 1);
  be_.layernorm_forward(lnf, mean, rstd, last, global_param("lnfw", {C}, false), global_param("lnfb", {C}, false));
  be_.matmul_forward(logits.view({N, Vp}), lnf, wte, Tensor());
  be_.classifier_forward_backward(losses, logits, tgt, cfg_.vocab_size, dloss);
  be_.copy_to_host(host_losses_.data(), losses.data, losses.bytes());
  Tensor dlnf = arena_.tensor("h.dlnf", act_dtype_, {N, C});
  be_.matmul_backward(dlnf, global_param("wte", {Vp, C}, true), Tensor(), logits.view({N, Vp}), lnf, wte,
                      gw);
  Tensor dres = arena_.tensor("dres", act_dtype_, {N, C});
  be_.zero(dres);
  be_.layernorm_backward(dres, global_param("lnfw", {C}, true), global_param("lnfb", {C}, true), dlnf,
                         last, global_param("lnfw", {C}, false), mean, rstd);

  for (int l = L - 1; l >= 0; --l) {
    arena_.set_phase(sch.block_bwd(l));
    Tensor res_in = l == 0 ? arena_.tensor("encoded", act_dtype_, {N, C}) : res3(l - 1);
    BlockTensors a;
    if (rc) {
      a = block_tensors(l, b, T, BlockMode::recompute_bwd);
      block_forward(l, a, res_in, Tensor());
    } else {
      a = block_tensors(l, b, T, BlockMode::saved);
    }
    block_backward(l, a, res_in, arena_.tensor("dres", act_dtype_, {N, C}), gw);
  }

  arena_.set_phase(sch.embed_bwd());
  be_.embedding_backward(global_param("wte", {Vp, C}, true), global_param("wpe", {cfg_.seq_len, C}, true),
                         arena_.tensor("dres", act_dtype_, {b, T, C}), arena_.tensor("tokens", DType::i32, {b, T}));
  double sum = 0;
  for (int64_t i = 0; i < N; ++i) sum += host_losses_[i];
  return sum;
}

void GPT2::forward_to_lnf(Tensor tok, int64_t b, Tensor* lnf_out) {
  const GPT2Schedule sch{cfg_.n_layer};
  const int64_t T = tok.dim(1), C = cfg_.n_embd, Vp = cfg_.padded_vocab_size(), N = b * T;
  Tensor res[2] = {arena_.tensor("e.res0", act_dtype_, {N, C}), arena_.tensor("e.res1", act_dtype_, {N, C})};
  be_.embedding_forward(res[0].view({b, T, C}), tok, global_param("wte", {Vp, C}, false),
                        global_param("wpe", {cfg_.seq_len, C}, false));
  for (int l = 0; l < cfg_.n_layer; ++l) {
    arena_.set_phase(sch.eval_block(l));
    // Sampling runs sequences shorter than the planned T: every view takes the real T.
    BlockTensors a = block_tensors(l, b, T, BlockMode::eval);
    block_forward(l, a, res[l % 2], res[(l + 1) % 2]);
  }
  arena_.set_phase(sch.eval_head());
  Tensor lnf = arena_.tensor("eh.lnf", act_dtype_, {N, C});
  be_.layernorm_forward(lnf, arena_.tensor("eh.lnf_mean", DType::f32, {N}),
                        arena_.tensor("eh.lnf_rstd", DType::f32, {N}), res[cfg_.n_layer % 2],
                        global_param("lnfw", {C}, false), global_param("lnfb", {C}, false));
  *lnf_out = lnf;
}

double GPT2::eval_loss(const int32_t* tokens, const int32_t* targets, int64_t b) {
  FT_CHECK(b >= 1 && b <= shape_.eval_batch, "eval batch ", b);
  const GPT2Schedule sch{cfg_.n_layer};
  const int64_t T = shape_.seq_len, C = cfg_.n_embd, Vp = cfg_.padded_vocab_size(), N = b * T;
  arena_.set_phase(sch.eval_embed());
  Tensor tok = arena_.tensor("e.tokens", DType::i32, {b, T});
  Tensor tgt = arena_.tensor("e.targets", DType::i32, {b, T});
  be_.copy_to_device(tok.data, tokens, tok.bytes());
  be_.copy_to_device(tgt.data, targets, tgt.bytes());
  Tensor lnf;
  forward_to_lnf(tok, b, &lnf);
  Tensor logits = arena_.tensor("eh.logits", act_dtype_, {b, T, Vp});
  Tensor losses = arena_.tensor("eh.losses", DType::f32, {b, T});
  be_.matmul_forward(logits.view({N, Vp}), lnf, global_param("wte", {Vp, C}, false), Tensor());
  be_.classifier_forward_backward(losses, logits, arena_.tensor("e.targets", DType::i32, {b, T}),
                                  cfg_.vocab_size, 0.0f);
  be_.copy_to_host(host_losses_.data(), losses.data, losses.bytes());
  double sum = 0;
  for (int64_t i = 0; i < N; ++i) sum += host_losses_[i];
  return sum;
}

void GPT2::next_token_logits(const int32_t* tokens, int64_t t, float* logits_out) {
  FT_CHECK(t >= 1 && t <= shape_.seq_len, "sequence length ", t);
  const GPT2Schedule sch{cfg_.n_layer};
  const int64_t C = cfg_.n_embd, Vp = cfg_.padded_vocab_size();
  arena_.set_phase(sch.eval_embed());
  Tensor tok = arena_.tensor("e.tokens", DType::i32, {1, t});
  be_.copy_to_device(tok.data, tokens, tok.bytes());
  Tensor lnf;
  forward_to_lnf(tok, 1, &lnf);
  // Only the last position's logits are needed: one row of the output projection.
  Tensor last_row(static_cast<char*>(lnf.data) + (t - 1) * C * dtype_size(act_dtype_), act_dtype_, {1, C});
  Tensor logits = arena_.tensor("eh.logits", act_dtype_, {1, Vp});
  be_.matmul_forward(logits, last_row, global_param("wte", {Vp, C}, false), Tensor());
  logits_rows_to_host(logits, 1, logits_out);
}

void GPT2::logits_rows_to_host(Tensor logits, int64_t rows, float* out) {
  // Rows are Vp wide on the device; only the first V columns are real.
  const int64_t V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size();
  const size_t es = dtype_size(act_dtype_);
  for (int64_t r = 0; r < rows; ++r)
    copy_to_host_f32(Tensor(static_cast<char*>(logits.data) + r * Vp * es, act_dtype_, {V}), out + r * V);
}

void GPT2::eval_logits(const int32_t* tokens, int64_t b, float* logits_out) {
  FT_CHECK(b >= 1 && b <= shape_.eval_batch, "eval batch ", b);
  const GPT2Schedule sch{cfg_.n_layer};
  const int64_t T = shape_.seq_len, C = cfg_.n_embd, Vp = cfg_.padded_vocab_size(), N = b * T;
  arena_.set_phase(sch.eval_embed());
  Tensor tok = arena_.tensor("e.tokens", DType::i32, {b, T});
  be_.copy_to_device(tok.data, tokens, tok.bytes());
  Tensor lnf;
  forward_to_lnf(tok, b, &lnf);
  Tensor logits = arena_.tensor("eh.logits", act_dtype_, {N, Vp});
  be_.matmul_forward(logits, lnf, global_param("wte", {Vp, C}, false), Tensor());
  be_.synchronize();
  logits_rows_to_host(logits, N, logits_out);
}

}  // namespace ft
