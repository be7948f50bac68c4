// CpuBackend: checks dtypes and shapes at the Backend interface, then calls the plain
// pointer kernels of backend/cpu/<op>.h. Everything here runs once per op call; the kernels
// themselves never allocate (scratch comes from the workspace given by set_workspace).
#include "backend/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <sstream>
#include <string>

#include "backend/cpu/adamw.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/bpr.h"
#include "backend/cpu/classifier.h"
#include "backend/cpu/cpu_backend_impl.h"
#include "backend/cpu/embedding.h"
#include "backend/cpu/gated_residual.h"
#include "backend/cpu/gelu.h"
#include "backend/cpu/kv_attention.h"
#include "backend/cpu/layernorm.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/modulate.h"
#include "backend/cpu/residual.h"
#include "backend/cpu/silu.h"
#include "backend/kv_shapes.h"
#include "core/error.h"
#include "core/host_memory.h"

namespace ft {

namespace testing {
size_t cpu_memory_limit_bytes = 0;
}  // namespace testing
namespace {

constexpr size_t kAlign = 256;  // same as the arena's alignment: keeps rows cache-line aligned

using cpu::check_f32;
using cpu::check_numel;

void check_i32(const Tensor& t, const char* op, const char* name) {
  FT_CHECK(!t.empty(), op, ": ", name, " is empty");
  FT_CHECK(t.dtype == DType::i32, op, ": ", name, " must be i32, got ", t.shape_str());
}

// Last dimension and the number of rows before it.
int64_t rows_of(const Tensor& t, int64_t cols) { return cols == 0 ? 0 : t.numel() / cols; }

// The bpr, diffusion and window ops and the workspace pointer are CpuBackendBase's
// (cpu_backend_impl.h, cpu_backend_diffusion.cpp).
class CpuBackend final : public cpu::CpuBackendBase {
 public:
  DeviceKind device() const override { return DeviceKind::cpu; }

  std::string describe() const override {
    std::ostringstream os;
    os << "cpu (" << omp_get_max_threads() << " threads, OpenBLAS)";
    return os.str();
  }

  void* alloc(size_t bytes) override {
    const size_t n = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    void* p = (testing::cpu_memory_limit_bytes > 0 && n > testing::cpu_memory_limit_bytes)
                  ? nullptr
                  : std::aligned_alloc(kAlign, n);
    if (p == nullptr)
      throw OutOfMemoryError(detail::concat("cpu backend: cannot allocate ", n, " bytes of host memory"));
    std::memset(p, 0, n);
    return p;
  }
  void free(void* p) override { std::free(p); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void zero(Tensor t) override {
    if (!t.empty()) std::memset(t.data, 0, t.bytes());
  }
  void synchronize() override {}

  void mem_info(size_t* free_bytes, size_t* total_bytes) override {
    size_t avail = 0, total = 0;
    host_memory_info(&avail, &total);
    if (testing::cpu_memory_limit_bytes > 0) {
      avail = std::min(avail, testing::cpu_memory_limit_bytes);
      total = std::min(total, testing::cpu_memory_limit_bytes);
    }
    if (free_bytes) *free_bytes = avail;
    if (total_bytes) *total_bytes = total;
  }

  using Backend::workspace_bytes;

  size_t workspace_bytes(std::span<const OpShape> ops, Precision /*p*/) const override {
    // Attention's backward needs scratch (one row of T floats per thread), the BPR head its
    // per-slot coefficients; every other reduction is split by output column and needs none.
    size_t need = 0;
    for (const OpShape& o : ops) {
      if (o.kind == OpShape::Kind::attention)
        need = std::max(need, attention_backward_workspace_bytes(o.seq, omp_get_max_threads()));
      if (o.kind == OpShape::Kind::bpr)
        need = std::max(need, static_cast<size_t>(bpr_coef_count(o.rows, o.out_cols)) * sizeof(float));
    }
    return (need + kAlign - 1) / kAlign * kAlign;
  }
  std::string unsupported(const OpShape& o, Precision p) const override {
    if (p != Precision::fp32)
      return detail::concat("the cpu backend computes in fp32 only, not ", precision_name(p));
    if (o.kind == OpShape::Kind::attention && (o.heads <= 0 || o.head_size <= 0))
      return detail::concat("attention needs heads and a head size (got ", o.heads, " heads of ",
                            o.head_size, ")");
    return "";
  }
  void set_workspace(void* p, size_t bytes) override {
    workspace_ = p;
    workspace_size_ = bytes;
  }
  // Probabilities are kept in fp32 whatever the precision (the CPU trains fp32 only).
  size_t attention_saved_bytes(const OpShape& a, Precision /*p*/) const override {
    return static_cast<size_t>(a.batch * a.heads * a.seq * a.seq) * sizeof(float);
  }

  // ---- ops ------------------------------------------------------------------------------
  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, Tensor positions) override {
    const char* op = "embedding_forward";
    int64_t B, T, C;
    check_embedding(op, out, tokens, wte, wpe, positions, &B, &T, &C);
    embedding_forward_cpu(out.as<float>(), tokens.as<int32_t>(), wte.as<float>(),
                          wpe.data ? wpe.as<float>() : nullptr, B, T, C,
                          positions.data ? positions.as<int32_t>() : nullptr);
  }

