// DiT's computations: the embedding pass (noise, patches, positions, conditioning), the
// adaLN-Zero blocks, the final layer, and their backward passes. dit.cpp runs them phase by
// phase. Buffer conventions follow backend.h: activation gradients overwrite, except the
// LayerNorm backward's dinp, which accumulates into the residual stream's gradient dres.
#include <cmath>
#include <string>

#include "core/error.h"
#include "models/adaln.h"
#include "models/attention_bias.h"
#include "models/dit.h"

namespace ft {

namespace {

std::string block_buffer(int mode, int layer, const char* what) {
  switch (mode) {
    case 0: return "l" + std::to_string(layer) + "." + what;
    case 1: return std::string("rf.") + what;
    case 2: return std::string("rb.") + what;
    default: return "e" + std::to_string(layer) + "." + what;
  }
}

}  // namespace

void DiT::declare_block(BufferTable& t, const PlanShape& s, const Backend& be, Mode mode, int layer, int64_t b,
                        BufferClass cls, int first, int last, BlockIds& o) const {
  const int64_t T = cfg_.tokens(), D = cfg_.hidden, R = int64_t{cfg_.mlp_ratio} * D;
  const size_t a = dtype_size(activation_dtype(s.precision));
  const auto nd = static_cast<size_t>(b * T * D) * a, n4 = static_cast<size_t>(b * T) * 4;
  auto add = [&](const char* what, size_t bytes) {
    return t.add(block_buffer(static_cast<int>(mode), layer, what), cls, bytes, first, last);
  };
  o.mod = add("mod", static_cast<size_t>(6 * b * D) * a);
  o.ln1_mean = add("ln1_mean", n4);
  o.ln1_rstd = add("ln1_rstd", n4);
  o.m1 = add("m1", nd);
  o.qkv = add("qkv", 3 * nd);
  o.atty = add("atty", nd);
  o.att = add("att", be.attention_saved_bytes(OpShape::attention(b, T, cfg_.heads, D / cfg_.heads, false),
                                              s.precision));
  o.ao = add("attn_out", nd);
  o.mid = add("mid", nd);
  o.ln2_mean = add("ln2_mean", n4);
  o.ln2_rstd = add("ln2_rstd", n4);
  o.m2 = add("m2", nd);
  o.fch = add("fch", static_cast<size_t>(b * T * R) * a);
  o.fch_gelu = add("fch_gelu", static_cast<size_t>(b * T * R) * a);
  o.mo = add("mlp_out", nd);
}

DiT::Block DiT::block_tensors(const BlockIds& i, int64_t b) {
  const int64_t T = cfg_.tokens(), D = cfg_.hidden, N = b * T, R = int64_t{cfg_.mlp_ratio} * D;
  Arena& ar = *arena_;
  Block r;
  r.b = b;
  r.mod = ar.tensor(i.mod, act_, {6, b, D});
  r.ln1_mean = ar.tensor(i.ln1_mean, DType::f32, {N});
  r.ln1_rstd = ar.tensor(i.ln1_rstd, DType::f32, {N});
  r.m1 = ar.tensor(i.m1, act_, {N, D});
  r.qkv = ar.tensor(i.qkv, act_, {b, T, 3 * D});
  r.atty = ar.tensor(i.atty, act_, {b, T, D});
  // The saved attention state's layout is the backend's: a flat f32 view of its bytes.
  const size_t att = be_->attention_saved_bytes(OpShape::attention(b, T, cfg_.heads, D / cfg_.heads, false),
                                                shape_.precision);
  r.att = ar.tensor(i.att, DType::f32, {static_cast<int64_t>(att / 4)});
  r.ao = ar.tensor(i.ao, act_, {N, D});
  r.mid = ar.tensor(i.mid, act_, {N, D});
  r.ln2_mean = ar.tensor(i.ln2_mean, DType::f32, {N});
  r.ln2_rstd = ar.tensor(i.ln2_rstd, DType::f32, {N});
  r.m2 = ar.tensor(i.m2, act_, {N, D});
  r.fch = ar.tensor(i.fch, act_, {N, R});
  r.fch_gelu = ar.tensor(i.fch_gelu, act_, {N, R});
  r.mo = ar.tensor(i.mo, act_, {N, D});
  return r;
}

DiT::Embed DiT::embed_tensors(const EmbedIds& i, int64_t b) {
  const int64_t T = cfg_.tokens(), D = cfg_.hidden, H = cfg_.image;
  Arena& ar = *arena_;
  Embed e;
  e.b = b;
  e.image = ar.tensor(i.image, DType::f32, {b, cfg_.in_channels, H, H});
  if (i.eps != kNoBuffer) e.eps = ar.tensor(i.eps, DType::f32, {b, cfg_.in_channels, H, H});
  e.xt = ar.tensor(i.xt, DType::f32, {b, cfg_.in_channels, H, H});
  e.coef = ar.tensor(i.coef, DType::f32, {b, 3});
  e.keys = ar.tensor(i.keys, DType::i32, {b});
  e.t = ar.tensor(i.t, DType::f32, {b});
  e.xtok = ar.tensor(i.xtok, act_, {b, T, cfg_.patch_in()});
  if (cfg_.cond_channels > 0) {
    e.cond_map = ar.tensor(i.cond_map, DType::f32, {b, cfg_.cond_channels, H, H});
    e.ctok = ar.tensor(i.ctok, act_, {b, T, cfg_.patch_cond()});
  }
  e.tfreq = ar.tensor(i.tfreq, act_, {b, cfg_.freq_dim});
  e.t1 = ar.tensor(i.t1, act_, {b, D});
  e.t1s = ar.tensor(i.t1s, act_, {b, D});
  if (cfg_.cond_dim > 0) {
    e.cond_vec = ar.tensor(i.cond_vec, act_, {b, cfg_.cond_dim});
    e.ct = ar.tensor(i.ct, act_, {b, D});
    e.y1 = ar.tensor(i.y1, act_, {b, D});
    e.y1s = ar.tensor(i.y1s, act_, {b, D});
  }
  e.c = ar.tensor(i.c, act_, {b, D});
  e.sc = ar.tensor(i.sc, act_, {b, D});
  return e;
}

// ---- embedding ----------------------------------------------------------------------------------

void DiT::embed_forward(const Embed& e, Tensor res, const float* image, const float* cond, const int32_t* t,
                        const int32_t* keys, const float* x_t, int64_t b) {
  const int64_t T = cfg_.tokens(), D = cfg_.hidden, F = cfg_.freq_dim, p = cfg_.patch;
  report(std::initializer_list<int>{x_w_, x_b_, c_w_, t_w1_, t_b1_, t_w2_, t_b2_, y_w1_, y_b1_, y_w2_, y_b2_}, need_);
  std::vector<float> tf(static_cast<size_t>(b)), coef(static_cast<size_t>(3 * b));
  const std::vector<double>& ab = diffusion_alpha_bars();
  for (int64_t i = 0; i < b; ++i) {
    FT_USER_CHECK(t[i] >= 0 && t[i] < kDiffusionSteps, "DiT: sample ", i, " has timestep ", t[i], " outside [0, ",
                  kDiffusionSteps, ")");
    tf[static_cast<size_t>(i)] = static_cast<float>(t[i]);
    const double a = ab[static_cast<size_t>(t[i])];
    coef[static_cast<size_t>(3 * i)] = static_cast<float>(std::sqrt(a));
    coef[static_cast<size_t>(3 * i + 1)] = 0.0f;
    coef[static_cast<size_t>(3 * i + 2)] = static_cast<float>(std::sqrt(1.0 - a));
  }
  be_->copy_to_device(e.t.data, tf.data(), e.t.bytes());
  if (x_t) {
    be_->copy_to_device(e.xt.data, x_t, e.xt.bytes());  // the Denoiser's given noisy images
  } else {
    // q_sample on the device: x_t = sqrt(ab) x0 + sqrt(1 - ab) eps, eps kept as the target
    be_->copy_to_device(e.image.data, image, e.image.bytes());
    be_->copy_to_device(e.coef.data, coef.data(), e.coef.bytes());
    be_->copy_to_device(e.keys.data, keys, e.keys.bytes());
    be_->diffusion_mix(e.xt, e.eps, e.image, Tensor(), e.coef, e.keys, kDiTNoiseSeed);
  }
  // patch embedding: a Conv2d(kernel = stride = p) over [x_t, cond map] (the weight split by
  // input channel group, so no concatenated image is ever built) plus the position table, as
  // one pass that writes res once (Backend::patch_embed_forward)
  be_->patchify(e.xtok, e.xt, static_cast<int>(p));
  const bool cmap = cfg_.cond_channels > 0;
  if (cmap) {
    be_->copy_to_device(e.cond_map.data, cond, e.cond_map.bytes());
    be_->patchify(e.ctok, e.cond_map, static_cast<int>(p));
  }
  Tensor pos = arena_->tensor(ids_.pos, act_, {2, T * D});
  be_->patch_embed_forward(res, e.xtok, param(x_w_, {D, cfg_.patch_in()}, false), cmap ? e.ctok : Tensor(),
                           cmap ? param(c_w_, {D, cfg_.patch_cond()}, false) : Tensor(), param(x_b_, {D}, false),
                           pos.range(0, T * D).view({T, D}));
  // conditioning: c = MLP_t(freq(t)) [+ MLP_y(cond)], s = silu(c)
  be_->timestep_embedding(e.tfreq, e.t, 10000.0f);
  be_->matmul_forward(e.t1, e.tfreq, param(t_w1_, {D, F}, false), param(t_b1_, {D}, false));
  be_->silu_forward(e.t1s, e.t1);
  if (cfg_.cond_dim > 0) {
    const int64_t cd = cfg_.cond_dim;
    be_->matmul_forward(e.ct, e.t1s, param(t_w2_, {D, D}, false), param(t_b2_, {D}, false));
    upload(e.cond_vec, cond, b * cd);
    be_->matmul_forward(e.y1, e.cond_vec, param(y_w1_, {D, cd}, false), param(y_b1_, {D}, false));
    be_->silu_forward(e.y1s, e.y1);
    be_->matmul_residual_forward(e.c, e.y1s, param(y_w2_, {D, D}, false), param(y_b2_, {D}, false), e.ct);
  } else {
    be_->matmul_forward(e.c, e.t1s, param(t_w2_, {D, D}, false), param(t_b2_, {D}, false));
  }
  be_->silu_forward(e.sc, e.c);
}

void DiT::embed_backward(const EmbedIds& i, int64_t b, Tensor dres, Tensor dsc, GradWrite gw) {
  const int64_t T = cfg_.tokens(), D = cfg_.hidden, N = b * T, F = cfg_.freq_dim;
  Arena& ar = *arena_;
  // The position table is fixed: the tokens' gradient is the patch embedding's output gradient.
  const bool cmap = cfg_.cond_channels > 0;
  be_->patch_embed_backward(param(x_w_, {D, cfg_.patch_in()}, true),
                            cmap ? param(c_w_, {D, cfg_.patch_cond()}, true) : Tensor(), param(x_b_, {D}, true), dres,
                            ar.tensor(i.xtok, act_, {N, cfg_.patch_in()}),
                            cmap ? ar.tensor(i.ctok, act_, {N, cfg_.patch_cond()}) : Tensor(), gw);
  Tensor c = ar.tensor(i.c, act_, {b, D});
  be_->silu_backward(dsc, c, dsc);  // dsc now holds dc
  Tensor dt = ar.tensor(ids_.d_t1s, act_, {b, D});
  be_->matmul_backward(dt, param(t_w2_, {D, D}, true), param(t_b2_, {D}, true), dsc,
                       ar.tensor(i.t1s, act_, {b, D}), param(t_w2_, {D, D}, false), gw);
  be_->silu_backward(dt, ar.tensor(i.t1, act_, {b, D}), dt);
  be_->matmul_backward(Tensor(), param(t_w1_, {D, F}, true), param(t_b1_, {D}, true), dt,
                       ar.tensor(i.tfreq, act_, {b, F}), param(t_w1_, {D, F}, false), gw);
  if (cfg_.cond_dim > 0) {
    const int64_t cd = cfg_.cond_dim;
    Tensor dy = ar.tensor(ids_.d_y1s, act_, {b, D});
    be_->matmul_backward(dy, param(y_w2_, {D, D}, true), param(y_b2_, {D}, true), dsc,
                         ar.tensor(i.y1s, act_, {b, D}), param(y_w2_, {D, D}, false), gw);
    be_->silu_backward(dy, ar.tensor(i.y1, act_, {b, D}), dy);
    be_->matmul_backward(Tensor(), param(y_w1_, {D, cd}, true), param(y_b1_, {D}, true), dy,
                         ar.tensor(i.cond_vec, act_, {b, cd}), param(y_w1_, {D, cd}, false), gw);
  }
}

// ---- blocks ---------------------------------------------------------------------------------------

void DiT::block_forward(int l, const Block& a, Tensor sc, Tensor x_in, Tensor x_out, const Block* prev) {
  report_layer(l, need_);
  const int64_t T = cfg_.tokens(), D = cfg_.hidden, b = a.b, N = b * T, R = int64_t{cfg_.mlp_ratio} * D;
  auto p = [&](int e, std::initializer_list<int64_t> dims) { return layer_param(e, l, dims, false); };
  auto m = [&](int k) { return a.mod.range(k * b * D, b * D).view({b, D}); };  // shift1 scale1 gate1 shift2 ...
  auto btd = [&](Tensor t) { return t.view({b, T, D}); };
  adaln_forward(*be_, a.mod, sc, p(ada_w_, {6 * D, D}), p(ada_b_, {6 * D}), 6, a.fch);  // fch: written below
  // attention
  // LayerNorm (no affine) and modulate in one pass: only the statistics are kept (the
  // backward recomputes the normalized row), not the normalized tensor
  if (prev) {  // x_in = prev's mid + gate2 * mo, stored on the way into the norm
    FT_CHECK(prev->b == b, "DiT block ", l, ": prev at batch ", prev->b, ", this block at ", b);
    Tensor gate2 = prev->mod.range(5 * b * D, b * D).view({b, D});
    be_->gated_residual_norm_modulate_forward(btd(x_in), btd(a.m1), a.ln1_mean, a.ln1_rstd, btd(prev->mid),
                                              btd(prev->mo), gate2, WindowOrder{}, m(0), m(1), NormModulateOptions{});
  } else {
    be_->norm_modulate_forward(btd(a.m1), a.ln1_mean, a.ln1_rstd, btd(x_in), m(0), m(1), NormModulateOptions{});
  }
  be_->matmul_forward(a.qkv.view({N, 3 * D}), a.m1, p(qkv_w_, {3 * D, D}), p(qkv_b_, {3 * D}));
  AttentionOptions opt;
  opt.causal = false;
  be_->attention_forward(a.atty, a.att, a.qkv, cfg_.heads, opt);
  be_->matmul_forward(a.ao, a.atty.view({N, D}), p(proj_w_, {D, D}), p(proj_b_, {D}));
  // mid = x_in + gate1 * ao, straight into the MLP's LayerNorm + modulate (one pass on CUDA)
  be_->gated_residual_norm_modulate_forward(btd(a.mid), btd(a.m2), a.ln2_mean, a.ln2_rstd, btd(x_in), btd(a.ao),
                                            m(2), WindowOrder{}, m(3), m(4), NormModulateOptions{});
  // MLP
  be_->matmul_gelu_forward(a.fch, a.fch_gelu, a.m2, p(fc1_w_, {R, D}), p(fc1_b_, {R}));
  be_->matmul_forward(a.mo, a.fch_gelu, p(fc2_w_, {D, R}), p(fc2_b_, {D}));
  if (x_out.empty()) return;  // a recompute needs nothing past this point, nor a block the next one ends
  be_->gated_residual_forward(btd(x_out), btd(a.mid), btd(a.mo), m(5));
}

void DiT::block_backward(int l, const Block& a, Tensor sc, Tensor x_in, Tensor dres, Tensor dsc, GradWrite gw,
                         const Block* prev) {
  const int64_t T = cfg_.tokens(), D = cfg_.hidden, b = a.b, N = b * T, R = int64_t{cfg_.mlp_ratio} * D;
  auto p = [&](int e, std::initializer_list<int64_t> dims) { return layer_param(e, l, dims, false); };
  auto g = [&](int e, std::initializer_list<int64_t> dims) { return layer_param(e, l, dims, true); };
  const size_t ls = static_cast<size_t>(l);
  Arena& ar = *arena_;
  Tensor da = ar.tensor(ids_.d_a[ls], act_, {N, D});
  Tensor db = ar.tensor(ids_.d_b[ls], act_, {N, D});
  Tensor d3 = ar.tensor(ids_.d3[ls], act_, {b, T, 3 * D});
  Tensor d4 = ar.tensor(ids_.d4[ls], act_, {N, R});
  Tensor dmod = ar.tensor(ids_.dmod[ls], act_, {6, b, D});
  Tensor tmp = ar.tensor(ids_.dtmp[ls], act_, {b, D});
  auto m = [&](int k) { return a.mod.range(k * b * D, b * D).view({b, D}); };
  auto dm = [&](int k) { return dmod.range(k * b * D, b * D).view({b, D}); };
  auto btd = [&](Tensor t) { return t.view({b, T, D}); };
  // x_out = mid + gate2 * mo: dres stays the gradient of mid's direct path. The gated
  // residuals' backward passes also sum the bias gradients of fc2 and proj (the products that
  // wrote mo and ao), which saves those products' passes over da. Ended by the next block:
  // d(mo) is in a.mo.
  Tensor dmo = da;
  if (ended_by_next(l, shape_.recompute)) dmo = a.mo;
  else be_->gated_residual_backward(btd(da), dm(5), btd(dres), btd(a.mo), m(5), WindowOrder{}, g(fc2_b_, {D}), gw);
  const bool fc1b_done = be_->matmul_backward_gelu(d4, g(fc2_w_, {D, R}), Tensor(), dmo, a.fch_gelu,
                                                   p(fc2_w_, {D, R}), a.fch, gw, g(fc1_b_, {R}));
  be_->matmul_backward(da, g(fc1_w_, {R, D}), fc1b_done ? Tensor() : g(fc1_b_, {R}), d4, a.m2, p(fc1_w_, {R, D}),
                       gw);
  // dres += d(mid) through the MLP's norm + modulate; mid = x_in + gate1 * ao: db = d(ao) (db,
  // not da: a fused backward still reads da there)
  ResidualNormGrads mg;
  mg.dr = btd(dres), mg.dshift = dm(3), mg.dscale = dm(4), mg.dout = btd(da), mg.r = btd(a.mid);
  mg.mean = a.ln2_mean, mg.rstd = a.ln2_rstd, mg.scale = m(4);
  mg.dy = btd(db), mg.dgate = dm(2), mg.y = btd(a.ao), mg.gate = m(2), mg.dbias_y = g(proj_b_, {D}), mg.gw = gw;
  be_->norm_modulate_gated_residual_backward(mg);
  be_->matmul_backward(da, g(proj_w_, {D, D}), Tensor(), db, a.atty.view({N, D}), p(proj_w_, {D, D}), gw);
  AttentionOptions opt;
  opt.causal = false;
  be_->attention_backward(d3, btd(da), a.qkv, a.atty, a.att, cfg_.heads, opt);
  be_->matmul_backward(db, g(qkv_w_, {3 * D, D}), Tensor(), d3.view({N, 3 * D}), a.m1, p(qkv_w_, {3 * D, D}), gw);
  // the bias from a third of d(qkv) and proj's bias gradient (models/attention_bias.h)
  qkv_bias_backward(*be_, g(qkv_b_, {3 * D}), d3, g(proj_b_, {D}), p(proj_w_, {D, D}), gw);
  if (prev) {  // x_in = prev.mid + gate2 * prev.mo: that backward in the same pass, d(mo) over prev.mo
    FT_CHECK(prev->b == b, "DiT block ", l, ": prev at batch ", prev->b, ", this block at ", b);
    Tensor pdmod = ar.tensor(ids_.dmod[ls - 1], act_, {6, b, D});
    ResidualNormGrads eg;
    eg.dr = btd(dres), eg.dshift = dm(0), eg.dscale = dm(1), eg.dout = btd(db), eg.r = btd(x_in);
    eg.mean = a.ln1_mean, eg.rstd = a.ln1_rstd, eg.scale = m(1);
    eg.dy = btd(prev->mo), eg.dgate = pdmod.range(5 * b * D, b * D).view({b, D}), eg.y = btd(prev->mo);
    eg.gate = prev->mod.range(5 * b * D, b * D).view({b, D});
    eg.dbias_y = layer_param(fc2_b_, l - 1, {D}, true), eg.gw = gw;
    be_->norm_modulate_gated_residual_backward(eg);
  } else {
    be_->norm_modulate_backward(btd(dres), dm(0), dm(1), btd(db), btd(x_in), a.ln1_mean, a.ln1_rstd, m(1),
                                NormModulateOptions{});  // dres += d(x_in)
  }
  adaln_backward(*be_, dsc, tmp, dmod, sc, p(ada_w_, {6 * D, D}), g(ada_w_, {6 * D, D}), g(ada_b_, {6 * D}), 6, d4,
                 gw);  // d4: free since the MLP's backward
}

// ---- final layer ------------------------------------------------------------------------------------

FinalLayerBuffers DiT::final_buffers(const HeadIds& h, int64_t b) {
  const int64_t T = cfg_.tokens(), D = cfg_.hidden, N = b * T, Fo = cfg_.patch_in();
  Arena& ar = *arena_;
  FinalLayerBuffers f;
  f.fmod = ar.tensor(h.fmod, act_, {2, b, D});
  f.mean = ar.tensor(h.lnf_mean, DType::f32, {N});
  f.rstd = ar.tensor(h.lnf_rstd, DType::f32, {N});
  f.mf = ar.tensor(h.mf, act_, {N, D});
  f.otok = ar.tensor(h.otok, act_, {b, T, Fo});
  if (h.dfmod != kNoBuffer) {
    f.dfmod = ar.tensor(h.dfmod, act_, {2, b, D});
    f.dotok = ar.tensor(h.dotok, act_, {b, T, Fo});
    f.dmf = ar.tensor(h.dmf, act_, {N, D});
    f.tmp = ar.tensor(h.tmp, act_, {b, D});
  }
  return f;
}

FinalLayerParams DiT::final_params(bool grad) const {
  const int64_t D = cfg_.hidden, Fo = cfg_.patch_in();
  return {param(f_ada_w_, {2 * D, D}, grad), param(f_ada_b_, {2 * D}, grad), param(out_w_, {Fo, D}, grad),
          param(out_b_, {Fo}, grad)};
}

Tensor DiT::head_forward(const HeadIds& h, Tensor sc, Tensor x, int64_t b) {
  report(std::initializer_list<int>{f_ada_w_, f_ada_b_, out_w_, out_b_}, need_);
  Tensor pred = arena_->tensor(h.pred, act_, {b, cfg_.in_channels, cfg_.image, cfg_.image});
  final_layer_forward(*be_, final_buffers(h, b), final_params(false), sc, x, pred, NormKind::layer, cfg_.patch);
  return pred;
}

void DiT::head_backward(const HeadIds& h, Tensor sc, Tensor x, Tensor dpred, Tensor dres, Tensor dsc, int64_t b,
                        GradWrite gw) {
  final_layer_backward(*be_, final_buffers(h, b), final_params(false), final_params(true), sc, x,
                       dpred.view({b, cfg_.in_channels, cfg_.image, cfg_.image}), dres, dsc, NormKind::layer,
                       cfg_.patch, gw);
}

}  // namespace ft
