// Backend: the small interface every device implements (CPU now, CUDA next).
//
// The model (models/gpt2.*) calls only these functions; it never sees a device pointer type,
// a stream or a library handle. One implementation per device kind is compiled in
// (backend/cpu always, backend/cuda when the build has CUDA) and chosen at run time by
// --device. Ops take Tensor views into the device arena; shapes are in the comments.
//
// Gradient conventions (chosen so that no activation-gradient buffer needs zeroing):
//  - parameter gradients (dw, db, dwte, dwpe) ACCUMULATE (+=): gradient accumulation over
//    micro-batches is free, and the tied embedding collects both of its gradients.
//  - activation gradients OVERWRITE (=), except layernorm_backward's and rmsnorm_backward's
//    dinp, which ACCUMULATE: the residual stream's gradient is one buffer that each block's
//    two norms add into, which is exactly the residual connection's backward.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/op_options.h"
#include "backend/stream_handle.h"
#include "backend/update_rule.h"
#include "core/allocator.h"
#include "core/tensor.h"

namespace ft {

enum class DeviceKind { cpu, cuda };
enum class Precision { fp32, bf16, fp16 };
const char* device_name(DeviceKind d);
const char* precision_name(Precision p);


// One op a model will run, at the largest shape the plan allows: what the planner asks a
// backend about (workspace, saved state, whether it runs at all). A model lists every op of
// its step once per distinct shape; the backend answers for the whole list. Build them with
// the named constructors; unused fields stay 0.
struct OpShape {
  enum class Kind { embedding, layernorm, matmul, attention, classifier, elementwise, sum_squares, adamw,
                    bpr, norm_modulate, patch_embed, silu_matmul };
  Kind kind = Kind::elementwise;
  int64_t rows = 0;      // N = tokens (B*T) for row-wise ops; elements for elementwise/sum_squares/adamw
  int64_t cols = 0;      // C: input width (matmul C, layernorm C, embedding C); classifier V (real vocab);
                         // elementwise: the row width of its column sums (0: none)
  int64_t out_cols = 0;  // matmul OC; classifier Vp (padded row width); bpr K (negatives a row)
  int64_t batch = 0, seq = 0, heads = 0, head_size = 0;  // attention (B, T, NH, HS)
  bool causal = true;    // attention: AttentionOptions::causal
  bool varlen = false;   // attention: AttentionOptions::seq_lens will be given
  bool packed = false;   // attention: AttentionOptions::positions will be given

  static OpShape embedding(int64_t N, int64_t C) { return {Kind::embedding, N, C}; }
  static OpShape layernorm(int64_t N, int64_t C) { return {Kind::layernorm, N, C}; }
  static OpShape matmul(int64_t N, int64_t C, int64_t OC) { return {Kind::matmul, N, C, OC}; }
  static OpShape attention(int64_t B, int64_t T, int64_t NH, int64_t HS, bool causal = true,
                           bool varlen = false, bool packed = false) {
    OpShape o{Kind::attention, B * T, NH * HS, 0, B, T, NH, HS};
    o.causal = causal;
    o.varlen = varlen;
    o.packed = packed;
    return o;
  }
  static OpShape classifier(int64_t N, int64_t V, int64_t Vp) { return {Kind::classifier, N, V, Vp}; }
  // row_width > 0: the op also sums the columns of its rows of that width
  // (silu_backward_recompute with a bias gradient: the CUDA kernel's partials need scratch)
  static OpShape elementwise(int64_t n, int64_t row_width = 0) { return {Kind::elementwise, n, row_width}; }
  static OpShape sum_squares(int64_t n) { return {Kind::sum_squares, n}; }
  static OpShape adamw(int64_t n) { return {Kind::adamw, n}; }
  // bpr_forward_backward over N rows of width C with K negatives each (item_scores needs no
  // scratch and no shape of its own)
  static OpShape bpr(int64_t N, int64_t C, int64_t K) { return {Kind::bpr, N, C, K}; }
  // patch_embed_forward/backward: N rows of K = Kx + Kc inputs into OC columns (the
  // backward's per-row-group column sums need scratch)
  static OpShape patch_embed(int64_t N, int64_t K, int64_t OC) { return {Kind::patch_embed, N, K, OC}; }
  // silu_matmul_forward: out[N,OC] = silu(inp[N,C]) wᵀ + bias (CUDA: cuDNN's fused plans and
  // their workspace; the unfused path's product needs OpShape::matmul(N, C, OC) too)
  static OpShape silu_matmul(int64_t N, int64_t C, int64_t OC) { return {Kind::silu_matmul, N, C, OC}; }
  // norm_modulate_forward/backward on [B,T,C] (the backward's per-chunk column sums need scratch)
  static OpShape norm_modulate(int64_t B, int64_t T, int64_t C) {
    return {Kind::norm_modulate, B * T, C, 0, B, T};
  }
};


// Host memory the device copies into while the host goes on, for small per-step read-backs
// (the losses): start() queues the copy on the compute stream behind what is queued, wait()
// blocks until it has landed. CUDA: page-locked memory and an event; the CPU: ordinary
// memory, copied at once. Its destructor does not touch its backend, so a model may keep one
// past the backend's end (it is then only destroyed).
class HostReadback {
 public:
  virtual ~HostReadback() = default;
  virtual const void* data() const = 0;
  virtual size_t bytes() const = 0;
  // Queues data()[0, n) = src[0, n) (src: device memory, n <= bytes()).
  virtual void start(const void* src, size_t n) = 0;
  virtual void wait() = 0;
};

class Backend : public DeviceAllocator {
 public:
  virtual DeviceKind device() const = 0;
  virtual std::string describe() const = 0;  // e.g. "cpu (2 threads, OpenBLAS)"

