// CDEIT: parameters, buffers, binding and the passes (training step, evaluation, prediction).
// The embedding, blocks, transitions and final layer are in cdeit_blocks.cpp.
#include "models/cdeit.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/half.h"
#include "core/rng.h"

namespace ft {

namespace {
std::string run_name(const CDEITConfig& c, int run) {
  const int S = c.stages();
  return run < S ? "down" + std::to_string(run) : "up" + std::to_string(S - 2 - (run - S));
}
}  // namespace

std::vector<int> CDEIT::RunParams::trans_entries() const {
  std::vector<int> v;
  for (int e : {merge_w, merge_b, up_w, up_b, fuse_a_w, fuse_s_w, fuse_b})
    if (e >= 0) v.push_back(e);
  return v;
}

// ---- parameters ------------------------------------------------------------------------------

CDEIT::CDEIT(const CDEITConfig& c) : cfg_(c), sch_{0} {
  cfg_.validate();
  blocks_ = cdeit_blocks(cfg_);
  sch_ = DiTSchedule{static_cast<int>(blocks_.size())};
  const int S = cfg_.stages(), R = 2 * S - 1;
  run_first_.assign(static_cast<size_t>(R), -1);
  for (size_t k = blocks_.size(); k-- > 0;) run_first_[static_cast<size_t>(blocks_[k].run)] = static_cast<int>(k);
  keep_rank_ = keep_ranks(blocks_);
  const int64_t D = cfg_.hidden(), F = cfg_.freq_dim;
  const ParamInit N = ParamInit::normal, Z = ParamInit::zeros;
  // Linears start as zeros in the table; init_params draws the xavier-uniform ones.
  x_w_ = params_.add("x_embed_w", {D, cfg_.patch_in()}, true, false, Z);
  x_b_ = params_.add("x_embed_b", {D}, false, false, Z);
  if (cfg_.cond_channels > 0) c_w_ = params_.add("cond_embed_w", {D, cfg_.patch_cond()}, true, false, Z);
  t_w1_ = params_.add("t_w1", {D, F}, true, false, N, 0.02f);
  t_b1_ = params_.add("t_b1", {D}, false, false, Z);
  t_w2_ = params_.add("t_w2", {D, D}, true, false, N, 0.02f);
  t_b2_ = params_.add("t_b2", {D}, false, false, Z);
  embed_entries_ = {x_w_, x_b_};
  if (c_w_ >= 0) embed_entries_.push_back(c_w_);
  for (int e : {t_w1_, t_b1_, t_w2_, t_b2_}) embed_entries_.push_back(e);
  runs_.resize(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    const CDEITBlock& k0 = blocks_[static_cast<size_t>(run_first_[static_cast<size_t>(r)])];
    const int64_t L = cfg_.depths[static_cast<size_t>(k0.stage)], W = k0.width, H = k0.hidden_mlp;
    const std::string n = run_name(cfg_, r) + ".";
    RunParams& p = runs_[static_cast<size_t>(r)];
    if (r > 0 && !k0.up) {
      const int64_t Wp = cfg_.widths[static_cast<size_t>(k0.stage - 1)];
      p.merge_w = params_.add(n + "merge_w", {W, 4 * Wp}, true, false, Z);
      p.merge_b = params_.add(n + "merge_b", {W}, false, false, Z);
    } else if (k0.up) {
      const int64_t Wb = cfg_.widths[static_cast<size_t>(k0.stage + 1)];
      p.up_w = params_.add(n + "up_w", {W, Wb}, true, false, Z);
      p.up_b = params_.add(n + "up_b", {W}, false, false, Z);
      p.fuse_a_w = params_.add(n + "fuse_up_w", {W, W}, true, false, Z);
      p.fuse_s_w = params_.add(n + "fuse_skip_w", {W, W}, true, false, Z);
      p.fuse_b = params_.add(n + "fuse_b", {W}, false, false, Z);
    }
    p.ada_w = params_.add(n + "ada_w", {L, 6 * W, D}, true, true, Z);  // adaLN-Zero
    p.ada_b = params_.add(n + "ada_b", {L, 6 * W}, false, true, Z);
    p.qkv_w = params_.add(n + "qkv_w", {L, 3 * W, W}, true, true, Z);
    p.qkv_b = params_.add(n + "qkv_b", {L, 3 * W}, false, true, Z);
    p.proj_w = params_.add(n + "proj_w", {L, W, W}, true, true, Z);
    p.proj_b = params_.add(n + "proj_b", {L, W}, false, true, Z);
    p.fc1_w = params_.add(n + "fc1_w", {L, H, W}, true, true, Z);
    p.fc1_b = params_.add(n + "fc1_b", {L, H}, false, true, Z);
    p.fc2_w = params_.add(n + "fc2_w", {L, W, H}, true, true, Z);
    p.fc2_b = params_.add(n + "fc2_b", {L, W}, false, true, Z);
  }
  const int64_t W0 = cfg_.widths[0];
  f_ada_w_ = params_.add("final_ada_w", {2 * W0, D}, true, false, Z);
  f_ada_b_ = params_.add("final_ada_b", {2 * W0}, false, false, Z);
  out_w_ = params_.add("out_w", {cfg_.patch_in(), W0}, true, false, Z);
  out_b_ = params_.add("out_b", {cfg_.patch_in()}, false, false, Z);
}

void CDEIT::init_params(uint64_t seed, float* out) const {
  params_.init_params(seed, out);
  // xavier_uniform_ per matrix (per layer of a stacked entry: the same fans); the patch
  // embedding's fan_in counts both channel groups of its one Conv2d.
  auto xavier = [&](int entry, int64_t fan_out, int64_t fan_in) {
    if (entry < 0) return;
    const ParamEntry& e = params_.at(entry);
    const double a = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
    Rng rng(seed * 1000003ull + 7919ull * static_cast<uint64_t>(entry + 1) + 1);
    for (int64_t k = 0; k < e.count; ++k) out[e.offset + k] = static_cast<float>((2.0 * rng.uniform() - 1.0) * a);
  };
  const int64_t D = cfg_.hidden(), pf = cfg_.patch_in() + cfg_.patch_cond();
  xavier(x_w_, D, pf);
  xavier(c_w_, D, pf);
  for (size_t r = 0; r < runs_.size(); ++r) {
    const RunParams& p = runs_[r];
    const CDEITBlock& k0 = blocks_[static_cast<size_t>(run_first_[r])];
    const int64_t W = k0.width, H = k0.hidden_mlp;
    if (p.merge_w >= 0) xavier(p.merge_w, W, 4 * cfg_.widths[static_cast<size_t>(k0.stage - 1)]);
    if (p.up_w >= 0) {
      xavier(p.up_w, W, cfg_.widths[static_cast<size_t>(k0.stage + 1)]);
      xavier(p.fuse_a_w, W, 2 * W);  // one Linear(2W, W) over the concatenation
      xavier(p.fuse_s_w, W, 2 * W);
    }
    xavier(p.qkv_w, 3 * W, W);
    xavier(p.proj_w, W, W);
    xavier(p.fc1_w, H, W);
    xavier(p.fc2_w, W, H);
  }
}

std::vector<FieldSpec> CDEIT::input_fields() const {
  std::vector<FieldSpec> f{FieldSpec{"image", DType::f32, cfg_.image_elems()}};
  if (cfg_.cond_channels > 0) f.push_back(FieldSpec{"cond", DType::f32, cfg_.cond_elems()});
  f.push_back(FieldSpec{"t", DType::i32, 1});
  f.push_back(FieldSpec{"noise_key", DType::i32, 1});
  return f;
}

int CDEIT::skip_block(int stage) const {
  return run_first_[static_cast<size_t>(stage)] + cfg_.depths[static_cast<size_t>(stage)] - 1;
}

// ---- plan ------------------------------------------------------------------------------------

namespace {
OpShape block_attention(const CDEITBlock& k, int64_t b, int heads) {
  const int64_t nw = (k.grid / k.window) * (k.grid / k.window);
  return OpShape::attention(b * nw, k.window * k.window, heads, k.width / heads, /*causal=*/false);
}
}  // namespace

std::vector<OpShape> CDEIT::ops(const PlanShape& s) const {
  const int64_t b = std::max(s.training ? s.micro_batch : 1, s.eval_batch), D = cfg_.hidden();
  const int64_t N0 = b * cfg_.tokens();
  std::vector<OpShape> o{OpShape::sum_squares(0),
                         OpShape::matmul(b, D, D),
                         OpShape::matmul(b, cfg_.freq_dim, D),
                         OpShape::patch_embed(N0, cfg_.patch_in() + cfg_.patch_cond(), cfg_.widths[0]),
                         OpShape::matmul(b, D, 2 * cfg_.widths[0]),
                         OpShape::matmul(N0, cfg_.widths[0], cfg_.patch_in())};
  for (int st = 0; st < cfg_.stages(); ++st) {
    const CDEITBlock& k = blocks_[static_cast<size_t>(run_first_[static_cast<size_t>(st)])];
    const int64_t N = b * k.grid * k.grid, W = k.width, H = k.hidden_mlp;
    for (const OpShape& m : {OpShape::norm_modulate(b, k.grid * k.grid, W), OpShape::matmul(b, D, 6 * W),
                             OpShape::matmul(N, W, 3 * W), OpShape::matmul(N, W, W),
                             OpShape::matmul(N, W, H), OpShape::matmul(N, H, W), OpShape::silu_matmul(N, H, W),
                             OpShape::elementwise(N * H, H),
                             block_attention(k, b, cfg_.heads)})
      o.push_back(m);
    if (st > 0) o.push_back(OpShape::matmul(N, 4 * cfg_.widths[static_cast<size_t>(st - 1)], W));
    if (st + 1 < cfg_.stages()) o.push_back(OpShape::matmul(N / 4, cfg_.widths[static_cast<size_t>(st + 1)], W));
  }
  return o;
}

void CDEIT::check_supported(const Backend& be, Precision p) const {
  PlanShape one;
  one.training = false;
  for (const OpShape& op : ops(one)) {
    const std::string why = be.unsupported(op, p);
    FT_USER_CHECK(why.empty(), "--model (", describe(), "): widths/heads/windows: ", why);
  }
}

struct CDEIT::Sizes {
  size_t mod = 0, nd = 0, n4 = 0, nr = 0, att = 0;
  void max_with(const Sizes& o) {
    mod = std::max(mod, o.mod), nd = std::max(nd, o.nd), n4 = std::max(n4, o.n4), nr = std::max(nr, o.nr);
    att = std::max(att, o.att);
  }
};

CDEIT::Sizes CDEIT::block_sizes(const CDEITBlock& k, int64_t b, Precision p, const Backend& be) const {
  const size_t a = dtype_size(activation_dtype(p));
  const int64_t N = b * k.grid * k.grid;
  Sizes z;
  z.mod = static_cast<size_t>(6 * b * k.width) * a;
  z.nd = static_cast<size_t>(N * k.width) * a;
  z.n4 = static_cast<size_t>(N) * 4;
  z.nr = static_cast<size_t>(N * k.hidden_mlp) * a;
  z.att = be.attention_saved_bytes(block_attention(k, b, cfg_.heads), p);
  return z;
}

void CDEIT::declare_block(BufferTable& t, const Sizes& z, const std::string& pre, BufferClass cls, int first,
                          int last, BlockIds& o, bool keep_silu) const {
  auto add = [&](const char* what, size_t bytes) { return t.add(pre + what, cls, bytes, first, last); };
  // scratch of the forward only (the MLP's SiLU output): transient in the forward phase (the
  // whole interval of a shared set). The
  // normalized tokens are never kept (norm_modulate writes the modulated ones straight in
  // window order), nor is silu(fch): the backward recomputes it over fch in the pass that
  // reads fch anyway (silu_backward_recompute), which saves 4 of a block's 17 [N, W]-sized
  // activations for one more write of [N, H] in the backward. Where the budget leaves room
  // (keep_silu: PlanShape::kept_blocks), a saved block keeps it instead.
  const int scratch_last = cls == BufferClass::activations ? first : last;
  auto scratch = [&](const char* what, size_t bytes) {
    return t.add(pre + what, BufferClass::transient, bytes, first, scratch_last);
  };
  o.mod = add("mod", z.mod);
  o.rstd1 = add("rstd1", z.n4);
  o.m1w = add("m1", z.nd);  // in window order when windowed
  o.qkv = add("qkv", 3 * z.nd);
  o.atty = add("atty", z.nd);
  o.att = add("att", z.att);
  o.ao = add("attn_out", z.nd);  // window order when windowed (the gated residual reads it there)
  o.mid = add("mid", z.nd);
  o.rstd2 = add("rstd2", z.n4);
  o.m2 = add("m2", z.nd);
  o.fch = add("fch", z.nr);
  o.fchs = keep_silu ? add("fch_silu", z.nr) : scratch("fch_silu", z.nr);
  o.mo = add("mlp_out", z.nd);
}

void CDEIT::declare_embed(BufferTable& t, int64_t b, size_t a, bool training, EmbedIds& e) const {
  const int f = training ? sch_.embed_fwd() : sch_.eval_embed();
  const int keep = training ? sch_.embed_bwd() : f;
  const int target = training ? sch_.head() : sch_.eval_head();
  const int sc_last = training ? sch_.embed_bwd() : sch_.eval_head();
  const std::string pre = training ? "" : "e.";
  const int64_t D = cfg_.hidden(), N = b * cfg_.tokens();
  const auto img = static_cast<size_t>(b * cfg_.image_elems()) * 4;
  const auto bd = static_cast<size_t>(b * D) * a;
  auto add = [&](const char* name, BufferClass cls, size_t bytes, int first, int last) {
    return t.add(pre + name, cls, bytes, first, last);
  };
  e = EmbedIds{};
  // Training: the images and condition maps are uploaded beside the compute stream, behind
  // only the last step's read of them (InputUploads), so no other buffer may share their bytes
  // at any point of the step: live in every phase.
  const int all_first = 0, all_last = sch_.num_phases() - 1;
  e.image = training ? add("image", BufferClass::inputs, img, all_first, all_last)
                     : add("image", BufferClass::inputs, img, f, target);
  if (cfg_.predict == "eps") e.eps = add("eps", BufferClass::activations, img, f, target);
  e.xt = add("x_t", BufferClass::transient, img, f, f);
  e.coef = add("coef", BufferClass::inputs, static_cast<size_t>(b) * 12, f, f);
  e.keys = add("noise_keys", BufferClass::inputs, static_cast<size_t>(b) * 4, f, f);
  e.t = add("t", BufferClass::inputs, static_cast<size_t>(b) * 4, f, f);
  e.xtok = add("x_tokens", BufferClass::activations, static_cast<size_t>(N * cfg_.patch_in()) * a, f, keep);
  if (cfg_.cond_channels > 0) {
    const auto cond_bytes = static_cast<size_t>(b * cfg_.cond_elems()) * 4;
    e.cond_map = training ? add("cond_map", BufferClass::inputs, cond_bytes, all_first, all_last)
                          : add("cond_map", BufferClass::inputs, cond_bytes, f, f);
    e.ctok = add("cond_tokens", BufferClass::activations, static_cast<size_t>(N * cfg_.patch_cond()) * a, f, keep);
  }
  e.tfreq = add("t_freq", BufferClass::activations, static_cast<size_t>(b * cfg_.freq_dim) * a, f, keep);
  e.t1 = add("t_h", BufferClass::activations, bd, f, keep);
  e.t1s = add("t_h_silu", BufferClass::activations, bd, f, keep);
  e.c = add("c", BufferClass::activations, bd, f, keep);
  e.sc = add("c_silu", BufferClass::activations, bd, f, sc_last);
}

void CDEIT::declare_head(BufferTable& t, int64_t b, size_t a, bool training, HeadIds& h) const {
  const int p = training ? sch_.head() : sch_.eval_head();
  const std::string pre = training ? "h." : "eh.";
  const int64_t N = b * cfg_.tokens(), W0 = cfg_.widths[0];
  const auto nd = static_cast<size_t>(N * W0) * a;
  const auto img = static_cast<size_t>(b * cfg_.image_elems()) * a;
  const auto tok = static_cast<size_t>(N * cfg_.patch_in()) * a;
  auto add = [&](const char* name, size_t bytes) { return t.add(pre + name, BufferClass::transient, bytes, p, p); };
  h = HeadIds{};
  h.fmod = add("mod", static_cast<size_t>(2 * b * W0) * a);
  h.rstdf = add("norm_rstd", static_cast<size_t>(N) * 4);
  h.mf = add("modulated", nd);
  h.otok = add("out_tokens", tok);
  h.pred = add("pred", img);
  h.losses = add("losses", static_cast<size_t>(b) * 4);
  if (!training) return;
  h.dpred = add("dpred", img);
  h.dotok = add("dout_tokens", tok);
  h.dmf = add("dmodulated", nd);
  h.dfmod = add("dmod", static_cast<size_t>(2 * b * W0) * a);
  h.tmp = add("dc_part", static_cast<size_t>(b * cfg_.hidden()) * a);
}

void CDEIT::declare(BufferTable& t, const PlanShape& s, const Backend& be, Ids& ids) const {
  FT_CHECK(s.micro_batch >= 1 && s.eval_batch >= 1, "batch sizes must be >= 1");
  const int K = static_cast<int>(blocks_.size()), S = cfg_.stages(), R = 2 * S - 1;
  const size_t a = dtype_size(activation_dtype(s.precision));
  const int64_t D = cfg_.hidden();
  ids = Ids{};
  ids.pos = t.add("pos_embed", BufferClass::inputs, static_cast<size_t>(2 * cfg_.tokens() * cfg_.widths[0]) * a, 0,
                  t.last_phase());
  auto nd_of = [&](const CDEITBlock& k, int64_t b) { return static_cast<size_t>(b * k.grid * k.grid * k.width) * a; };
  auto kb = [&](int k) -> const CDEITBlock& { return blocks_[static_cast<size_t>(k)]; };
  if (s.training) {
    const int64_t B = s.micro_batch;
    declare_embed(t, B, a, true, ids.emb);
    ids.res0 = t.add("res0", BufferClass::activations, nd_of(kb(0), B), sch_.embed_fwd(), sch_.block_bwd(0));
    ids.tin.assign(static_cast<size_t>(R), kNoBuffer);
    ids.trans.assign(static_cast<size_t>(R), TransIds{});
    ids.dtr_a.assign(static_cast<size_t>(R), kNoBuffer);
    ids.dtr_b.assign(static_cast<size_t>(R), kNoBuffer);
    Sizes zmax;
    for (int k = 0; k < K; ++k) {
      const CDEITBlock& blk = kb(k);
      const std::string n = "l" + std::to_string(k) + ".";
      const int f = sch_.block_fwd(k), bw = sch_.block_bwd(k);
      const size_t nd = nd_of(blk, B);
      const Sizes z = block_sizes(blk, B, s.precision, be);
      zmax.max_with(z);
      if (blk.first() && blk.run > 0) {  // the transition into this run
        const size_t r = static_cast<size_t>(blk.run);
        ids.tin[r] = t.add(n + "in", BufferClass::activations, nd, f, bw);
        TransIds& tr = ids.trans[r];
        const std::string g = "g" + std::to_string(k) + ".";
        if (!blk.up) {
          const size_t merged = nd / static_cast<size_t>(blk.width) * 4 *
                                static_cast<size_t>(cfg_.widths[static_cast<size_t>(blk.stage - 1)]);
          tr.merged = t.add(n + "merged", BufferClass::activations, merged, f, bw);
          ids.dtr_a[r] = t.add(g + "d_merged", BufferClass::transient, merged, bw, bw);
        } else {
          tr.lo = t.add(n + "up_lowres", BufferClass::activations, nd / 4, f, bw);  // fuse_a_w's gradient reads it
          tr.lo_a = t.add(n + "up_lowres_fused", BufferClass::transient, nd / 4, f, f);
          tr.up = t.add(n + "up", BufferClass::transient, nd, f, f);
          ids.dtr_a[r] = t.add(g + "d_up_lowres_fused", BufferClass::transient, nd / 4, bw, bw);
          ids.dtr_b[r] = t.add(g + "d_up_lowres", BufferClass::transient, nd / 4, bw, bw);
        }
      }
      ids.out.push_back(t.add(n + "out", BufferClass::activations, nd, f, k == K - 1 ? sch_.head() : sch_.block_bwd(k + 1)));
      if (s.recompute == Recompute::none) {
        ids.saved.emplace_back();
        declare_block(t, z, n, BufferClass::activations, f, bw, ids.saved.back(), kept_silu(k, s));
      }
      const std::string g = "g" + std::to_string(k) + ".";
      ids.d_a.push_back(t.add(g + "d_a", BufferClass::transient, nd, bw, bw));
      ids.d_b.push_back(t.add(g + "d_b", BufferClass::transient, nd, bw, bw));
      ids.d3.push_back(t.add(g + "d_qkv", BufferClass::transient, 3 * nd, bw, bw));
      ids.d4.push_back(t.add(g + "d_fc", BufferClass::transient, z.nr, bw, bw));
      // ended by the next block: that block's backward writes this block's dgate here
      ids.dmod.push_back(t.add(g + "d_mod", BufferClass::transient, z.mod,
                               ended_by_next(k, s.recompute) ? sch_.block_bwd(k + 1) : bw, bw));
      ids.dtmp.push_back(t.add(g + "dc_part", BufferClass::transient, static_cast<size_t>(B * D) * a, bw, bw));
    }
    if (s.recompute == Recompute::block) {
      declare_block(t, zmax, "rf.", BufferClass::transient, sch_.block_fwd(0), sch_.block_fwd(K - 1), ids.rf);
      declare_block(t, zmax, "rb.", BufferClass::transient, sch_.block_bwd(K - 1), sch_.block_bwd(0), ids.rb);
    }
    declare_head(t, B, a, true, ids.head);
    for (int r = 0; r < R; ++r) {
      const CDEITBlock& k0 = kb(first_block(r));
      const int start = r == R - 1 ? sch_.head() : sch_.block_bwd(first_block(r + 1));
      const int end = r == 0 ? sch_.embed_bwd() : sch_.block_bwd(first_block(r));
      ids.dres.push_back(t.add("dres." + run_name(cfg_, r), BufferClass::transient, nd_of(k0, B), start, end));
    }
    for (int st = 0; st + 1 < S; ++st)
      ids.dskip.push_back(t.add("dskip." + std::to_string(st), BufferClass::transient, nd_of(kb(first_block(st)), B),
                                sch_.block_bwd(first_block(run_of_up(st))), sch_.block_bwd(first_block(st + 1))));
    ids.dsc = t.add("dc_silu", BufferClass::transient, static_cast<size_t>(B * D) * a, sch_.head(), sch_.embed_bwd());
    ids.d_t1s = t.add("eb.dt_h", BufferClass::transient, static_cast<size_t>(B * D) * a, sch_.embed_bwd(),
                      sch_.embed_bwd());
  }
  {
    const int64_t B = s.eval_batch;
    declare_embed(t, B, a, false, ids.e_emb);
    ids.e_res0 = t.add("e.res0", BufferClass::transient, nd_of(kb(0), B), sch_.eval_embed(), sch_.eval_block(0));
    ids.e_tin.assign(static_cast<size_t>(R), kNoBuffer);
    ids.e_trans.assign(static_cast<size_t>(R), TransIds{});
    for (int k = 0; k < K; ++k) {
      const CDEITBlock& blk = kb(k);
      const int p = sch_.eval_block(k);
      const std::string n = "e" + std::to_string(k) + ".";
      const size_t nd = nd_of(blk, B);
      if (blk.first() && blk.run > 0) {
        const size_t r = static_cast<size_t>(blk.run);
        ids.e_tin[r] = t.add(n + "in", BufferClass::transient, nd, p, p);
        TransIds& tr = ids.e_trans[r];
        if (!blk.up) {
          tr.merged = t.add(n + "merged", BufferClass::transient,
                            nd / static_cast<size_t>(blk.width) * 4 *
                                static_cast<size_t>(cfg_.widths[static_cast<size_t>(blk.stage - 1)]),
                            p, p);
        } else {
          tr.lo = t.add(n + "up_lowres", BufferClass::transient, nd / 4, p, p);
          tr.lo_a = t.add(n + "up_lowres_fused", BufferClass::transient, nd / 4, p, p);
          tr.up = t.add(n + "up", BufferClass::transient, nd, p, p);
        }
      }
      // the output lives to its next reader: the next block, the up stage's fusion (a skip)
      // or the head
      int last = k == K - 1 ? sch_.eval_head() : sch_.eval_block(k + 1);
      if (!blk.up && blk.stage + 1 < S && k == skip_block(blk.stage))
        last = sch_.eval_block(first_block(run_of_up(blk.stage)));
      ids.e_out.push_back(t.add(n + "out", BufferClass::transient, nd, p, last));
      ids.eval.emplace_back();
      declare_block(t, block_sizes(blk, B, s.precision, be), n, BufferClass::transient, p, p, ids.eval.back());
    }
    declare_head(t, B, a, false, ids.e_head);
  }
}

void CDEIT::declare_buffers(BufferTable& t, const PlanShape& s, const Backend& be) const {
  Ids ids;
  declare(t, s, be, ids);
}

void CDEIT::keep_buffers(BufferTable& t, const PlanShape& s, const Backend& be) { declare(t, s, be, ids_); }

// ---- binding and parameter views -------------------------------------------------------------------

void CDEIT::bind(const ModelBinding& m) {
  be_ = m.backend;
  arena_ = m.arena;
  shape_ = m.shape;
  act_ = activation_dtype(m.shape.precision);
  FT_CHECK(m.params.numel() >= params_.total(), "params buffer of ", m.params.numel(), " elements");
  param_buf_ = m.params;
  grad_buf_ = m.grads;
  need_ = m.params_needed;
  uploads_ = m.uploads;
  const int64_t maxb = std::max(shape_.training ? shape_.micro_batch : 1, shape_.eval_batch);
  losses_.bind(*be_, maxb);
  // bf16/f16 staging for the position table (below), a batch's conditions and a chunk of
  // predictions read back: sized here, so no step or evaluation allocates
  const int64_t pos_elems = 2 * cfg_.tokens() * cfg_.widths[0];
  host_half_.assign(act_ == DType::f32 ? 0
                                        : static_cast<size_t>(std::max({pos_elems, maxb * cfg_.image_elems(),
                                                                        maxb * cond_elems()})),
                    0);
  const int64_t T = cfg_.tokens(), W0 = cfg_.widths[0];
  std::vector<float> pos = DiT::position_table(W0, cfg_.grid());
  pos.resize(static_cast<size_t>(2 * T * W0), 0.0f);
  upload(arena_->tensor(ids_.pos, act_, {2, T * W0}), pos.data(), 2 * T * W0);
}

Tensor CDEIT::param(int entry, std::initializer_list<int64_t> dims, bool grad) const {
  return params_.view(grad ? grad_buf_ : param_buf_, entry, dims, grad);
}

Tensor CDEIT::layer_param(int entry, int layer, std::initializer_list<int64_t> dims, bool grad) const {
  return params_.layer_view(grad ? grad_buf_ : param_buf_, entry, layer, dims, grad);
}

void CDEIT::report(const std::vector<int>& entries, const GradReadyFn& fn) const {
  if (!fn) return;
  std::vector<ParamRange> r;
  for (int e : entries)
    if (e >= 0) r.push_back({params_.at(e).offset, params_.at(e).count});
  fn(r);
}

void CDEIT::report_block(int k, const GradReadyFn& fn) const {
  if (!fn) return;
  const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
  std::vector<ParamRange> r;
  for (int e : runs_[static_cast<size_t>(blk.run)].block_entries()) r.push_back(params_.layer_range(e, blk.index));
  fn(r);
}

// ---- passes ------------------------------------------------------------------------------------------

double CDEIT::forward_backward(const Batch& batch, float dloss, GradWrite gw, const GradReadyFn& ready) {
  const int64_t b = batch.size, D = cfg_.hidden();
  FT_CHECK(shape_.training && b >= 1 && b <= shape_.micro_batch, "micro-batch ", b);
  const int K = static_cast<int>(blocks_.size()), R = 2 * cfg_.stages() - 1;
  const bool rc = shape_.recompute == Recompute::block;
  Arena& ar = *arena_;
  auto rows = [&](int k) { return b * blocks_[static_cast<size_t>(k)].grid * blocks_[static_cast<size_t>(k)].grid; };
  auto width = [&](int k) { return blocks_[static_cast<size_t>(k)].width; };
  auto out = [&](int k) { return ar.tensor(ids_.out[static_cast<size_t>(k)], act_, {rows(k), width(k)}); };
  auto x_in = [&](int k) {
    const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
    if (k == 0) return ar.tensor(ids_.res0, act_, {rows(0), width(0)});
    if (blk.first()) return ar.tensor(ids_.tin[static_cast<size_t>(blk.run)], act_, {rows(k), width(k)});
    return out(k - 1);
  };
  auto skip = [&](int k) {  // the skip into an up run's first block
    const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
    return blk.up ? out(skip_block(blk.stage)) : Tensor();
  };
  auto dres = [&](int r) {
    const int k = first_block(r);
    return ar.tensor(ids_.dres[static_cast<size_t>(r)], act_, {rows(k), width(k)});
  };
  auto sc = [&] { return ar.tensor(ids_.emb.sc, act_, {b, D}); };

  ar.set_phase(sch_.embed_fwd());
  embed_forward(ids_.emb, x_in(0), batch.data<float>("image"),
                cfg_.cond_channels > 0 ? batch.data<float>("cond") : nullptr, batch.data<int32_t>("t"),
                batch.data<int32_t>("noise_key"), nullptr, b);
  // A block's closing gated residual runs where ended_by_next says, in one pass with the next
  // block's first norm (Backend::gated_residual_norm_modulate_forward): the residual stream is
  // not read back, and the previous block's saved buffers are still alive there.
  Block prev;
  for (int k = 0; k < K; ++k) {
    ar.set_phase(sch_.block_fwd(k));
    const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
    if (blk.first() && blk.run > 0)
      trans_forward(blk.run, ids_.trans[static_cast<size_t>(blk.run)], out(k - 1), skip(k), x_in(k), b);
    const bool ends_prev = k > 0 && ended_by_next(k - 1, shape_.recompute);
    Block a = block_tensors(rc ? ids_.rf : ids_.saved[static_cast<size_t>(k)], blk, b, true, kept_silu(k, shape_));
    block_forward(k, a, sc(), x_in(k), ended_by_next(k, shape_.recompute) ? Tensor() : out(k),
                  ends_prev ? &prev : nullptr);
    prev = a;
  }

  ar.set_phase(sch_.head());
  Tensor pred = head_forward(ids_.head, sc(), out(K - 1), b);
  const BufferId tgt_id = cfg_.predict == "eps" ? ids_.emb.eps : ids_.emb.image;
  Tensor target = ar.tensor(tgt_id, DType::f32, {b, cfg_.image_elems()});
  Tensor losses = ar.tensor(ids_.head.losses, DType::f32, {b});
  Tensor dpred = ar.tensor(ids_.head.dpred, act_, {b, cfg_.image_elems()});
  be_->mse_loss(losses, dpred, pred, target, dloss);
  if (uploads_) uploads_->inputs_read();  // the last read of the image (and long after the map's)
  losses_.start(losses);  // summed after the backward is queued (LossReadback)
  // dres(R - 1): the final layer writes it (a 128 MiB memset at batch 32 before), the blocks'
  // norm backwards then add to it
  Tensor dsc = ar.tensor(ids_.dsc, act_, {b, D});
  be_->zero(dsc);          // every adaLN adds its part of silu(c)'s gradient
  head_backward(ids_.head, sc(), out(K - 1), dpred, dres(R - 1), dsc, b, gw);
  report({f_ada_w_, f_ada_b_, out_w_, out_b_}, ready);

  for (int k = K - 1; k >= 0; --k) {
    ar.set_phase(sch_.block_bwd(k));
    const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
    Block a = block_tensors(rc ? ids_.rb : ids_.saved[static_cast<size_t>(k)], blk, b, /*forward=*/rc,
                            kept_silu(k, shape_));
    if (rc) block_forward(k, a, sc(), x_in(k), Tensor());  // the block's internals again
    // as in the forward, a block's end and the next block's first norm in one pass
    const bool ends_prev = k > 0 && ended_by_next(k - 1, shape_.recompute);
    Block prev;
    if (ends_prev)
      // (prev's fchs is not read here: its own backward binds it, kept or not)
      prev = block_tensors(ids_.saved[static_cast<size_t>(k - 1)], blocks_[static_cast<size_t>(k - 1)], b, false);
    block_backward(k, a, sc(), x_in(k), dres(blk.run), ar.tensor(ids_.dsc, act_, {b, D}), gw,
                   ends_prev ? &prev : nullptr);
    report_block(k, ready);
    if (!blk.first() || blk.run == 0) continue;
    const int r = blk.run;
    Tensor dskip = blk.up ? ar.tensor(ids_.dskip[static_cast<size_t>(blk.stage)], act_, {rows(k), width(k)}) : Tensor();
    trans_backward(r, ids_.trans[static_cast<size_t>(r)], out(k - 1), skip(k), dres(r), dres(r - 1), dskip, b, gw);
    report(runs_[static_cast<size_t>(r)].trans_entries(), ready);
    if (!blk.up) {  // stage s-1's output was also the skip of up stage s-1: add that path's gradient
      Tensor ds = ar.tensor(ids_.dskip[static_cast<size_t>(blk.stage - 1)], act_, {rows(k - 1), width(k - 1)});
      be_->residual_forward(dres(r - 1), dres(r - 1), ds);
    }
  }

  ar.set_phase(sch_.embed_bwd());
  embed_backward(ids_.emb, b, dres(0), ar.tensor(ids_.dsc, act_, {b, D}), gw);
  report(embed_entries_, ready);
  return losses_.sum();
}

Tensor CDEIT::eval_forward(const float* image, const float* cond, const int32_t* t, const int32_t* keys,
                           const float* x_t, int64_t b) {
  FT_CHECK(b >= 1 && b <= shape_.eval_batch, "evaluation batch ", b, " (planned ", shape_.eval_batch, ")");
  const int64_t D = cfg_.hidden();
  const int K = static_cast<int>(blocks_.size());
  Arena& ar = *arena_;
  auto rows = [&](int k) { return b * blocks_[static_cast<size_t>(k)].grid * blocks_[static_cast<size_t>(k)].grid; };
  auto width = [&](int k) { return blocks_[static_cast<size_t>(k)].width; };
  auto out = [&](int k) { return ar.tensor(ids_.e_out[static_cast<size_t>(k)], act_, {rows(k), width(k)}); };
  ar.set_phase(sch_.eval_embed());
  embed_forward(ids_.e_emb, ar.tensor(ids_.e_res0, act_, {rows(0), width(0)}), image, cond, t, keys, x_t, b);
  for (int k = 0; k < K; ++k) {
    ar.set_phase(sch_.eval_block(k));
    const CDEITBlock& blk = blocks_[static_cast<size_t>(k)];
    Tensor in;
    if (k == 0) {
      in = ar.tensor(ids_.e_res0, act_, {rows(0), width(0)});
    } else if (blk.first()) {
      in = ar.tensor(ids_.e_tin[static_cast<size_t>(blk.run)], act_, {rows(k), width(k)});
      trans_forward(blk.run, ids_.e_trans[static_cast<size_t>(blk.run)], out(k - 1),
                    blk.up ? out(skip_block(blk.stage)) : Tensor(), in, b);
    } else {
      in = out(k - 1);
    }
    block_forward(k, block_tensors(ids_.eval[static_cast<size_t>(k)], blk, b), ar.tensor(ids_.e_emb.sc, act_, {b, D}),
                  in, out(k));
  }
  ar.set_phase(sch_.eval_head());
  return head_forward(ids_.e_head, ar.tensor(ids_.e_emb.sc, act_, {b, D}), out(K - 1), b);
}

double CDEIT::eval_loss(const Batch& batch) {
  const int64_t b = batch.size;
  Tensor pred = eval_forward(batch.data<float>("image"), cfg_.cond_channels > 0 ? batch.data<float>("cond") : nullptr,
                             batch.data<int32_t>("t"), batch.data<int32_t>("noise_key"), nullptr, b);
  const BufferId tgt_id = cfg_.predict == "eps" ? ids_.e_emb.eps : ids_.e_emb.image;
  Tensor target = arena_->tensor(tgt_id, DType::f32, {b, cfg_.image_elems()});
  Tensor losses = arena_->tensor(ids_.e_head.losses, DType::f32, {b});
  be_->mse_loss(losses, Tensor(), pred, target, 0.0f);
  return losses_.read(losses);
}

void CDEIT::predict(const float* x_t, const float* cond, const int32_t* t, int64_t n, float* out) {
  FT_CHECK(x_t && t && out && (cond || cfg_.cond_channels == 0), "CDEIT::predict: missing input");
  const int64_t G = std::max<int64_t>(1, shape_.eval_batch), E = cfg_.image_elems(), CE = cond_elems();
  for (int64_t first = 0; first < n; first += G) {
    const int64_t b = std::min(G, n - first);
    Tensor pred = eval_forward(nullptr, cond ? cond + first * CE : nullptr, t + first, nullptr, x_t + first * E, b);
    download_floats(*be_, out + first * E, pred, host_half_);
  }
}

}  // namespace ft
