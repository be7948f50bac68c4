#include "models/gpt2_plan.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace ft {

void GPT2Config::validate() const {
  FT_USER_CHECK(n_layer >= 1 && n_layer <= 1000, "--n-layer must be in [1, 1000], got ", n_layer);
  FT_USER_CHECK(n_head >= 1, "--n-head must be >= 1, got ", n_head);
  FT_USER_CHECK(n_embd >= 1, "--n-embd must be >= 1, got ", n_embd);
  FT_USER_CHECK(n_embd % n_head == 0, "--n-embd (", n_embd, ") must be divisible by --n-head (",
                n_head, ")");
  FT_USER_CHECK(seq_len >= 1 && seq_len <= (1 << 20), "--seq-len must be in [1, 1048576], got ",
                seq_len);
  FT_USER_CHECK(vocab_size >= 2 && vocab_size <= (1 << 30), "--vocab-size must be in [2, 2^30], got ",
                vocab_size);
}

std::string GPT2Config::describe() const {
  std::ostringstream os;
  os << "GPT-2 L=" << n_layer << " H=" << n_head << " C=" << n_embd << " T=" << seq_len
     << " V=" << vocab_size << " (padded " << padded_vocab_size() << ")";
  return os.str();
}

const char* recompute_name(Recompute r) { return r == Recompute::none ? "none" : "block"; }

DType activation_dtype(Precision p) {
  switch (p) {
    case Precision::fp32: return DType::f32;
    case Precision::bf16: return DType::bf16;
    case Precision::fp16: return DType::f16;
  }
  return DType::f32;
}
DType param_dtype(Precision p) { return activation_dtype(p); }

int64_t gpt2_num_params(const GPT2Config& c) {
  const int64_t L = c.n_layer, C = c.n_embd, Vp = c.padded_vocab_size(), T = c.seq_len;
  const int64_t per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C +
                            4 * C * C + C;
  return Vp * C + T * C + L * per_layer + 2 * C;
}

std::string block_buffer(BlockMode mode, int layer, const char* what) {
  switch (mode) {
    case BlockMode::saved: return "l" + std::to_string(layer) + "." + what;
    case BlockMode::recompute_fwd: return std::string("rf.") + what;
    case BlockMode::recompute_bwd: return std::string("rb.") + what;
    case BlockMode::eval: return "e" + std::to_string(layer) + "." + what;
  }
  return what;
}

namespace {

struct Builder {
  std::vector<BufferSpec> out;
  void add(std::string name, BufferClass cls, size_t bytes, int first, int last) {
    out.push_back(BufferSpec{std::move(name), cls, bytes, first, last, 0});
  }
};

// The internals of one block, for batch b: what block_forward writes and block_backward reads.
void add_block_internals(Builder& bld, const GPT2Config& c, const PlanShape& s, const Backend& be,
                         BlockMode mode, int layer, int64_t b, BufferClass cls, int first,
                         int last) {
  const int64_t T = s.seq_len, C = c.n_embd;
  const size_t a = dtype_size(activation_dtype(s.precision));
  const size_t btc = static_cast<size_t>(b * T * C) * a, bt = static_cast<size_t>(b * T) * 4;
  OpDims d{b, T, C, c.n_head, c.padded_vocab_size(), c.vocab_size};
  auto name = [&](const char* w) { return block_buffer(mode, layer, w); };
  bld.add(name("ln1"), cls, btc, first, last);
  bld.add(name("ln1_mean"), cls, bt, first, last);
  bld.add(name("ln1_rstd"), cls, bt, first, last);
  bld.add(name("qkv"), cls, 3 * btc, first, last);
  bld.add(name("atty"), cls, btc, first, last);
  bld.add(name("att"), cls, be.attention_saved_bytes(d, s.precision), first, last);
  bld.add(name("res2"), cls, btc, first, last);
  bld.add(name("ln2"), cls, btc, first, last);
  bld.add(name("ln2_mean"), cls, bt, first, last);
  bld.add(name("ln2_rstd"), cls, bt, first, last);
  bld.add(name("fch"), cls, 4 * btc, first, last);
  bld.add(name("fch_gelu"), cls, 4 * btc, first, last);
}

}  // namespace