  // ---- memory: only core/arena.cpp calls alloc/free (DeviceAllocator); one per arena ----
  // Device memory this process holds outside every alloc(): the CUDA context, library
  // handles and their workspaces, measured when the backend was created, plus an allowance
  // for the kernels libraries load lazily at the first step. The planner adds it to the
  // arena so that a budget bounds the whole process. 0 on the CPU.
  virtual size_t runtime_device_bytes() const { return 0; }
  // Measures that again, after something else took device memory outside the arena for the
  // whole run (NCCL's buffers, once the communicator exists).
  virtual void measure_runtime_again() {}
  // Host -> device, in the compute stream's order; `src` may be reused as soon as this returns
  // (CUDA stages it in page-locked memory and does not wait for the copy: host_staging.cu).
  // Work on another stream that reads `dst` must wait for an event recorded after this call.
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  // Page-locked host memory copy_to_device stages through (0: none), for the host plan.
  virtual size_t upload_staging_bytes() const { return 0; }
  // Host memory the device's libraries take at the first step, after the plan was made (the
  // host side of lazily loaded kernels, library caches): an allowance in the host plan.
  virtual size_t first_step_host_allowance() const { return 0; }
  // Host memory that copy_to_device uploads from directly, without staging (nullptr: this
  // device needs none, or none could be page-locked; use ordinary memory). Its owner promises what copy_to_device otherwise
  // guarantees itself: the bytes stay unchanged until the compute stream has run every copy
  // from them (an event recorded behind the copies, synchronize_event before rewriting).
  // CUDA: page-locked, so an upload is one DMA and the host never copies the bytes
  // (train/batch_loader.h: a micro-batch's fields).
  virtual void* alloc_upload_source(size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  virtual void free_upload_source(void* p) { (void)p; }
  // Host -> device on stream s, when src lies inside an upload source (whose owner fences its
  // reuse behind the compute stream: make the compute stream wait for an event recorded on s
  // after this before that fence); returns false and copies nothing otherwise, or when this
  // device has no streams (the caller then uses copy_to_device).
  virtual bool copy_to_device_on(StreamHandle s, void* dst, const void* src, size_t bytes) {
    (void)s, (void)dst, (void)src, (void)bytes;
    return false;
  }
  // Device -> host: returns once `dst` holds the bytes (the compute stream is synchronised).
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(Tensor t) = 0;
  virtual void synchronize() = 0;
  // Test hook (FT_TEST_DEVICE_FAULT_AT): leaves the device in the state a faulting kernel
  // does, so that tests can check how a run ends then. CUDA: a kernel writes through an
  // invalid address (a sticky cudaErrorIllegalAddress, seen at the next checked call); the
  // CPU has no such state and throws the InternalError a fault would become.
  virtual void fault_for_test() { throw InternalError("a device fault injected by FT_TEST_DEVICE_FAULT_AT (test hook)"); }
  // Free and total device memory, for the budget (the CPU reports host memory).
  virtual void mem_info(size_t* free_bytes, size_t* total_bytes) = 0;

  // ---- planning: asked per op shape (OpShape) before anything is allocated --------------
  // Scratch every op shares (per-thread partial sums on the CPU; cuBLASLt/cuDNN workspaces
  // on CUDA): enough for any one of `ops` (they run one at a time). The planner asks for the
  // size, places it in the arena, and hands it over once with set_workspace. CUDA builds and
  // caches cuDNN's plan for every attention shape here, so their workspace is planned.
  virtual size_t workspace_bytes(std::span<const OpShape> ops, Precision p) const = 0;
  virtual void set_workspace(void* p, size_t bytes) = 0;
  // "" when this backend runs the op at this precision, else the reason it cannot.
  virtual std::string unsupported(const OpShape& op, Precision p) const = 0;
  // What attention keeps from forward for backward: probabilities B*NH*T*T on the CPU,
  // per-row log-sum-exp B*NH*T (fp32) with fused attention on CUDA.
  virtual size_t attention_saved_bytes(const OpShape& attn, Precision p) const = 0;


  // ---- ops ------------------------------------------------------------------------------
  // out[B,T,C] = wte[tokens[b,t]] + wpe[p(b,t)], p(b,t) = t, or positions[b,t] when the
  // optional device i32[B,T] positions is given (samples packed into one row restart at 0;
  // a decode step's one token sits at its own position). Every position < rows of wpe.
  // wpe may be empty (then positions must be too): out = wte[tokens], a row gather (the
  // recommender gathers item and hidden rows with it); the backward then skips dwpe.
  virtual void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe,
                                 Tensor positions = Tensor()) = 0;
  // dwte[V,C] += ..., dwpe[maxT,C] += ... from dout[B,T,C], with the forward's positions.
  // Deterministic: the same bits for the same inputs.
  virtual void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                  Tensor positions = Tensor()) = 0;