  void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, Tensor positions) override {
    const char* op = "embedding_backward";
    int64_t B, T, C;
    check_embedding(op, dout, tokens, dwte, dwpe, positions, &B, &T, &C);
    embedding_backward_cpu(dwte.as<float>(), dwpe.data ? dwpe.as<float>() : nullptr, dout.as<float>(),
                           tokens.as<int32_t>(), B, T, C,
                           positions.data ? positions.as<int32_t>() : nullptr);
  }

  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w,
                         Tensor b) override {
    const char* op = "layernorm_forward";
    int64_t N, C;
    const bool affine = check_layernorm(op, out, "out", inp, w, b, mean, rstd, &N, &C);
    layernorm_forward_cpu(out.as<float>(), mean.as<float>(), rstd.as<float>(), inp.as<float>(),
                          affine ? w.as<float>() : nullptr, affine ? b.as<float>() : nullptr, N, C);
  }

  void layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp, Tensor w,
                          Tensor mean, Tensor rstd) override {
    const char* op = "layernorm_backward";
    int64_t N, C;
    const bool affine = check_layernorm(op, dinp, "dinp", inp, dw, db, mean, rstd, &N, &C);
    check_f32(dout, op, "dout");
    check_numel(dout, N * C, op, "dout");
    FT_CHECK(affine != w.empty(), op, ": w ", w.shape_str(), affine ? " is empty but dw, db are given"
             : " is given but dw, db are empty (without affine all three are empty)");
    if (affine) {
      check_f32(w, op, "w");
      check_numel(w, C, op, "w");
    }
    layernorm_backward_cpu(dinp.as<float>(), affine ? dw.as<float>() : nullptr,
                           affine ? db.as<float>() : nullptr, dout.as<float>(), inp.as<float>(),
                           affine ? w.as<float>() : nullptr, mean.as<float>(), rstd.as<float>(),
                           N, C);
  }

  void matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias) override {
    const char* op = "matmul_forward";
    int64_t N, C, OC;
    check_matmul(op, out, "out", inp, w, bias, "bias", &N, &C, &OC);
    matmul_forward_cpu(out.as<float>(), inp.as<float>(), w.as<float>(),
                       bias.empty() ? nullptr : bias.as<float>(), N, C, OC);
  }

  void matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp, Tensor w,
                       GradWrite gw = GradWrite::add) override {
    const char* op = "matmul_backward";
    if (inp.empty() && dw.empty()) inp = dinp;  // only a shape then (Backend::matmul_backward)
    int64_t N, C, OC;
    check_matmul(op, dout, "dout", inp, w, dbias, "dbias", &N, &C, &OC);
    if (!dw.empty()) {
      check_f32(dw, op, "dw");
      FT_CHECK(dw.ndim == 2 && dw.dim(0) == OC && dw.dim(1) == C, op, ": dw ", dw.shape_str(),
               " should be [", OC, ",", C, "]");
    }
    FT_CHECK(!dw.empty() || dbias.empty(), op, ": a bias gradient without the weight's");
    if (!dinp.empty()) {
      check_f32(dinp, op, "dinp");
      check_numel(dinp, N * C, op, "dinp");
    }
    matmul_backward_cpu(dinp.empty() ? nullptr : dinp.as<float>(), dw.empty() ? nullptr : dw.as<float>(),
                        dbias.empty() ? nullptr : dbias.as<float>(), dout.as<float>(),
                        inp.as<float>(), w.as<float>(), N, C, OC, gw == GradWrite::add);
  }

  void column_sums(Tensor out, Tensor x, int64_t col0, GradWrite gw = GradWrite::add) override {
    const char* op = "column_sums";
    check_f32(out, op, "out");
    check_f32(x, op, "x");
    const int64_t L = x.ndim >= 1 ? x.dim(x.ndim - 1) : 0, C = out.numel();
    FT_CHECK(L > 0 && C > 0 && col0 >= 0 && col0 + C <= L, op, ": columns ", col0, " .. ", col0 + C - 1,
             " (out ", out.shape_str(), ") outside x ", x.shape_str());
    bias_backward_cpu(out.as<float>(), x.as<float>() + col0, x.numel() / L, C, gw == GradWrite::add, L);
  }

  void attention_forward(Tensor out, Tensor saved, Tensor qkv, int n_head,
                         const AttentionOptions& opt = {}) override {
    const char* op = "attention_forward";
    int64_t B, T, C;
    check_attention(op, out, "out", saved, qkv, n_head, &B, &T, &C);
    attention_forward_cpu(out.as<float>(), saved.as<float>(), qkv.as<float>(), B, T, C, n_head,
                          opt.causal, check_seq_lens(op, opt, B, T),
                          check_attention_positions(op, opt, B, T));
  }

  // The forward output is not needed here: the saved probabilities carry the softmax.
  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor /*out*/, Tensor saved,
                          int n_head, const AttentionOptions& opt = {}) override {
    const char* op = "attention_backward";
    int64_t B, T, C;
    check_attention(op, dout, "dout", saved, qkv, n_head, &B, &T, &C);
    const int32_t* lens = check_seq_lens(op, opt, B, T);
    const int32_t* positions = check_attention_positions(op, opt, B, T);
    check_f32(dqkv, op, "dqkv");
    check_numel(dqkv, B * T * 3 * C, op, "dqkv");
    // As many threads as the workspace has rows for (the result does not depend on it).
    const size_t row = attention_backward_workspace_bytes(T, 1);
    const int64_t rows = workspace_ == nullptr ? 0 : static_cast<int64_t>(workspace_size_ / row);
    FT_CHECK(rows >= 1, op, ": workspace of ", workspace_size_, " bytes is too small (needs ",
             attention_backward_workspace_bytes(T, omp_get_max_threads()),
             "); size it with workspace_bytes() and call set_workspace()");
    const int nthreads = static_cast<int>(std::min<int64_t>(rows, omp_get_max_threads()));
    attention_backward_cpu(dqkv.as<float>(), dout.as<float>(), qkv.as<float>(),
                           saved.as<float>(), static_cast<float*>(workspace_), nthreads, B, T, C,
                           n_head, opt.causal, lens, positions);
  }

  void gelu_forward(Tensor out, Tensor inp) override {
    check_elementwise("gelu_forward", inp.numel(), {{out, "out"}, {inp, "inp"}});
    gelu_forward_cpu(out.as<float>(), inp.as<float>(), inp.numel());
  }

  void gelu_backward(Tensor dinp, Tensor inp, Tensor dout) override {
    check_elementwise("gelu_backward", inp.numel(), {{dinp, "dinp"}, {inp, "inp"}, {dout, "dout"}});
    gelu_backward_cpu(dinp.as<float>(), inp.as<float>(), dout.as<float>(), inp.numel());
  }

  void silu_forward(Tensor out, Tensor inp) override {
    check_elementwise("silu_forward", inp.numel(), {{out, "out"}, {inp, "inp"}});
    silu_forward_cpu(out.as<float>(), inp.as<float>(), inp.numel());
  }

  void silu_backward(Tensor dinp, Tensor inp, Tensor dout) override {
    check_elementwise("silu_backward", inp.numel(), {{dinp, "dinp"}, {inp, "inp"}, {dout, "dout"}});
    silu_backward_cpu(dinp.as<float>(), inp.as<float>(), dout.as<float>(), inp.numel());
  }
  void silu_backward_recompute(Tensor dinp, Tensor out, Tensor inp, Tensor dout, Tensor dbias,
                               GradWrite gw) override {
    check_elementwise("silu_backward_recompute", inp.numel(), {{dinp, "dinp"}, {inp, "inp"}, {dout, "dout"}});
    // out empty: the caller kept silu(inp) from the forward, nothing to write
    if (!out.empty()) check_elementwise("silu_backward_recompute", inp.numel(), {{out, "out"}});
    silu_backward_recompute_cpu(dinp.as<float>(), out.empty() ? nullptr : out.as<float>(), inp.as<float>(),
                                dout.as<float>(), inp.numel());
    if (!dbias.empty()) add_column_sums("silu_backward_recompute", dbias, dinp, gw);
  }

  void modulate_forward(Tensor out, Tensor x, Tensor shift, Tensor scale) override {
    const char* op = "modulate_forward";
    int64_t B, T, C;
    check_broadcast(op, x, {{out, "out"}, {x, "x"}}, {{shift, "shift"}, {scale, "scale"}}, &B, &T, &C);
    modulate_forward_cpu(out.as<float>(), x.as<float>(), shift.as<float>(), scale.as<float>(), B,
                         T, C);
  }

  void modulate_backward(Tensor dx, Tensor dshift, Tensor dscale, Tensor dout, Tensor x,
                         Tensor scale) override {
    const char* op = "modulate_backward";
    int64_t B, T, C;
    check_broadcast(op, x, {{dx, "dx"}, {dout, "dout"}, {x, "x"}},
                    {{dshift, "dshift"}, {dscale, "dscale"}, {scale, "scale"}}, &B, &T, &C);
    modulate_backward_cpu(dx.as<float>(), dshift.as<float>(), dscale.as<float>(),
                          dout.as<float>(), x.as<float>(), scale.as<float>(), B, T, C);
  }

  using Backend::gated_residual_forward;
  void gated_residual_forward(Tensor out, Tensor res, Tensor y, Tensor gate, const WindowOrder& yo) override {
    const char* op = "gated_residual_forward";
    int64_t B, T, C;
    check_broadcast(op, y, {{out, "out"}, {res, "res"}, {y, "y"}}, {{gate, "gate"}}, &B, &T, &C);
    window::Geom g;
    if (yo.active()) {
      g = window::check_window_order(op, res, y, yo.grid_h, yo.grid_w, yo.window, yo.shift);
      FT_CHECK(out.data != y.data, op, ": out must not alias y in window order");
    }
    gated_residual_forward_cpu(out.as<float>(), res.as<float>(), y.as<float>(), gate.as<float>(), B, T, C,
                               yo.active() ? &g : nullptr);
  }

  using Backend::gated_residual_backward;
  void gated_residual_backward(Tensor dy, Tensor dgate, Tensor dout, Tensor y, Tensor gate,
                               const WindowOrder& yo, Tensor dbias_y, GradWrite gw) override {
    const char* op = "gated_residual_backward";
    int64_t B, T, C;
    check_broadcast(op, y, {{dy, "dy"}, {dout, "dout"}, {y, "y"}}, {{dgate, "dgate"}, {gate, "gate"}},
                    &B, &T, &C);
    FT_CHECK(dy.data != dout.data, op, ": dy must not alias dout (dout is the residual's gradient)");
    window::Geom g;
    if (yo.active()) g = window::check_window_order(op, dout, y, yo.grid_h, yo.grid_w, yo.window, yo.shift);
    gated_residual_backward_cpu(dy.as<float>(), dgate.as<float>(), dout.as<float>(), y.as<float>(),
                                gate.as<float>(), B, T, C, yo.active() ? &g : nullptr);
    if (!dbias_y.empty()) add_column_sums(op, dbias_y, dy, gw);
  }

  void residual_forward(Tensor out, Tensor a, Tensor b) override {
    check_elementwise("residual_forward", a.numel(), {{out, "out"}, {a, "a"}, {b, "b"}});
    residual_forward_cpu(out.as<float>(), a.as<float>(), b.as<float>(), a.numel());
  }

  void classifier_forward_backward(Tensor losses, Tensor logits, Tensor targets, int64_t V,
                                   float dloss) override {
    const char* op = "classifier_forward_backward";
    check_f32(logits, op, "logits");
    check_f32(losses, op, "losses");
    check_i32(targets, op, "targets");
    const int64_t Vp = logits.dim(-1);
    const int64_t N = rows_of(logits, Vp);
    FT_CHECK(V > 0 && V <= Vp, op, ": V=", V, " must be in [1, Vp=", Vp, "]");
    check_numel(losses, N, op, "losses");
    check_numel(targets, N, op, "targets");
    const int32_t* tg = targets.as<int32_t>();
    for (int64_t i = 0; i < N; ++i)
      FT_CHECK(tg[i] < V, op, ": target ", tg[i], " at position ", i, " is >= V=", V);
    classifier_forward_backward_cpu(losses.as<float>(), logits.as<float>(), tg, N, V, Vp,
                                    dloss);
  }

  double sum_squares(Tensor x) override {
    check_f32(x, "sum_squares", "x");
    return sum_squares_cpu(x.as<float>(), x.numel());
  }

  // ---- the update decided from values in this backend's memory (here: host memory) ----
  void sum_squares_runs_to(Tensor x, int64_t runs, int64_t stride, Tensor out) override {
    check_scalars(out, 1, "sum_squares_to");
    FT_CHECK(runs >= 1 && (runs == 1 || stride >= x.numel()), "sum_squares_runs_to: ", runs, " runs of ", x.numel(),
             " elements ", stride, " apart");
    double s = 0.0;
    if (!x.empty()) {
      check_f32(x, "sum_squares", "x");
      for (int64_t k = 0; k < runs; ++k) s += sum_squares_cpu(x.as<float>() + k * stride, x.numel());
    }
    out.as<double>()[0] = s;
  }
  void set_scalars(Tensor dst, std::span<const double> values) override {
    check_scalars(dst, values.size(), "set_scalars");
    std::copy(values.begin(), values.end(), dst.as<double>());
  }
  void update_control(Tensor loss, Tensor sum_squares, Tensor control, const UpdateRule& r) override {
    check_update_control(loss, sum_squares, control);
    update_control_host(loss.as<double>()[0], sum_squares.as<double>()[0], r, control.as<float>());
  }


  void adamw_update(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                    std::span<const ParamSlice> slices, const AdamWStep& s) override {
    const char* op = "adamw_update";
    check_f32(params, op, "params");
    check_f32(grads, op, "grads");
    check_f32(m, op, "m");
    check_f32(v, op, "v");
    FT_CHECK(master.empty(), op, ": the cpu backend trains fp32 parameters only; master must "
             "be empty, got ", master.shape_str());
    const int64_t n = params.numel();
    check_numel(grads, n, op, "grads");
    check_numel(m, n, op, "m");
    check_numel(v, n, op, "v");
    FT_CHECK(s.t >= 1, op, ": step count t=", s.t, " must be >= 1");
    float grad_scale = s.grad_scale;
    if (!s.control.empty()) {
      FT_CHECK(s.control.dtype == DType::f32 && s.control.numel() >= 2, op, ": control ", s.control.shape_str());
      if (s.control.as<float>()[1] == 0.f) return;  // the step's verdict: skip
      grad_scale = s.control.as<float>()[0];
    }
    for (const ParamSlice& sl : slices) {
      FT_CHECK(sl.offset >= 0 && sl.count >= 0 && sl.offset + sl.count <= n, op, ": slice [",
               sl.offset, ", ", sl.offset + sl.count, ") outside ", n, " parameters");
      adamw_update_cpu(params.as<float>() + sl.offset, grads.as<float>() + sl.offset,
                       m.as<float>() + sl.offset, v.as<float>() + sl.offset, sl.count, s.lr,
                       s.beta1, s.beta2, s.eps, s.weight_decay, sl.decay, grad_scale, s.t);
    }
  }

  // ---- generation (kv_attention.h) ----
  void kv_cache_store(Tensor kcache, Tensor vcache, Tensor qkv, Tensor start) override {
    int64_t b, t;
    kv::CacheDims cd;
    check_f32(qkv, "kv_cache_store", "qkv");
    kv::check_store(kcache, vcache, qkv, start, &b, &t, &cd);
    const int32_t* st = start.empty() ? nullptr : start.as<int32_t>();
    for (int64_t i = 0; st && i < b; ++i)
      FT_CHECK(st[i] >= 0 && st[i] + t <= cd.Tmax, "kv_cache_store: row ", i, " starts at ", st[i],
               ": past the cache's ", cd.Tmax, " positions");
    kv_cache_store_cpu(kcache.as<float>(), vcache.as<float>(), qkv.as<float>(), st, b, t, cd.C, cd.Tmax);
  }
  void attention_decode(Tensor out, Tensor qkv, Tensor kcache, Tensor vcache, Tensor lens,
                        int n_head) override {
    kv::CacheDims cd;
    check_f32(qkv, "attention_decode", "qkv");
    const int64_t G = kv::check_decode(out, qkv, kcache, vcache, lens, n_head, &cd);
    for (int64_t g = 0; g < G; ++g)
      FT_CHECK(lens.as<int32_t>()[g] >= 1 && lens.as<int32_t>()[g] <= cd.Tmax, "attention_decode: row ", g,
               " has ", lens.as<int32_t>()[g], " keys (1..", cd.Tmax, ")");
    attention_decode_cpu(out.as<float>(), qkv.as<float>(), kcache.as<float>(), vcache.as<float>(),
                         lens.as<int32_t>(), G, cd.C, cd.Tmax, n_head);
  }
  void argmax_rows(Tensor out, Tensor logits, int64_t V) override {
    check_f32(logits, "argmax_rows", "logits");
    const int64_t G = kv::check_argmax(out, logits, V);
    argmax_rows_cpu(out.as<int32_t>(), logits.as<float>(), G, V, logits.numel() / G);
  }

 private:
  // Broadcast ops: `full` tensors [B,T,C] shaped like `like` (3-d), `rows` tensors [B,C].
  static void check_broadcast(const char* op, const Tensor& like, std::initializer_list<Named> full,
                              std::initializer_list<Named> rows, int64_t* B, int64_t* T,
                              int64_t* C) {
    FT_CHECK(like.ndim == 3, op, ": ", like.shape_str(), " should be [B,T,C]");
    *B = like.dim(0);
    *T = like.dim(1);
    *C = like.dim(2);
    check_elementwise(op, *B * *T * *C, full);
    check_elementwise(op, *B * *C, rows);
  }

  // opt.seq_lens (host memory here): i32[B], each in [1, T]; nullptr when not given.
  static const int32_t* check_seq_lens(const char* op, const AttentionOptions& opt, int64_t B,
                                       int64_t T) {
    if (opt.seq_lens.empty()) return nullptr;
    check_i32(opt.seq_lens, op, "seq_lens");
    check_numel(opt.seq_lens, B, op, "seq_lens");
    const int32_t* l = opt.seq_lens.as<int32_t>();
    for (int64_t b = 0; b < B; ++b)
      FT_CHECK(l[b] >= 1 && l[b] <= T, op, ": seq_lens[", b, "]=", l[b], " outside [1, T=", T, "]");
    return l;
  }

  // opt.positions (host memory here): i32[B,T] of packed samples, nullptr when not given.
  // Only with causal attention and without seq_lens; every token starts a sample (0) or
  // continues the one before it (its position + 1), which also gives positions[b,t] <= t.
  static const int32_t* check_attention_positions(const char* op, const AttentionOptions& opt,
                                                  int64_t B, int64_t T) {
    if (opt.positions.empty()) return nullptr;
    FT_CHECK(opt.causal, op, ": positions (packed samples) need causal attention");
    FT_CHECK(opt.seq_lens.empty(), op, ": positions and seq_lens exclude each other (pad the "
             "last packed sample as a sample of its own instead)");
    check_i32(opt.positions, op, "positions");
    check_numel(opt.positions, B * T, op, "positions");
    const int32_t* p = opt.positions.as<int32_t>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const int32_t v = p[b * T + t];
        FT_CHECK(v == 0 || (t > 0 && v == p[b * T + t - 1] + 1), op, ": positions[", b, ",", t,
                 "]=", v, " neither starts a sample (0) nor follows position ",
                 t > 0 ? std::to_string(p[b * T + t - 1]) : std::string("(none: first token)"));
      }
    return p;
  }

  // out/dout [B,T,C], tokens [B,T] in [0, Vp), wte [Vp,C], wpe [maxT,C]; T <= maxT without
  // positions, else positions [B,T] in [0, maxT).
  static void check_embedding(const char* op, const Tensor& x, const Tensor& tokens,
                              const Tensor& wte, const Tensor& wpe, const Tensor& positions, int64_t* B,
                              int64_t* T, int64_t* C) {
    check_i32(tokens, op, "tokens");
    check_f32(x, op, "activation");
    check_f32(wte, op, "wte");
    FT_CHECK(tokens.ndim == 2, op, ": tokens ", tokens.shape_str(), " should be [B,T]");
    FT_CHECK(wte.ndim == 2, op, ": wte ", wte.shape_str(), " should be 2-d");
    *B = tokens.dim(0);
    *T = tokens.dim(1);
    *C = wte.dim(1);
    if (wpe.data) {
      check_f32(wpe, op, "wpe");
      FT_CHECK(wpe.ndim == 2 && wpe.dim(1) == *C, op, ": wpe ", wpe.shape_str(), " and wte ", wte.shape_str(),
               " differ in channels");
    } else {
      FT_CHECK(!positions.data, op, ": positions without a position table");
    }
    if (wpe.data && positions.data) {
      check_i32(positions, op, "positions");
      FT_CHECK(positions.numel() == tokens.numel(), op, ": positions ", positions.shape_str(), " and tokens ",
               tokens.shape_str(), " differ");
      const int32_t* ps = positions.as<int32_t>();
      for (int64_t i = 0; i < positions.numel(); ++i)
        FT_CHECK(ps[i] >= 0 && ps[i] < wpe.dim(0), op, ": position ", ps[i], " at ", i, " is outside [0, ",
                 wpe.dim(0), ")");
    } else if (wpe.data) {
      FT_CHECK(*T <= wpe.dim(0), op, ": T=", *T, " exceeds the ", wpe.dim(0), " positions of wpe");
    }
    check_numel(x, *B * *T * *C, op, "activation");
    const int32_t* tk = tokens.as<int32_t>();
    const int64_t Vp = wte.dim(0);
    for (int64_t i = 0; i < *B * *T; ++i)
      FT_CHECK(tk[i] >= 0 && tk[i] < Vp, op, ": token ", tk[i], " at position ", i,
               " is outside [0, ", Vp, ")");
  }

  // x (out or dinp) and inp [N,C]; p1, p2 [C] (w,b or dw,db), or both empty (no affine:
  // returns false); mean, rstd [N]
  static bool check_layernorm(const char* op, const Tensor& x, const char* xname,
                              const Tensor& inp, const Tensor& p1, const Tensor& p2,
                              const Tensor& mean, const Tensor& rstd, int64_t* N, int64_t* C) {
    const bool affine = !p1.empty() || !p2.empty();
    check_f32(x, op, xname);
    check_f32(inp, op, "inp");
    if (affine) {
      check_f32(p1, op, "weight");
      check_f32(p2, op, "bias");
    }
    check_f32(mean, op, "mean");
    check_f32(rstd, op, "rstd");
    *C = inp.dim(-1);
    *N = rows_of(inp, *C);
    check_numel(x, *N * *C, op, xname);
    if (affine) {
      check_numel(p1, *C, op, "weight");
      check_numel(p2, *C, op, "bias");
    }
    check_numel(mean, *N, op, "mean");
    check_numel(rstd, *N, op, "rstd");
    return affine;
  }

  // x (out or dout) [N,OC], inp [N,C], w [OC,C], bias [OC] or empty
  static void check_matmul(const char* op, const Tensor& x, const char* xname, const Tensor& inp,
                           const Tensor& w, const Tensor& bias, const char* bname, int64_t* N,
                           int64_t* C, int64_t* OC) {
    check_f32(x, op, xname);
    check_f32(inp, op, "inp");
    check_f32(w, op, "w");
    FT_CHECK(w.ndim == 2, op, ": w ", w.shape_str(), " should be [OC,C]");
    *OC = w.dim(0);
    *C = w.dim(1);
    FT_CHECK(inp.dim(-1) == *C, op, ": inp ", inp.shape_str(), " and w ", w.shape_str(),
             " differ in C");
    *N = rows_of(inp, *C);
    FT_CHECK(x.dim(-1) == *OC, op, ": ", xname, " ", x.shape_str(), " should end in OC=", *OC);
    check_numel(x, *N * *OC, op, xname);
    if (!bias.empty()) {
      check_f32(bias, op, bname);
      check_numel(bias, *OC, op, bname);
    }
  }

  // x (out or dout) [B,T,C], qkv [B,T,3C], saved >= B*NH*T*T floats
  static void check_attention(const char* op, const Tensor& x, const char* xname,
                              const Tensor& saved, const Tensor& qkv, int n_head, int64_t* B,
                              int64_t* T, int64_t* C) {
    check_f32(x, op, xname);
    check_f32(saved, op, "saved");
    check_f32(qkv, op, "qkv");
    FT_CHECK(qkv.ndim == 3 && qkv.dim(2) % 3 == 0, op, ": qkv ", qkv.shape_str(),
             " should be [B,T,3C]");
    *B = qkv.dim(0);
    *T = qkv.dim(1);
    *C = qkv.dim(2) / 3;
    FT_CHECK(n_head > 0 && *C % n_head == 0, op, ": C=", *C, " not divisible by n_head=",
             n_head);
    check_numel(x, *B * *T * *C, op, xname);
    FT_CHECK(saved.numel() >= *B * n_head * *T * *T, op, ": saved ", saved.shape_str(),
             " smaller than B*NH*T*T=", *B * n_head * *T * *T);
  }

};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace ft
