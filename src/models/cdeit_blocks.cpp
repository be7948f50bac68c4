// CDEIT's computations: the embedding pass (noise, patches of x_t and the condition map,
// positions, timestep), the blocks (adaLN-Zero, RMSNorm, window or global attention, SiLU
// MLP), the transitions between stages (patch merging down; 1x1 convolution, nearest
// upsampling and skip fusion up), the final layer, and their backward passes. cdeit.cpp runs
// them phase by phase. Activation gradients overwrite, except the RMSNorm backward's dinp,
// which accumulates into the run's residual-stream gradient dres (backend.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/error.h"
#include "models/adaln.h"
#include "models/attention_bias.h"
#include "models/cdeit.h"

namespace ft {

namespace {

// CDEIT's RMSNorm + modulate, in token order...
NormModulateOptions rms_tokens() {
  NormModulateOptions o;
  o.norm = NormKind::rms;
  return o;
}
// The block's window order (token order for global attention): the attention input is
// written in it, and the projection's output stays in it, the gated residual reading it (and
// writing its gradient) there, in place of window_partition / window_reverse.
WindowOrder window_order(const CDEITBlock& k) {
  WindowOrder o;
  if (!k.windowed()) return o;
  o.grid_h = o.grid_w = static_cast<int>(k.grid);
  o.window = static_cast<int>(k.window);
  o.shift = static_cast<int>(k.shift);
  return o;
}
// ...RMSNorm + modulate written in that order (attention input of a windowed block).
NormModulateOptions window_layout(const CDEITBlock& k) {
  NormModulateOptions o = rms_tokens();
  o.out_order = window_order(k);
  return o;
}

}  // namespace

std::vector<std::vector<bool>> CDEIT::keep_levels(const std::vector<CDEITBlock>& blocks) {
  std::map<int64_t, std::vector<size_t>, std::greater<>> by_size;  // [N, H] a sample -> its blocks
  for (size_t k = 0; k < blocks.size(); ++k) by_size[blocks[k].grid * blocks[k].grid * blocks[k].hidden_mlp].push_back(k);
  struct Way {
    size_t blocks = 0;
    std::vector<size_t> counts;  // kept blocks of each size, in by_size's order
  };
  std::map<int64_t, Way> ways{{0, Way{}}};  // every total [N, H] the sizes so far make
  for (const auto& [size, members] : by_size) {
    std::map<int64_t, Way> next;
    for (const auto& [total, way] : ways)
      for (size_t c = 0; c <= members.size(); ++c) {
        Way w = way;
        w.blocks += c;
        w.counts.push_back(c);
        auto [at, fresh] = next.emplace(total + static_cast<int64_t>(c) * size, w);
        if (!fresh && w.blocks > at->second.blocks) at->second = std::move(w);
      }
    ways = std::move(next);
  }
  std::vector<std::vector<bool>> levels;
  for (const auto& [total, way] : ways) {
    std::vector<bool> kept(blocks.size(), false);
    size_t i = 0;
    for (const auto& [size, members] : by_size) {
      for (size_t m = 0; m < way.counts[i]; ++m) kept[members[members.size() - 1 - m]] = true;  // the last first
      ++i;
    }
    levels.push_back(std::move(kept));
  }
  return levels;
}

const std::vector<bool>& CDEIT::keep_set(int level) const {
  FT_CHECK(level >= 0 && level <= max_keep_level(), "CDEIT: keep level ", level, " outside [0, ", max_keep_level(), "]");
  return keep_levels_[static_cast<size_t>(level)];
}

bool CDEIT::kept_silu(int k, const PlanShape& s) const {
  return s.training && s.recompute == Recompute::none && keep_set(s.keep_level)[static_cast<size_t>(k)];
}

int CDEIT::kept_blocks(int level) const {
  const std::vector<bool>& kept = keep_set(level);
  return static_cast<int>(std::count(kept.begin(), kept.end(), true));
}

CDEIT::Block CDEIT::block_tensors(const BlockIds& i, const CDEITBlock& k, int64_t b, bool forward, bool silu_kept) {
  const int64_t W = k.width, N = b * k.grid * k.grid, H = k.hidden_mlp;
  const int64_t nw = (k.grid / k.window) * (k.grid / k.window), ww = k.window * k.window;
  Arena& ar = *arena_;
  Block r;
  r.b = b;
  r.mod = ar.tensor(i.mod, act_, {6, b, W});
  r.rstd1 = ar.tensor(i.rstd1, DType::f32, {N});
  r.m1w = ar.tensor(i.m1w, act_, {N, W});
  r.qkv = ar.tensor(i.qkv, act_, {b * nw, ww, 3 * W});
  r.atty = ar.tensor(i.atty, act_, {b * nw, ww, W});
  const size_t att = be_->attention_saved_bytes(
      OpShape::attention(b * nw, ww, cfg_.heads, W / cfg_.heads, false), shape_.precision);
  r.att = ar.tensor(i.att, DType::f32, {static_cast<int64_t>(att / 4)});
  r.ao = ar.tensor(i.ao, act_, {N, W});  // in window order when windowed
  r.mid = ar.tensor(i.mid, act_, {N, W});
  r.rstd2 = ar.tensor(i.rstd2, DType::f32, {N});
  r.m2 = ar.tensor(i.m2, act_, {N, W});
  r.fch = ar.tensor(i.fch, act_, {N, H});
  // forward scratch (declare_block), or kept for the backward
  r.fchs = forward || silu_kept ? ar.tensor(i.fchs, act_, {N, H}) : Tensor();
  r.silu_kept = silu_kept;
  r.mo = ar.tensor(i.mo, act_, {N, W});
  return r;
}

// ---- embedding -----------------------------------------------------------------------------------

void CDEIT::embed_forward(const EmbedIds& ids, Tensor res, const float* image, const float* cond, const int32_t* t,
                          const int32_t* keys, const float* x_t, int64_t b) {
  const int64_t T = cfg_.tokens(), D = cfg_.hidden(), W0 = cfg_.widths[0], F = cfg_.freq_dim;
  const int64_t H = cfg_.image, p = cfg_.patch;
  report(embed_entries_, need_);
  Arena& ar = *arena_;
  Tensor e_t = ar.tensor(ids.t, DType::f32, {b});
  Tensor xt = ar.tensor(ids.xt, DType::f32, {b, cfg_.in_channels, H, H});
  Tensor xtok = ar.tensor(ids.xtok, act_, {b, T, cfg_.patch_in()});
  std::vector<float> tf(static_cast<size_t>(b)), coef(static_cast<size_t>(3 * b));
  const std::vector<double>& ab = diffusion_alpha_bars();
  for (int64_t i = 0; i < b; ++i) {
    FT_USER_CHECK(t[i] >= 0 && t[i] < kDiffusionSteps, "CDEIT: sample ", i, " has timestep ", t[i], " outside [0, ",
                  kDiffusionSteps, ")");
    tf[static_cast<size_t>(i)] = static_cast<float>(t[i]);
    const double a = ab[static_cast<size_t>(t[i])];
    coef[static_cast<size_t>(3 * i)] = static_cast<float>(std::sqrt(a));
    coef[static_cast<size_t>(3 * i + 1)] = 0.0f;
    coef[static_cast<size_t>(3 * i + 2)] = static_cast<float>(std::sqrt(1.0 - a));
  }
  // The large inputs first: training's image and condition map on the upload stream, which
  // runs beside the last step's update (the compute stream waits for them before their first
  // reader), else on the compute stream
  const bool ahead = uploads_ && &ids == &ids_.emb && !x_t;
  auto input = [&](Tensor dst, const float* src) {
    if (ahead) uploads_->copy(dst.data, src, dst.bytes());
    else be_->copy_to_device(dst.data, src, dst.bytes());
  };
  Tensor img = x_t ? Tensor() : ar.tensor(ids.image, DType::f32, {b, cfg_.in_channels, H, H});
  Tensor cmap = cfg_.cond_channels > 0 ? ar.tensor(ids.cond_map, DType::f32, {b, cfg_.cond_channels, H, H}) : Tensor();
  if (!img.empty()) input(img, image);
  if (!cmap.empty()) input(cmap, cond);
  be_->copy_to_device(e_t.data, tf.data(), e_t.bytes());
  if (x_t) {
    be_->copy_to_device(xt.data, x_t, xt.bytes());  // the Denoiser's given noisy images
  } else {
    Tensor cf = ar.tensor(ids.coef, DType::f32, {b, 3});
    Tensor ks = ar.tensor(ids.keys, DType::i32, {b});
    Tensor eps = ids.eps != kNoBuffer ? ar.tensor(ids.eps, DType::f32, {b, cfg_.in_channels, H, H}) : Tensor();
    be_->copy_to_device(cf.data, coef.data(), cf.bytes());
    be_->copy_to_device(ks.data, keys, ks.bytes());
    if (ahead) uploads_->finish();
    be_->diffusion_mix(xt, eps, img, Tensor(), cf, ks, kDiTNoiseSeed);
  }
  // patch embedding of [x_t, cond map] (one Conv2d, its weight split by channel group) plus
  // the fixed position table, as one pass that writes res once (Backend::patch_embed_forward)
  be_->patchify(xtok, xt, static_cast<int>(p));
  Tensor ctok;
  if (!cmap.empty()) {
    ctok = ar.tensor(ids.ctok, act_, {b, T, cfg_.patch_cond()});
    be_->patchify(ctok, cmap, static_cast<int>(p));
  }
  Tensor pos = ar.tensor(ids_.pos, act_, {2, T * W0});
  be_->patch_embed_forward(res, xtok, param(x_w_, {W0, cfg_.patch_in()}, false), ctok,
                           ctok.empty() ? Tensor() : param(c_w_, {W0, cfg_.patch_cond()}, false),
                           param(x_b_, {W0}, false), pos.range(0, T * W0).view({T, W0}));
  // c = MLP_t(freq(t)), s = silu(c): the timestep only (the condition entered as a channel)
  Tensor tfreq = ar.tensor(ids.tfreq, act_, {b, F}), t1 = ar.tensor(ids.t1, act_, {b, D});
  Tensor t1s = ar.tensor(ids.t1s, act_, {b, D}), c = ar.tensor(ids.c, act_, {b, D});
  be_->timestep_embedding(tfreq, e_t, 10000.0f);
  be_->matmul_forward(t1, tfreq, param(t_w1_, {D, F}, false), param(t_b1_, {D}, false));
  be_->silu_forward(t1s, t1);
  be_->matmul_forward(c, t1s, param(t_w2_, {D, D}, false), param(t_b2_, {D}, false));
  be_->silu_forward(ar.tensor(ids.sc, act_, {b, D}), c);
}

void CDEIT::embed_backward(const EmbedIds& i, int64_t b, Tensor dres, Tensor dsc, GradWrite gw) {
  const int64_t T = cfg_.tokens(), D = cfg_.hidden(), W0 = cfg_.widths[0], F = cfg_.freq_dim;
  Arena& ar = *arena_;
  const bool cond = cfg_.cond_channels > 0;
  be_->patch_embed_backward(param(x_w_, {W0, cfg_.patch_in()}, true),
                            cond ? param(c_w_, {W0, cfg_.patch_cond()}, true) : Tensor(), param(x_b_, {W0}, true), dres,
                            ar.tensor(i.xtok, act_, {b, T, cfg_.patch_in()}),
                            cond ? ar.tensor(i.ctok, act_, {b, T, cfg_.patch_cond()}) : Tensor(), gw);
  be_->silu_backward(dsc, ar.tensor(i.c, act_, {b, D}), dsc);  // dsc now holds dc
  Tensor dt = ar.tensor(ids_.d_t1s, act_, {b, D});
  be_->matmul_backward(dt, param(t_w2_, {D, D}, true), param(t_b2_, {D}, true), dsc, ar.tensor(i.t1s, act_, {b, D}),
                       param(t_w2_, {D, D}, false), gw);
  be_->silu_backward(dt, ar.tensor(i.t1, act_, {b, D}), dt);
  be_->matmul_backward(Tensor(), param(t_w1_, {D, F}, true), param(t_b1_, {D}, true), dt,
                       ar.tensor(i.tfreq, act_, {b, F}), param(t_w1_, {D, F}, false), gw);
}

// ---- blocks -----------------------------------------------------------------------------------------------

void CDEIT::block_forward(int k, const Block& a, Tensor sc, Tensor x_in, Tensor x_out, const Block* prev) {
  report_block(k, need_);
  const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
  const RunParams& P = runs_[static_cast<size_t>(blk.run)];
  const int l = blk.index;
  const int64_t D = cfg_.hidden(), W = blk.width, H = blk.hidden_mlp, b = a.b, T = blk.grid * blk.grid, N = b * T;
  auto p = [&](int e, std::initializer_list<int64_t> dims) { return layer_param(e, l, dims, false); };
  auto m = [&](int j) { return a.mod.range(j * b * W, b * W).view({b, W}); };
  auto btw = [&](Tensor t) { return t.view({b, T, W}); };
  adaln_forward(*be_, a.mod, sc, p(P.ada_w, {6 * W, D}), p(P.ada_b, {6 * W}), 6, a.fch);  // fch: written below
  // attention (in windows: the modulated tokens partitioned, the projection's output reversed)
  // RMSNorm, modulate and (windowed) the window partition in one pass; only rstd is kept
  const NormModulateOptions in_windows = window_layout(blk);
  if (prev) {  // x_in = prev's mid + gate2 * mo (token order), stored on the way into the norm
    FT_CHECK(prev->b == b && prev->mod.numel() == a.mod.numel(), "CDEIT block ", k, ": prev is not of this run");
    Tensor gate2 = prev->mod.range(5 * b * W, b * W).view({b, W});
    be_->gated_residual_norm_modulate_forward(btw(x_in), btw(a.m1w), Tensor(), a.rstd1, btw(prev->mid),
                                              btw(prev->mo), gate2, WindowOrder{}, m(0), m(1), in_windows);
  } else {
    be_->norm_modulate_forward(btw(a.m1w), Tensor(), a.rstd1, btw(x_in), m(0), m(1), in_windows);
  }
  be_->matmul_forward(a.qkv.view({N, 3 * W}), a.m1w, p(P.qkv_w, {3 * W, W}), p(P.qkv_b, {3 * W}));
  AttentionOptions opt;
  opt.causal = false;
  be_->attention_forward(a.atty, a.att, a.qkv, cfg_.heads, opt);
  be_->matmul_forward(a.ao, a.atty.view({N, W}), p(P.proj_w, {W, W}), p(P.proj_b, {W}));
  // mid = x_in + gate1 * ao, straight into the MLP's RMSNorm + modulate (one pass on CUDA)
  be_->gated_residual_norm_modulate_forward(btw(a.mid), btw(a.m2), Tensor(), a.rstd2, btw(x_in), btw(a.ao), m(2),
                                            window_order(blk), m(3), m(4), rms_tokens());
  // SiLU MLP
  be_->matmul_forward(a.fch, a.m2, p(P.fc1_w, {H, W}), p(P.fc1_b, {H}));
  // mo = silu(fch) fc2ᵀ + b: on CUDA the SiLU may ride in the product (fchs is then untouched),
  // unless the backward reads silu(fch) from fchs
  if (a.silu_kept) {
    be_->silu_forward(a.fchs, a.fch);
    be_->matmul_forward(a.mo, a.fchs, p(P.fc2_w, {W, H}), p(P.fc2_b, {W}));
  } else {
    be_->silu_matmul_forward(a.mo, a.fch, p(P.fc2_w, {W, H}), p(P.fc2_b, {W}), a.fchs);
  }
  if (x_out.empty()) return;  // a recompute needs nothing past this point, nor a block the next one ends
  be_->gated_residual_forward(btw(x_out), btw(a.mid), btw(a.mo), m(5));
}

void CDEIT::block_backward(int k, const Block& a, Tensor sc, Tensor x_in, Tensor dres, Tensor dsc, GradWrite gw,
                           const Block* prev) {
  const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
  const RunParams& P = runs_[static_cast<size_t>(blk.run)];
  const int l = blk.index;
  const int64_t D = cfg_.hidden(), W = blk.width, H = blk.hidden_mlp, b = a.b, T = blk.grid * blk.grid, N = b * T;
  const int64_t nw = (blk.grid / blk.window) * (blk.grid / blk.window), ww = blk.window * blk.window;
  auto p = [&](int e, std::initializer_list<int64_t> dims) { return layer_param(e, l, dims, false); };
  auto g = [&](int e, std::initializer_list<int64_t> dims) { return layer_param(e, l, dims, true); };
  const size_t ks = static_cast<size_t>(k);
  Arena& ar = *arena_;
  Tensor da = ar.tensor(ids_.d_a[ks], act_, {N, W});
  Tensor db = ar.tensor(ids_.d_b[ks], act_, {N, W});
  Tensor d3 = ar.tensor(ids_.d3[ks], act_, {b * nw, ww, 3 * W});
  // a kept block's d(silu out) and d(fch) go to its silu(fch) once fc2's weight gradient has
  // read it (below): no d4 of its own is planned (CDEIT::keep_levels)
  Tensor d4 = a.silu_kept ? a.fchs : ar.tensor(ids_.d4[ks], act_, {N, H});
  Tensor dmod = ar.tensor(ids_.dmod[ks], act_, {6, b, W});
  Tensor tmp = ar.tensor(ids_.dtmp[ks], act_, {b, D});
  auto m = [&](int j) { return a.mod.range(j * b * W, b * W).view({b, W}); };
  auto dm = [&](int j) { return dmod.range(j * b * W, b * W).view({b, W}); };
  auto btw = [&](Tensor t) { return t.view({b, T, W}); };
  // x_out = mid + gate2 * mo. The element-wise backward passes also sum the bias gradients of
  // the products that wrote their inputs (fc2's here, fc1's and proj's below), which saves
  // those products' own passes over the gradients. Ended by the next block: d(mo) is in a.mo.
  Tensor dmo = da;
  if (ended_by_next(k, shape_.recompute)) dmo = a.mo;
  else be_->gated_residual_backward(btw(da), dm(5), btw(dres), btw(a.mo), m(5), WindowOrder{}, g(P.fc2_b, {W}), gw);
  // mo = fc2(silu(fch)). Not kept: d(silu out) first, then one pass turns it into d(fch) and
  // fch into silu(fch), which the weight's product then reads. Kept: the weight's product
  // first, over the forward's silu(fch), whose bytes then take d(silu out) and, by the same
  // pass without the write of silu(fch), d(fch) (d4 is the kept buffer).
  if (a.silu_kept) {
    be_->matmul_backward(Tensor(), g(P.fc2_w, {W, H}), Tensor(), dmo, a.fchs, p(P.fc2_w, {W, H}), gw);
    be_->matmul_backward(d4, Tensor(), Tensor(), dmo, a.fch, p(P.fc2_w, {W, H}), gw);
    be_->silu_backward_recompute(d4, Tensor(), a.fch, d4, g(P.fc1_b, {H}), gw);
  } else {
    be_->matmul_backward(d4, Tensor(), Tensor(), dmo, a.fch, p(P.fc2_w, {W, H}), gw);
    be_->silu_backward_recompute(d4, a.fch, a.fch, d4, g(P.fc1_b, {H}), gw);
    be_->matmul_backward(Tensor(), g(P.fc2_w, {W, H}), Tensor(), dmo, a.fch, p(P.fc2_w, {W, H}), gw);
  }
  be_->matmul_backward(da, g(P.fc1_w, {H, W}), Tensor(), d4, a.m2, p(P.fc1_w, {H, W}), gw);
  // dres += d(mid) through the MLP's RMSNorm + modulate; mid = x_in + gate1 * ao (ao in window
  // order): db = d(ao) in that order (db, not da: a fused backward still reads da there)
  ResidualNormGrads mg;
  mg.dr = btw(dres), mg.dshift = dm(3), mg.dscale = dm(4), mg.dout = btw(da), mg.r = btw(a.mid);
  mg.rstd = a.rstd2, mg.scale = m(4), mg.o = rms_tokens();
  mg.dy = btw(db), mg.dgate = dm(2), mg.y = btw(a.ao), mg.gate = m(2), mg.y_order = window_order(blk);
  mg.dbias_y = g(P.proj_b, {W}), mg.gw = gw;
  be_->norm_modulate_gated_residual_backward(mg);
  be_->matmul_backward(da, g(P.proj_w, {W, W}), Tensor(), db, a.atty.view({N, W}), p(P.proj_w, {W, W}), gw);
  AttentionOptions opt;
  opt.causal = false;
  be_->attention_backward(d3, da.view({b * nw, ww, W}), a.qkv, a.atty, a.att, cfg_.heads, opt);
  Tensor dm1w = db;  // free again (window order when windowed)
  be_->matmul_backward(dm1w, g(P.qkv_w, {3 * W, W}), Tensor(), d3.view({N, 3 * W}), a.m1w, p(P.qkv_w, {3 * W, W}), gw);
  // the bias from a third of d(qkv) and proj's bias gradient (models/attention_bias.h)
  qkv_bias_backward(*be_, g(P.qkv_b, {3 * W}), d3, g(P.proj_b, {W}), p(P.proj_w, {W, W}), gw);
  // from window order straight back to the tokens' gradient: dres += d(x_in)
  if (prev) {  // x_in = prev.mid + gate2 * prev.mo: that backward in the same pass, d(mo) over prev.mo
    const CDEITBlock& pb = blocks_[static_cast<size_t>(k - 1)];
    FT_CHECK(pb.run == blk.run && prev->b == b, "CDEIT block ", k, ": prev is not of this run");
    Tensor pdmod = ar.tensor(ids_.dmod[ks - 1], act_, {6, b, W});
    ResidualNormGrads eg;
    eg.dr = btw(dres), eg.dshift = dm(0), eg.dscale = dm(1), eg.dout = btw(dm1w), eg.r = btw(x_in);
    eg.rstd = a.rstd1, eg.scale = m(1), eg.o = window_layout(blk);
    eg.dy = btw(prev->mo), eg.dgate = pdmod.range(5 * b * W, b * W).view({b, W}), eg.y = btw(prev->mo);
    eg.gate = prev->mod.range(5 * b * W, b * W).view({b, W});
    eg.dbias_y = layer_param(P.fc2_b, pb.index, {W}, true), eg.gw = gw;
    be_->norm_modulate_gated_residual_backward(eg);
  } else {
    be_->norm_modulate_backward(btw(dres), dm(0), dm(1), btw(dm1w), btw(x_in), Tensor(), a.rstd1, m(1),
                                window_layout(blk));
  }
  // d4: free since the MLP's backward
  adaln_backward(*be_, dsc, tmp, dmod, sc, p(P.ada_w, {6 * W, D}), g(P.ada_w, {6 * W, D}), g(P.ada_b, {6 * W}), 6, d4,
                 gw);
}

// ---- transitions between stages ---------------------------------------------------------------------

void CDEIT::trans_forward(int r, const TransIds& ids, Tensor prev, Tensor skip, Tensor out, int64_t b) {
  const RunParams& P = runs_[static_cast<size_t>(r)];
  report(P.trans_entries(), need_);
  const CDEITBlock& blk = blocks_[static_cast<size_t>(first_block(r))];
  const int64_t G = blk.grid, W = blk.width, N = b * G * G;
  Arena& ar = *arena_;
  if (!blk.up) {  // patch merging: [b, (2G)^2, Wp] -> [b, G^2, 4 Wp] -> linear to W
    const int64_t Wp = cfg_.widths[static_cast<size_t>(blk.stage - 1)], Gp = 2 * G;
    Tensor merged = ar.tensor(ids.merged, act_, {b, G * G, 4 * Wp});
    be_->patch_merge(merged, prev.view({b, Gp * Gp, Wp}), static_cast<int>(Gp), static_cast<int>(Gp));
    be_->matmul_forward(out, merged.view({N, 4 * Wp}), param(P.merge_w, {W, 4 * Wp}, false),
                        param(P.merge_b, {W}, false));
    return;
  }
  // up: 1x1 convolution at the low resolution, nearest x2, then Linear(2W, W) over [up, skip]
  // as up fuse_aᵀ + skip fuse_sᵀ + fuse_b, where up fuse_aᵀ = upsample(lo fuse_aᵀ): a product
  // of rows commutes with copying rows, so it runs on a quarter of the rows
  const int64_t Wb = cfg_.widths[static_cast<size_t>(blk.stage + 1)], Gb = G / 2;
  Tensor lo = ar.tensor(ids.lo, act_, {b * Gb * Gb, W});
  Tensor lo_a = ar.tensor(ids.lo_a, act_, {b * Gb * Gb, W});
  Tensor up = ar.tensor(ids.up, act_, {b, G * G, W});
  be_->matmul_forward(lo, prev.view({b * Gb * Gb, Wb}), param(P.up_w, {W, Wb}, false), param(P.up_b, {W}, false));
  be_->matmul_forward(lo_a, lo, param(P.fuse_a_w, {W, W}, false), Tensor());
  be_->upsample_nearest(up, lo_a.view({b, Gb * Gb, W}), static_cast<int>(Gb), static_cast<int>(Gb));
  be_->matmul_residual_forward(out, skip, param(P.fuse_s_w, {W, W}, false), param(P.fuse_b, {W}, false),
                               up.view({N, W}));
}

void CDEIT::trans_backward(int r, const TransIds& ids, Tensor prev, Tensor skip, Tensor dx_in, Tensor dprev,
                           Tensor dskip, int64_t b, GradWrite gw) {
  const RunParams& P = runs_[static_cast<size_t>(r)];
  const CDEITBlock& blk = blocks_[static_cast<size_t>(first_block(r))];
  const int64_t G = blk.grid, W = blk.width, N = b * G * G;
  Arena& ar = *arena_;
  if (!blk.up) {
    const int64_t Wp = cfg_.widths[static_cast<size_t>(blk.stage - 1)], Gp = 2 * G;
    Tensor dmerged = ar.tensor(ids_.dtr_a[static_cast<size_t>(r)], act_, {b, G * G, 4 * Wp});
    be_->matmul_backward(dmerged.view({N, 4 * Wp}), param(P.merge_w, {W, 4 * Wp}, true), param(P.merge_b, {W}, true),
                         dx_in, ar.tensor(ids.merged, act_, {N, 4 * Wp}), param(P.merge_w, {W, 4 * Wp}, false), gw);
    be_->patch_split(dprev.view({b, Gp * Gp, Wp}), dmerged, static_cast<int>(Gp), static_cast<int>(Gp));
    return;
  }
  const int64_t Wb = cfg_.widths[static_cast<size_t>(blk.stage + 1)], Gb = G / 2;
  Tensor dlo_a = ar.tensor(ids_.dtr_a[static_cast<size_t>(r)], act_, {b * Gb * Gb, W});
  Tensor dlo = ar.tensor(ids_.dtr_b[static_cast<size_t>(r)], act_, {b * Gb * Gb, W});
  be_->matmul_backward(dskip, param(P.fuse_s_w, {W, W}, true), param(P.fuse_b, {W}, true), dx_in, skip,
                       param(P.fuse_s_w, {W, W}, false), gw);
  be_->upsample_nearest_backward(dlo_a.view({b, Gb * Gb, W}), dx_in.view({b, G * G, W}), static_cast<int>(Gb),
                                 static_cast<int>(Gb));
  be_->matmul_backward(dlo, param(P.fuse_a_w, {W, W}, true), Tensor(), dlo_a, ar.tensor(ids.lo, act_, {b * Gb * Gb, W}),
                       param(P.fuse_a_w, {W, W}, false), gw);
  be_->matmul_backward(dprev.view({b * Gb * Gb, Wb}), param(P.up_w, {W, Wb}, true), param(P.up_b, {W}, true), dlo,
                       prev.view({b * Gb * Gb, Wb}), param(P.up_w, {W, Wb}, false), gw);
}

// ---- final layer --------------------------------------------------------------------------------------

FinalLayerBuffers CDEIT::final_buffers(const HeadIds& h, int64_t b) {
  const int64_t T = cfg_.tokens(), W0 = cfg_.widths[0], N = b * T, Fo = cfg_.patch_in();
  Arena& ar = *arena_;
  FinalLayerBuffers f;
  f.fmod = ar.tensor(h.fmod, act_, {2, b, W0});
  f.rstd = ar.tensor(h.rstdf, DType::f32, {N});  // RMSNorm: no mean
  f.mf = ar.tensor(h.mf, act_, {N, W0});
  f.otok = ar.tensor(h.otok, act_, {b, T, Fo});
  if (h.dfmod != kNoBuffer) {
    f.dfmod = ar.tensor(h.dfmod, act_, {2, b, W0});
    f.dotok = ar.tensor(h.dotok, act_, {b, T, Fo});
    f.dmf = ar.tensor(h.dmf, act_, {N, W0});
    f.tmp = ar.tensor(h.tmp, act_, {b, cfg_.hidden()});
  }
  return f;
}

FinalLayerParams CDEIT::final_params(bool grad) const {
  const int64_t D = cfg_.hidden(), W0 = cfg_.widths[0], Fo = cfg_.patch_in();
  return {param(f_ada_w_, {2 * W0, D}, grad), param(f_ada_b_, {2 * W0}, grad), param(out_w_, {Fo, W0}, grad),
          param(out_b_, {Fo}, grad)};
}

Tensor CDEIT::head_forward(const HeadIds& h, Tensor sc, Tensor x, int64_t b) {
  report({f_ada_w_, f_ada_b_, out_w_, out_b_}, need_);
  Tensor pred = arena_->tensor(h.pred, act_, {b, cfg_.in_channels, cfg_.image, cfg_.image});
  final_layer_forward(*be_, final_buffers(h, b), final_params(false), sc, x, pred, NormKind::rms, cfg_.patch);
  return pred;
}

void CDEIT::head_backward(const HeadIds& h, Tensor sc, Tensor x, Tensor dpred, Tensor dres, Tensor dsc, int64_t b,
                          GradWrite gw) {
  final_layer_backward(*be_, final_buffers(h, b), final_params(false), final_params(true), sc, x,
                       dpred.view({b, cfg_.in_channels, cfg_.image, cfg_.image}), dres, dsc, NormKind::rms,
                       cfg_.patch, gw);
}

}  // namespace ft