std::vector<BufferSpec> gpt2_buffers(const GPT2Config& c, const PlanShape& s, const Backend& be) {
  FT_CHECK(s.seq_len >= 1 && s.seq_len <= c.seq_len, "seq_len ", s.seq_len);
  FT_CHECK(s.micro_batch >= 1 && s.eval_batch >= 1, "batch sizes must be >= 1");
  const GPT2Schedule sch{c.n_layer};
  const int L = c.n_layer;
  const int64_t T = s.seq_len, C = c.n_embd, Vp = c.padded_vocab_size();
  const int64_t P = gpt2_num_params(c);
  const size_t a = dtype_size(activation_dtype(s.precision));
  const size_t pbytes = dtype_size(param_dtype(s.precision));
  const int last = sch.num_phases() - 1;
  const int shards = s.zero_stage >= 1 ? std::max(1, s.world_size) : 1;
  const size_t P_shard = static_cast<size_t>((P + shards - 1) / shards);
  Builder bld;

  // ---- persistent -----------------------------------------------------------------------
  bld.add("params", BufferClass::params, P * pbytes, 0, last);
  if (s.training) {
    bld.add("grads", BufferClass::grads, P * pbytes, 0, last);
    if (s.precision != Precision::fp32) bld.add("master", BufferClass::master, P_shard * 4, 0, last);
    bld.add("adam_m", BufferClass::optimizer, P_shard * 4, 0, last);
    bld.add("adam_v", BufferClass::optimizer, P_shard * 4, 0, last);
  }
  const int64_t wb = std::max(s.training ? s.micro_batch : 1, s.eval_batch);
  OpDims wd{wb, T, C, c.n_head, Vp, c.vocab_size};
  bld.add("workspace", BufferClass::workspace, be.workspace_bytes(wd), 0, last);

  // ---- training step ----------------------------------------------------------------------
  if (s.training) {
    const int64_t B = s.micro_batch;
    const size_t btc = static_cast<size_t>(B * T * C) * a, bt4 = static_cast<size_t>(B * T) * 4;
    bld.add("tokens", BufferClass::inputs, bt4, sch.embed_fwd(), sch.embed_bwd());
    bld.add("targets", BufferClass::inputs, bt4, sch.embed_fwd(), sch.head());
    bld.add("encoded", BufferClass::activations, btc, sch.embed_fwd(), sch.block_bwd(0));
    for (int l = 0; l < L; ++l) {
      int res_last = (l == L - 1) ? sch.head() : sch.block_bwd(l + 1);
      bld.add("l" + std::to_string(l) + ".res3", BufferClass::activations, btc, sch.block_fwd(l),
              res_last);
      if (s.recompute == Recompute::none)
        add_block_internals(bld, c, s, be, BlockMode::saved, l, B, BufferClass::activations,
                            sch.block_fwd(l), sch.block_bwd(l));
      // Backward scratch of block l; same-sized scratch of other layers shares its bytes.
      const std::string g = "g" + std::to_string(l) + ".";
      bld.add(g + "d_btc", BufferClass::transient, btc, sch.block_bwd(l), sch.block_bwd(l));
      bld.add(g + "d_bt3c", BufferClass::transient, 3 * btc, sch.block_bwd(l), sch.block_bwd(l));
      bld.add(g + "d_bt4c", BufferClass::transient, 4 * btc, sch.block_bwd(l), sch.block_bwd(l));
    }
    if (s.recompute == Recompute::block) {
      // One set of block internals for the forward pass, one for the backward pass (where
      // each block's forward is redone just before its backward). Their lifetimes don't
      // overlap the head's, so the logits can reuse their bytes.
      add_block_internals(bld, c, s, be, BlockMode::recompute_fwd, 0, B, BufferClass::transient,
                          sch.block_fwd(0), sch.block_fwd(L - 1));
      add_block_internals(bld, c, s, be, BlockMode::recompute_bwd, 0, B, BufferClass::transient,
                          sch.block_bwd(L - 1), sch.block_bwd(0));
    }
    const int h = sch.head();
    bld.add("h.lnf", BufferClass::transient, btc, h, h);
    bld.add("h.lnf_mean", BufferClass::transient, bt4, h, h);
    bld.add("h.lnf_rstd", BufferClass::transient, bt4, h, h);
    bld.add("h.logits", BufferClass::transient, static_cast<size_t>(B * T * Vp) * a, h, h);
    bld.add("h.losses", BufferClass::transient, bt4, h, h);
    bld.add("h.dlnf", BufferClass::transient, btc, h, h);
    bld.add("dres", BufferClass::transient, btc, h, sch.embed_bwd());
  }

  // ---- evaluation -------------------------------------------------------------------------
  {
    const int64_t B = s.eval_batch;
    const size_t btc = static_cast<size_t>(B * T * C) * a, bt4 = static_cast<size_t>(B * T) * 4;
    const int e0 = sch.eval_embed(), eh = sch.eval_head();
    bld.add("e.tokens", BufferClass::inputs, bt4, e0, eh);
    bld.add("e.targets", BufferClass::inputs, bt4, e0, eh);
    bld.add("e.res0", BufferClass::transient, btc, e0, eh);
    bld.add("e.res1", BufferClass::transient, btc, e0, eh);
    for (int l = 0; l < L; ++l)
      add_block_internals(bld, c, s, be, BlockMode::eval, l, B, BufferClass::transient,
                          sch.eval_block(l), sch.eval_block(l));
    bld.add("eh.lnf", BufferClass::transient, btc, eh, eh);
    bld.add("eh.lnf_mean", BufferClass::transient, bt4, eh, eh);
    bld.add("eh.lnf_rstd", BufferClass::transient, bt4, eh, eh);
    bld.add("eh.logits", BufferClass::transient, static_cast<size_t>(B * T * Vp) * a, eh, eh);
    bld.add("eh.losses", BufferClass::transient, bt4, eh, eh);
  }
  return std::move(bld.out);
}

MemoryPlan gpt2_memory_plan(const GPT2Config& c, const PlanShape& s, const Backend& be) {
  return plan_offsets(gpt2_buffers(c, s, be), GPT2Schedule{c.n_layer}.num_phases());
}

}  // namespace ft
