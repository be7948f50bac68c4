// CDEIT's plan: the ops it runs at its largest shapes (for the workspace and support checks)
// and every buffer it declares, with its lifetime (models/cdeit.h says which lives when).
#include <algorithm>
#include <string>

#include "core/error.h"
#include "models/cdeit.h"  // the class; its header says which buffer lives when

namespace ft {

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
  check_ops_supported(be, p, "--model (" + describe() + "): widths/heads/windows: ");
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
  // (keep_silu: PlanShape::keep_level), a saved block keeps it instead.
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
      // a kept block's d(fch) lives in its kept silu(fch) (block_backward)
      ids.d4.push_back(kept_silu(k, s) ? kNoBuffer : t.add(g + "d_fc", BufferClass::transient, z.nr, bw, bw));
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
      ids.dres.push_back(t.add("dres." + cfg_.run_name(r), BufferClass::transient, nd_of(k0, B), start, end));
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

}  // namespace ft
