// GPT2Backbone's generation with a KV cache: the buffers (declare_generation), the prefill's
// last rows and the decode step (one token per row); the prefill itself (the evaluation
// forward storing keys and values) is beside forward_eval in gpt2_backbone.cpp.
// The schedule (gpt2_config.h) gives the decode steps their own phase between the evaluation
// blocks and the evaluation head: each layer's cache lives from its prefill block to the
// decode phase, so it shares bytes with training's activations and never with the head's
// logits.
#include <string>

#include "core/error.h"
#include "models/gpt2_backbone.h"

namespace ft {

void GPT2Backbone::declare_generation(BufferTable& t, const PlanShape& s, GPT2BackboneIds& ids) const {
  const int64_t G = s.eval_batch, T = cfg_.seq_len, C = cfg_.n_embd;
  const size_t a = dtype_size(activation_dtype(s.precision));
  const size_t cache = static_cast<size_t>(G * T * C) * a, gc = static_cast<size_t>(G * C) * a,
               g4 = static_cast<size_t>(G) * 4;
  const int gd = sch_.gen_decode();
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const std::string n = "kv" + std::to_string(l);
    ids.kcache.push_back(t.add(n + ".k", BufferClass::kv_cache, cache, sch_.eval_block(l), gd));
    ids.vcache.push_back(t.add(n + ".v", BufferClass::kv_cache, cache, sch_.eval_block(l), gd));
  }
  auto add = [&](const char* what, BufferClass cls, size_t bytes) { return t.add(std::string("gd.") + what, cls, bytes, gd, gd); };
  ids.g_tokens = add("tokens", BufferClass::inputs, g4);
  ids.g_pos = add("pos", BufferClass::inputs, g4);
  ids.g_lens = add("lens", BufferClass::inputs, g4);
  // the residual stream: a projection's output must not alias its residual input, hence three
  ids.g_res0 = add("res0", BufferClass::transient, gc);
  ids.g_res1 = add("res1", BufferClass::transient, gc);
  ids.g_res2 = add("res2", BufferClass::transient, gc);
  ids.g_ln = add("ln", BufferClass::transient, gc);
  ids.g_ln_mean = add("ln_mean", BufferClass::transient, g4);
  ids.g_ln_rstd = add("ln_rstd", BufferClass::transient, g4);
  ids.g_qkv = add("qkv", BufferClass::transient, 3 * gc);
  ids.g_atty = add("atty", BufferClass::transient, gc);
  ids.g_fch = add("fch", BufferClass::transient, 4 * gc);
  ids.g_fch_gelu = add("fch_gelu", BufferClass::transient, 4 * gc);
}

Tensor GPT2Backbone::eval_embed(const int32_t* tokens, int64_t b, int64_t t, Tensor* res, const int32_t* positions) {
  const int64_t C = cfg_.n_embd, Vp = cfg_.padded_vocab_size(), N = b * t;
  Arena& ar = *arena_;
  ar.set_phase(sch_.eval_embed());
  Tensor tok = ar.tensor(ids_->e_tokens, DType::i32, {b, t});
  be_->copy_to_device(tok.data, tokens, tok.bytes());
  Tensor pos = input_positions(ids_->e_positions, positions, b, t);
  res[0] = ar.tensor(ids_->e_res0, act_, {N, C});
  res[1] = ar.tensor(ids_->e_res1, act_, {N, C});
  need_embeddings();
  be_->embedding_forward(res[0].view({b, t, C}), tok, param(wte_, {Vp, C}, false),
                         param(wpe_, {cfg_.seq_len, C}, false), pos);
  return tok;
}

Tensor GPT2Backbone::prefill_last_rows(Tensor hidden, const std::vector<int64_t>& lens, int64_t t) {
  const int64_t b = static_cast<int64_t>(lens.size()), C = cfg_.n_embd;
  Arena& ar = *arena_;
  ar.set_phase(sch_.gen_decode());
  Tensor ln = ar.tensor(ids_->g_ln, act_, {b, C});
  Tensor mean = ar.tensor(ids_->g_ln_mean, DType::f32, {b}), rstd = ar.tensor(ids_->g_ln_rstd, DType::f32, {b});
  need_final_norm();
  const size_t row = static_cast<size_t>(C) * dtype_size(act_);
  // one layernorm per prompt, on its last real row (prompts were right-padded to t)
  for (int64_t i = 0; i < b; ++i) {
    FT_CHECK(lens[i] >= 1 && lens[i] <= t, "prompt ", i, " of length ", lens[i], " in a prefill of ", t);
    auto at = [&](const Tensor& x, int64_t r, size_t width) { return static_cast<char*>(x.data) + r * width; };
    be_->layernorm_forward(Tensor(at(ln, i, row), act_, {1, C}), Tensor(at(mean, i, 4), DType::f32, {1}),
                           Tensor(at(rstd, i, 4), DType::f32, {1}),
                           Tensor(at(hidden, i * t + lens[i] - 1, row), act_, {1, C}), param(lnfw_, {C}, false),
                           param(lnfb_, {C}, false));
  }
  return ln;
}