  // out[N,C] = (inp - mean) * rstd * w + b; mean[N], rstd[N] saved (fp32). w and b both
  // empty: no affine, out = (inp - mean) * rstd (DiT's LayerNorm(elementwise_affine=False)).
  virtual void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w,
                                 Tensor b) = 0;
  // dinp[N,C] += ..., dw[C] += ..., db[C] += ... Without affine (w empty) dw and db must be
  // empty too, and only dinp is computed.
  virtual void layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp,
                                  Tensor w, Tensor mean, Tensor rstd) = 0;

  // out[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC] (bias may be empty)
  virtual void matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias) = 0;
  // dinp[N,C] = dout @ w (skipped if dinp empty); dw[OC,C] += dout^T @ inp (skipped if dw
  // empty: a later call then computes it, with dinp empty); dbias[OC] += sum_n dout (skipped
  // if empty; must be empty when dw is); with GradWrite::overwrite, = instead of +=. Without
  // dw, inp is not read and may be empty (dinp gives the shape).
  virtual void matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp,
                               Tensor w, GradWrite gw = GradWrite::add) = 0;
  // out[C] += sum over the rows of x[..., L] of its columns col0 .. col0+C-1 (= with
  // GradWrite::overwrite): the bias gradient of one part of a product's outputs, read in place
  // (the queries' third of attention's qkv bias: models/attention_bias.h).
  virtual void column_sums(Tensor out, Tensor x, int64_t col0, GradWrite gw = GradWrite::add) = 0;

  // Multi-head attention, causal unless opt says otherwise (and with padding masks when
  // opt.seq_lens is given, or kept inside packed samples when opt.positions is). qkv[B,T,3C] holds q,k,v side by side (GPT-2 c_attn layout);
  // out[B,T,C]; saved: see attention_saved_bytes. Scores are scaled by 1/sqrt(C/n_head).
  virtual void attention_forward(Tensor out, Tensor saved, Tensor qkv, int n_head,
                                 const AttentionOptions& opt = {}) = 0;
  // dqkv[B,T,3C] = ... (overwrite); opt must be the forward's.
  virtual void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out,
                                  Tensor saved, int n_head, const AttentionOptions& opt = {}) = 0;

  // GELU, tanh approximation (GPT-2's): out = 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))
  virtual void gelu_forward(Tensor out, Tensor inp) = 0;
  virtual void gelu_backward(Tensor dinp, Tensor inp, Tensor dout) = 0;

  // SiLU (swish): out = x * sigmoid(x). dinp = silu'(inp) * dout, overwritten; both are
  // element-wise and safe in place (out == inp, dinp == dout).
  virtual void silu_forward(Tensor out, Tensor inp) = 0;
  virtual void silu_backward(Tensor dinp, Tensor inp, Tensor dout) = 0;
  // The second product of a SiLU MLP: out[N,OC] = silu(inp)[N,C] w[OC,C]ᵀ + bias[OC] (bias
  // optional). act [N,C] (inp's dtype) is room the op may write silu(inp) into as its product's
  // operand; what it holds afterwards is unspecified. Here: that separate pass and product.
  // CUDA may instead run the SiLU as a prologue of cuDNN's fused product (no pass over act),
  // where the first call of a shape measured it faster (FT_SILU_MATMUL); the workspace must be
  // sized with OpShape::silu_matmul.
  virtual void silu_matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, Tensor act) {
    silu_forward(act, inp);
    matmul_forward(out, act, w, bias);
  }
  // silu_backward that also writes out = silu(inp): the forward's output recomputed in the
  // pass that reads inp anyway, so a model need not keep it (CDEIT's MLP). out may alias inp
  // and dinp may alias dout (each element is read before it is written). dbias (optional,
  // [H] for inp [..., H]): the bias gradient of the product that wrote inp, the column sums
  // of dinp over all rows, added (GradWrite::add) or written, from the same pass (instead
  // of a reduction over dinp in that product's matmul_backward). out may be empty: silu(inp)
  // is not written, for a model that kept it from the forward (saves the [N,H] store).
  virtual void silu_backward_recompute(Tensor dinp, Tensor out, Tensor inp, Tensor dout, Tensor dbias = Tensor(),
                                       GradWrite gw = GradWrite::add) = 0;

  // adaLN modulation (DiT), broadcast over T: out[B,T,C] = x[B,T,C] * (1 + scale[B,C]) +
  // shift[B,C]. out may alias x.
  virtual void modulate_forward(Tensor out, Tensor x, Tensor shift, Tensor scale) = 0;
  // dx[B,T,C] = dout * (1 + scale); dshift[B,C] = sum_t dout; dscale[B,C] = sum_t dout * x.
  // All three OVERWRITE (they are activation gradients: the conditioning vector's gradient
  // is summed by the product that made shift/scale). Sums over t run in a fixed order
  // (deterministic). dx may alias dout.
  virtual void modulate_backward(Tensor dx, Tensor dshift, Tensor dscale, Tensor dout, Tensor x,
                                 Tensor scale) = 0;

  // Fused adaLN input (DiT / CDEIT): a no-affine LayerNorm (eps kLayerNormEps, backend/cpu/
  // layernorm.h) or RMSNorm (eps kRmsNormEps, backend/diffusion_shapes.h), then modulate,
  // optionally written straight into Swin window order. It replaces layernorm_forward /
  // rmsnorm_forward + modulate_forward (+ window_partition) and keeps only mean/rstd for the
  // backward, which recomputes xhat (the separate ops also keep the normalized tensor).
  // Checks: backend/norm_modulate_shapes.h; CPU backend/cpu/norm_modulate.*, CUDA
  // backend/cuda/norm_modulate.cu (its backward needs the workspace sized with
  // OpShape::norm_modulate).
  //   out[B,T,C]: out[r] = xhat[src(r)] * (1 + scale[b]) + shift[b], b = r / T,
  //   xhat = (x - mean) * rstd (layer) or x * rstd (rms); statistics per INPUT (grid) row,
  //   saved as f32: mean[B*T] (layer; must be empty for rms), rstd[B*T]. src(r) = r, or with
  //   window > 0 window::partition_src(g, r), g = {B, grid_h, grid_w, C, window, shift}
  //   (out is then the [B*nW, w*w, C] windows, which out may also be shaped as; T must be
  //   grid_h*grid_w). The arithmetic of the separate ops, except that xhat is never rounded
  //   to the storage type. inp, out, dout, dinp: one float dtype (f32 only on the CPU);
  //   shift, scale, dshift, dscale [B,C] the same. out must not alias inp.
  virtual void norm_modulate_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor shift, Tensor scale,
                                     const NormModulateOptions& o) = 0;
  // From dout (out's layout): g = dout * (1 + scale[b]); dinp[src(r)] += the norm's backward
  // of g (ACCUMULATES, like layernorm_backward's dinp: the residual stream's gradient; with
  // o.overwrite_dinp, dinp[src(r)] = it);
  // dshift[b,c] = sum over b's rows of dout, dscale[b,c] = sum of dout * xhat, both
  // OVERWRITTEN and summed in a fixed order (the same bits run to run). xhat is recomputed
  // from inp, mean, rstd. dinp must not alias dout.
  virtual void norm_modulate_backward(Tensor dinp, Tensor dshift, Tensor dscale, Tensor dout, Tensor inp,
                                      Tensor mean, Tensor rstd, Tensor scale, const NormModulateOptions& o) = 0;

  // The block's middle in one call (DiT / CDEIT): the attention branch's gated residual
  // r = res + gate * y (gated_residual_forward, y in y_order), then norm_modulate_forward(out,
  // mean, rstd, r, shift, scale, o) on r as stored. The same results as the two calls, which
  // this default runs (their checks apply); CUDA does both in one pass over the rows, which
  // saves reading r back.
  virtual void gated_residual_norm_modulate_forward(Tensor r, Tensor out, Tensor mean, Tensor rstd, Tensor res,
                                                    Tensor y, Tensor gate, const WindowOrder& y_order, Tensor shift,
                                                    Tensor scale, const NormModulateOptions& o);
  // Its backward (ResidualNormGrads): the two ops' backwards; CUDA has one pass that writes dr
  // and, from the registers, dy and the sums of dgate and dbias_y (FT_RESIDUAL_NORM=forward or
  // separate: the two kernels).
  virtual void norm_modulate_gated_residual_backward(const ResidualNormGrads& g);

  // Gated residual (DiT): out[B,T,C] = res[B,T,C] + gate[B,C] * y[B,T,C]. out may alias res.
  // With y_order active, y is in window order (out's token t reads y's row of t): CDEIT's
  // attention projection, without the window_reverse copy.
  virtual void gated_residual_forward(Tensor out, Tensor res, Tensor y, Tensor gate, const WindowOrder& y_order) = 0;
  void gated_residual_forward(Tensor out, Tensor res, Tensor y, Tensor gate) {
    gated_residual_forward(out, res, y, gate, WindowOrder{});
  }
  // dy[B,T,C] = gate * dout and dgate[B,C] = sum_t dout * y, both OVERWRITTEN (deterministic
  // sums). The residual's gradient is dout itself, which the caller keeps using, so there is
  // no dres output: dy must therefore not alias dout (it may alias y). With y_order active,
  // y and dy are in window order (dout in token order): dy is what window_partition of the
  // token-order gradient would give. dbias_y (optional, [C]): the bias gradient of the product
  // that wrote y, the column sums of dy over all rows, added (GradWrite::add) or written, from
  // the same pass.
  virtual void gated_residual_backward(Tensor dy, Tensor dgate, Tensor dout, Tensor y, Tensor gate,
                                       const WindowOrder& y_order, Tensor dbias_y = Tensor(),
                                       GradWrite gw = GradWrite::add) = 0;
  void gated_residual_backward(Tensor dy, Tensor dgate, Tensor dout, Tensor y, Tensor gate) {
    gated_residual_backward(dy, dgate, dout, y, gate, WindowOrder{});
  }

  // The MLP's first product with its GELU: pre = inp @ w^T + bias (kept for backward),
  // out = gelu(pre). A backend may fuse the GELU into the product's epilogue; this default
  // runs the two ops.
  virtual void matmul_gelu_forward(Tensor pre, Tensor out, Tensor inp, Tensor w, Tensor bias) {
    matmul_forward(pre, inp, w, bias);
    gelu_forward(out, pre);
  }
  // Backward of the product that follows a GELU, with the GELU's backward applied to its
  // input gradient: dpre = (dout @ w) * gelu'(pre); dw, dbias accumulate as in
  // matmul_backward. A backend may fuse it into the product's epilogue; the default runs
  // matmul_backward then an in-place gelu_backward (both elementwise-safe in place).
  // dpre_bias (optional) is the gradient of the bias inside pre, i.e. colsum(dpre): a backend
  // that gets it from the same epilogue adds it (writes it under GradWrite::overwrite) and
  // returns true; false leaves it untouched, and the caller passes that bias to the product
  // that consumes dpre as usual. The default returns false.
  virtual bool matmul_backward_gelu(Tensor dpre, Tensor dw, Tensor dbias, Tensor dout, Tensor inp,
                                    Tensor w, Tensor pre, GradWrite gw = GradWrite::add,
                                    Tensor dpre_bias = Tensor()) {
    (void)dpre_bias;
    matmul_backward(dpre, dw, dbias, dout, inp, w, gw);
    gelu_backward(dpre, pre, dpre);
    return false;
  }

  // out = a + b (same shape)
  virtual void residual_forward(Tensor out, Tensor a, Tensor b) = 0;

  // A projection and the residual connection after it: out[N,OC] = inp[N,C] @ w[OC,C]^T +
  // bias[OC] + residual[N,OC] (residual must not alias out). A backend may fuse the add into
  // the product's epilogue, so the residual stream is read once by the product instead of
  // being written, re-read and re-written by a separate add; the default runs the two ops.
  virtual void matmul_residual_forward(Tensor out, Tensor inp, Tensor w, Tensor bias,
                                       Tensor residual) {
    matmul_forward(out, inp, w, bias);
    residual_forward(out, out, residual);
  }

  // Fused softmax + cross-entropy + its gradient, in place. logits[B,T,Vp] in; on return
  // logits holds dlogits = (softmax - onehot(target)) * dloss for columns < V, 0 past V.
  // losses[B,T] (fp32) receives per-token -log p(target). Targets < 0 are ignored (loss 0,
  // gradient 0). dloss is the weight of each token in the mean loss (1 / tokens in the batch).
  // With dloss == 0 only the losses are computed (evaluation) and logits are left as is.
  virtual void classifier_forward_backward(Tensor losses, Tensor logits, Tensor targets,
                                           int64_t V, float dloss) = 0;

  // sum of squares of a flat fp32/bf16 buffer, returned to the host (grad-norm clipping)
  virtual double sum_squares(Tensor x) = 0;
  // The same into out[0] (f64, this backend's memory), queued: the host does not wait. x may
  // be empty (0). Bit for bit what sum_squares() returns.
  void sum_squares_to(Tensor x, Tensor out) { sum_squares_runs_to(x, 1, 0, out); }
  // The same over `runs` runs of x.numel() elements, run k starting k * stride elements after
  // x.data (a strided view: a rank's pieces of ZeRO-1's gradient layout,
  // optim/shard_layout.h), summed in run order. runs == 1 is sum_squares_to.
  virtual void sum_squares_runs_to(Tensor x, int64_t runs, int64_t stride, Tensor out) = 0;
  // dst[i] = values[i] (dst f64 in this backend's memory, at most 8 values), queued behind
  // what the compute stream holds (no host memory is read later: the values travel with the
  // launch).
  virtual void set_scalars(Tensor dst, std::span<const double> values) = 0;
  // control (f32 [2], AdamWStep::control) from loss and sum_squares (f64 [1] each, this
  // backend's memory) by update_control_host's rule, queued.
  virtual void update_control(Tensor loss, Tensor sum_squares, Tensor control, const UpdateRule& r) = 0;
  // AdamW over params/grads/m/v (flat, same layout), slice by slice, decoupled decay.
  // master is empty for fp32 parameters; for bf16 it holds the fp32 master weights.
  virtual void adamw_update(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v,
                            std::span<const ParamSlice> slices, const AdamWStep& s) = 0;
  // An exponential moving average of the weights (train/runtime.h, the EMA of --ema-decay):
  //   out[i] = out[i] - (out[i] - src[i]) * (1 - decay)      (ema_pytorch's update, in f32)
  // rounded to out's dtype. decay == 0 is a converting copy out[i] = src[i] that never reads
  // out (it may hold anything: the EMA's first update, and swapping weights in and out for
  // evaluation). src: f32 (master weights, or fp32 params); out: f32 or the parameter dtype
  // (CUDA; f32 on the CPU); same numel; decay in [0, 1].
  virtual void ema_update(Tensor out, Tensor src, float decay) = 0;

  // ---- streams and events: the seam for communication beside compute --------------------
  // Every op runs on compute_stream(). A second stream (e.g. for collectives) orders itself
  // against it with events, device-side: record_event(e, compute) then
  // stream_wait_event(comm, e) makes comm's later work wait for everything compute had
  // queued, without blocking the host. The defaults are the synchronous CPU's: null handles,
  // and nothing to wait for (every op has finished when it returns).
  virtual StreamHandle compute_stream() { return {}; }
  virtual StreamHandle create_stream(StreamPriority priority) {
    (void)priority;
    return {};
  }
  virtual void destroy_stream(StreamHandle s) { (void)s; }
  virtual EventHandle create_event() { return {}; }
  virtual void destroy_event(EventHandle e) { (void)e; }
  // e completes when s reaches this point
  virtual void record_event(EventHandle e, StreamHandle s) { (void)e, (void)s; }
  // s's later work waits for e (device-side, the host does not block)
  virtual void stream_wait_event(StreamHandle s, EventHandle e) { (void)s, (void)e; }
  // the host waits until s has run everything queued on it
  virtual void synchronize_stream(StreamHandle s) { (void)s; }
  // the host waits until e has completed (callable from any thread of the process)
  virtual void synchronize_event(EventHandle e) { (void)e; }

  // ---- read-backs that do not stop the host ---------------------------------------------
  // A host buffer of `bytes` the device copies into while the host goes on (HostReadback).
  virtual std::unique_ptr<HostReadback> make_host_readback(size_t bytes);

  // ---- generation with a KV cache (backend/cpu/kv_attention.*, backend/cuda/kv_attention.cu)
  // A cache holds one layer's keys (or values) [G, Tmax, C] in the activation dtype: row g
  // is one sequence, position p its p-th token, heads side by side as in qkv.
  // Copies the keys and values of qkv[b,t,3C] (columns [C,2C) and [2C,3C)) into
  // kcache/vcache[>=b, Tmax, C] at positions start[i] .. start[i]+t-1 of row i. start: device
  // i32[b] (a decode step's one token at its own position), or empty for 0 (a prefill).
  // Positions past Tmax are the caller's bug (the CUDA kernel skips them).
  virtual void kv_cache_store(Tensor kcache, Tensor vcache, Tensor qkv, Tensor start) = 0;
  // One query per row (a decode step): out[G,C] = per head softmax(q k^T / sqrt(C/n_head)) v,
  // where row g's query is qkv[g, 0:C] (qkv [G,3C]: only q is read; its k, v are stored by
  // kv_cache_store first) and its keys and values are kcache/vcache[g, 0:lens[g]] (lens:
  // device i32[G], each in [1, Tmax]; no causal mask is needed: a row's keys are its past).
  virtual void attention_decode(Tensor out, Tensor qkv, Tensor kcache, Tensor vcache, Tensor lens,
                                int n_head) = 0;
  // Greedy decoding without copying logits to the host: out (device i32[G]) = the first index
  // of the largest of logits[g, 0:V] (rows of logits may be wider: Vp). NaN is never chosen.
  virtual void argmax_rows(Tensor out, Tensor logits, int64_t V) = 0;

  // ---- recommender head (backend/cpu/bpr.*, backend/cuda/bpr.cu) ------------------------
  // Fused BPR scoring + loss + gradients over a tied item table. h[N,C] hidden states, E[Vp,C]
  // item embeddings (the input embedding's table), both in the activation dtype; pos: device
  // i32[N], one positive item a row, < 0 for a padding row; neg: device i32[N,K], K sampled
  // negatives a row. With x_nk = h_n . (E[pos_n] - E[neg_nk]) and g_nk = sigmoid(x_nk) - 1:
  //   losses[n] (f32, overwritten) = sum_k -log sigmoid(x_nk)    (0 for a padding row)
  //   with dloss != 0:  dh[n] (overwritten) = dloss * sum_k g_nk (E[pos_n] - E[neg_nk]),
  //                     dE[pos_n] += dloss * sum_k g_nk h_n,  dE[neg_nk] -= dloss * g_nk h_n
  //                     (a padding row: dh 0, nothing added to dE)
  //   dloss == 0: losses only (evaluation); dh and dE untouched (may be empty).
  // The log-sigmoid is computed stably (softplus form); sums in fp32 or wider. The scatter
  // into dE is deterministic (same bits for the same inputs) whatever repeats among the items.
  // Non-padding ids must be in [0, Vp): the CPU backend checks; CUDA trusts device data but
  // never reads out of bounds (an out-of-range negative's term is dropped, an out-of-range
  // positive makes the row a padding row). Needs the workspace sized with OpShape::bpr.
  virtual void bpr_forward_backward(Tensor losses, Tensor dh, Tensor dE, Tensor h, Tensor E,
                                    Tensor pos, Tensor neg, float dloss) = 0;
  // Candidate scores for evaluation: out[n, m] (f32) = h_n . E[items[n, m]]; items: device
  // i32[N, M] in [0, Vp) (the CPU backend checks; CUDA writes NaN for an out-of-range id).
  // Full ranking against every item is a matmul_forward of h against E instead.
  virtual void item_scores(Tensor out, Tensor h, Tensor E, Tensor items) = 0;

  // ---- diffusion (backend/cpu/diffusion.*, backend/cuda/diffusion.cu; patchify in
  // backend/cpu/patchify.*, backend/cuda/patchify.cu; RMSNorm in backend/cpu/rmsnorm.*,
  // backend/cuda/rmsnorm.cu) ---------------------------------------------------------------
  // DiT / CDEIT patch embedding input: img[B,Cin,H,W] -> out[B,T,Cin*p*p], T = (H/p)*(W/p),
  // token t = ty*(W/p) + tx (row-major over the patch grid), feature f = (c*p + py)*p + px:
  // out[b,t,f] = img[b, c, ty*p+py, tx*p+px]. That is the flattening of a Conv2d(kernel =
  // stride = p) weight [hidden, Cin, p, p], so the patch embedding is then matmul_forward with
  // w[hidden, Cin*p*p]. H and W must be multiples of p. img and out may differ in dtype
  // (images arrive as f32, activations may be bf16/f16); the CPU backend is f32 only. out must
  // not alias img.
  virtual void patchify(Tensor out, Tensor img, int p) = 0;
  // The exact inverse: tokens[B,T,C*p*p] in the same (c, py, px) feature order -> img[B,C,H,W].
  // Both are permutations, so each one's backward is the other (dimg = unpatchify(dout),
  // dtokens = patchify(dimg)); neither has a backward of its own.
  virtual void unpatchify(Tensor img, Tensor tokens, int p) = 0;
  // Per sample b over its n = x.numel()/B elements (x[B,...], B = x.dim(0)):
  //   out[b,i] = coef[b,0]*x[b,i] + coef[b,1]*y[b,i] + coef[b,2]*z,   z = diffusion_normal(
  //   seed, keys[b], i) (backend/diffusion_rng.h: Philox4x32-10 + Box-Muller, a function of
  //   (seed, key, i) only: the same noise for a sample key whatever B, the batch's other
  //   samples, the thread count, the device or the world size).
  // Training's q_sample is x = x0, coef (sqrt(ab_t), 0, sqrt(1-ab_t)); a DDIM step is x = x_t,
  // y = the model's prediction. y may be empty (coef[b,1] is then ignored); noise_out, if not
  // empty, receives z (the eps target). coef: device f32[B,3]; keys: device i32[B] (read as
  // uint32). x, y, out, noise_out: B*n elements, each f32 or the activation dtype (CUDA; any
  // mix; f32 on the CPU). out may alias x or y when it has their dtype; noise_out aliases nothing.
  virtual void diffusion_mix(Tensor out, Tensor noise_out, Tensor x, Tensor y, Tensor coef,
                             Tensor keys, uint64_t seed) = 0;
  // Per-sample mean squared error: pred[B,...] (n = pred.numel()/B elements a sample, the
  // activation dtype), target (B*n elements, f32 or the activation dtype);
  //   losses[b] (f32, overwritten) = mean_i (pred[b,i] - target[b,i])^2
  //   dloss != 0: dpred (B*n, pred's dtype, overwritten) = dloss * 2 (pred - target) / n, i.e.
  //   the gradient of dloss * sum_b losses[b]; dloss == 0: losses only, dpred may be empty.
  // Sums in fp32 or wider, in a fixed order (the same bits for the same inputs).
  virtual void mse_loss(Tensor losses, Tensor dpred, Tensor pred, Tensor target, float dloss) = 0;
  // DiT's sinusoidal timestep embedding (TimestepEmbedder.timestep_embedding): t device
  // f32[B], out[B,D] (activation dtype), half = D/2, freq_i = exp(-ln(max_period) * i / half)
  // (computed in double, rounded to f32), a = t_b * freq_i (f32):
  //   out[b,i] = cos(a), out[b,half+i] = sin(a) for i < half (cos first); D odd: the last
  //   column is 0. No backward (t is not learned).
  virtual void timestep_embedding(Tensor out, Tensor t, float max_period = 10000.0f) = 0;
  // A patch embedding as one pass (CDEIT's input layer: the 2x2 patches of the noisy image
  // and of the condition map, K = 4 each, into W = 512 columns): a product with a narrow
  // inner dimension, from one or two inputs, with its bias and a table added by position:
  //   out[n, o] = sum_k x[n,k] wx[o,k] + sum_k c[n,k] wc[o,k] + bias[o] + table[n % T, o]
  // x [..., Kx] (N rows), wx [O, Kx]; c [..., Kc] and wc [O, Kc] both given or both empty;
  // bias [O] and table [T, O] (N a multiple of T) may be empty. out [..., O] (overwritten)
  // aliases nothing. Sums in fp32 from the bias (and table) up, rounded once (CUDA: once per 32
  // inputs, for patch embeddings of more than 32).
  // cuBLASLt runs such a product on a generic tile and a residual add as a second kernel
  // over out; here out is written once (docs/PERFORMANCE.md, session 14).
  virtual void patch_embed_forward(Tensor out, Tensor x, Tensor wx, Tensor c, Tensor wc, Tensor bias,
                                   Tensor table) = 0;
  // Its weight gradients (x and c are data: no input gradients), in one pass over dout:
  //   dwx[o,k] (+)= sum_n dout[n,o] x[n,k],  dwc[o,k] (+)= sum_n dout[n,o] c[n,k],
  //   dbias[o] (+)= sum_n dout[n,o]
  // added (GradWrite::add) or written; dwc / dbias empty where the forward had no c / bias.
  // Sums in fp32 in a fixed order (the same bits for the same inputs and device). Needs the
  // workspace sized with OpShape::patch_embed.
  virtual void patch_embed_backward(Tensor dwx, Tensor dwc, Tensor dbias, Tensor dout, Tensor x, Tensor c,
                                    GradWrite gw) = 0;
  // RMSNorm without affine (CDEIT's): out[N,C] = inp * rstd, rstd[N] (f32, saved) =
  // 1/sqrt(mean_c inp^2 + eps), eps = kRmsNormEps = 1e-6 (backend/diffusion_shapes.h:
  // CDEIT's own RMSNorm; torch.nn.RMSNorm(eps=None) would use finfo(dtype).eps instead).
  virtual void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp) = 0;
  // dinp[N,C] += rstd * (dout - xhat * mean_c(dout * xhat)), xhat = inp * rstd: it
  // ACCUMULATES, as layernorm_backward's dinp does (the residual stream's gradient).
  virtual void rmsnorm_backward(Tensor dinp, Tensor dout, Tensor inp, Tensor rstd) = 0;

  // ---- window ops (CDEIT's U-shaped Swin stages; backend/cpu/window_ops.*,
  // backend/cuda/window_ops.cu; token maps and shape checks: backend/window_shapes.h) --------
  // Tokens of a batch of grids x[B, H*W, C] (H = grid_h, W = grid_w, token y*W + x) are moved
  // as whole rows of C features; every op but upsample's backward is a pure permutation or
  // gather (exact), and each permutation's backward is its inverse. The tensors must not
  // alias. On CUDA the two sides may differ in float dtype; the CPU is f32 only.
  // windows[B*nW, w*w, C] = the w x w windows of x (nW = (H/w)*(W/w), sample-major, windows
  // and their tokens row-major), after rolling the grid by -shift along both axes (Swin's
  // shifted windows; 0 <= shift < w). Attention then runs non-causally on the windows as a
  // batch of B*nW sequences of w*w tokens. w must divide H and W.
  virtual void window_partition(Tensor windows, Tensor x, int grid_h, int grid_w, int window, int shift) = 0;
  // The inverse (and window_partition's backward): x[B, H*W, C] from windows[B*nW, w*w, C].
  virtual void window_reverse(Tensor x, Tensor windows, int grid_h, int grid_w, int window, int shift) = 0;
  // Swin's patch merging: out[B, (H/2)*(W/2), 4C], token (i, j) = the 2x2 block's tokens
  // (2i+dy, 2j+dx) concatenated in the order (dy, dx) = (0,0), (1,0), (0,1), (1,1). H, W even.
  virtual void patch_merge(Tensor out, Tensor x, int grid_h, int grid_w) = 0;
  // The inverse (and patch_merge's backward): x[B, H*W, C] from merged[B, H*W/4, 4C].
  virtual void patch_split(Tensor x, Tensor merged, int grid_h, int grid_w) = 0;
  // Nearest-neighbour upsampling x2: out[B, 2H*2W, C], token (Y, X) = x's (Y/2, X/2).
  virtual void upsample_nearest(Tensor out, Tensor x, int grid_h, int grid_w) = 0;
  // Its backward: dx[B, H*W, C] (overwritten) = the sum of dout's 2x2 block over each token,
  // in the fixed order (0,0), (0,1), (1,0), (1,1) (deterministic).
  virtual void upsample_nearest_backward(Tensor dx, Tensor dout, int grid_h, int grid_w) = 0;
  // out[B, W*H, C] = x[B, H*W, C] with the grid's two axes swapped (out token x*H + y = x's
  // token y*W + x); its backward is grid_transpose(dx, dout, grid_w, grid_h). The DiT blocks
  // use it to regroup one adaLN product [b, n, D] into n contiguous [b, D] chunks.
  virtual void grid_transpose(Tensor out, Tensor x, int grid_h, int grid_w) = 0;
};

// Creates the backend for a device kind; throws UserError if this build or machine lacks it.
// cuda_device: the CUDA device ordinal (one process per GPU), -1 for the current device.
std::unique_ptr<Backend> make_backend(DeviceKind kind, int cuda_device = -1);
// True when a CUDA device is usable (build has CUDA and a device answers).
bool cuda_available();
// Visible CUDA devices (0 without a CUDA build, driver or device).
int cuda_devices();
// Throws the UserError `--device cuda` gets where no GPU can run it: this build has no CUDA
// backend, or no CUDA device is visible (a driver missing, CUDA_VISIBLE_DEVICES empty).
void require_cuda_device();
// What the CUDA backend was built with ("not built" without one), for --version.
std::string cuda_build_description();

}  // namespace ft