Tensor GPT2Backbone::decode_step(const int32_t* tokens, const int32_t* pos, int64_t b) {
  FT_CHECK(b >= 1 && b <= shape_.eval_batch, "decode step of ", b, " rows");
  const int64_t T = cfg_.seq_len, C = cfg_.n_embd, Vp = cfg_.padded_vocab_size();
  Arena& ar = *arena_;
  ar.set_phase(sch_.gen_decode());
  // positions, and each row's number of keys (its position + 1: the token it feeds now)
  std::vector<int32_t> lens(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    FT_CHECK(pos[i] >= 0 && pos[i] < T, "decode position ", pos[i], " of row ", i, " outside [0, ", T, ")");
    lens[i] = pos[i] + 1;
  }
  Tensor tok = ar.tensor(ids_->g_tokens, DType::i32, {b, 1});
  Tensor p = ar.tensor(ids_->g_pos, DType::i32, {b, 1});
  Tensor n = ar.tensor(ids_->g_lens, DType::i32, {b});
  be_->copy_to_device(tok.data, tokens, tok.bytes());
  be_->copy_to_device(p.data, pos, p.bytes());
  be_->copy_to_device(n.data, lens.data(), n.bytes());
  Tensor x = ar.tensor(ids_->g_res0, act_, {b, C}), y = ar.tensor(ids_->g_res1, act_, {b, C});
  Tensor res2 = ar.tensor(ids_->g_res2, act_, {b, C}), ln = ar.tensor(ids_->g_ln, act_, {b, C});
  Tensor mean = ar.tensor(ids_->g_ln_mean, DType::f32, {b}), rstd = ar.tensor(ids_->g_ln_rstd, DType::f32, {b});
  Tensor qkv = ar.tensor(ids_->g_qkv, act_, {b, 1, 3 * C}), atty = ar.tensor(ids_->g_atty, act_, {b, C});
  Tensor fch = ar.tensor(ids_->g_fch, act_, {b, 4 * C}), fch_gelu = ar.tensor(ids_->g_fch_gelu, act_, {b, 4 * C});
  need_embeddings();
  be_->embedding_forward(x.view({b, 1, C}), tok, param(wte_, {Vp, C}, false), param(wpe_, {T, C}, false), p);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    need_layer(l);
    auto w = [&](int e, std::initializer_list<int64_t> dims) { return layer_param(e, l, dims, false); };
    Tensor kc = ar.tensor(ids_->kcache[l], act_, {b, T, C}), vc = ar.tensor(ids_->vcache[l], act_, {b, T, C});
    be_->layernorm_forward(ln, mean, rstd, x, w(ln1w_, {C}), w(ln1b_, {C}));
    be_->matmul_forward(qkv.view({b, 3 * C}), ln, w(qkvw_, {3 * C, C}), w(qkvb_, {3 * C}));
    be_->kv_cache_store(kc, vc, qkv, p.view({b}));  // before attending: the row's own key is its last
    be_->attention_decode(atty, qkv.view({b, 3 * C}), kc, vc, n, cfg_.n_head);
    be_->matmul_residual_forward(res2, atty, w(attprojw_, {C, C}), w(attprojb_, {C}), x);
    be_->layernorm_forward(ln, mean, rstd, res2, w(ln2w_, {C}), w(ln2b_, {C}));
    be_->matmul_gelu_forward(fch, fch_gelu, ln, w(fcw_, {4 * C, C}), w(fcb_, {4 * C}));
    be_->matmul_residual_forward(y, fch_gelu, w(fcprojw_, {C, 4 * C}), w(fcprojb_, {C}), res2);
    std::swap(x, y);
  }
  need_final_norm();
  be_->layernorm_forward(ln, mean, rstd, x, param(lnfw_, {C}, false), param(lnfb_, {C}, false));
  return ln;
}

}  // namespace ft
