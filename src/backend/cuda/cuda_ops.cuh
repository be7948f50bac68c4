// Launchers of the CUDA backend's op families, one .cu file per family. Each takes raw device
// pointers, sizes and a Ctx (stream + scratch); CudaBackend checks dtypes and shapes first.
// Scratch needs are reported by the *_scratch functions so workspace_bytes can sum them.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "backend/backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/switches.h"

namespace ft::window {
struct Geom;  // backend/window_shapes.h
}

namespace ft::cuda {

// ---- embedding.cu ----
// positions: null (row t of wpe for position t) or device i32[B*T] rows of wpe.
void embedding_forward(const Ctx& c, DType t, void* out, const int* tokens, const void* wte,
                       const void* wpe, int64_t B, int64_t T, int64_t C, const int* positions);
size_t embedding_backward_scratch(int64_t N);
// Deterministic: tokens are radix-sorted (stable) and each vocabulary row sums its
// positions in order, in fp32, then adds once into dwte. With positions (device i32[B*T],
// each < maxT) dwpe is summed the same way; without, by one thread per (t, channel pack).
void embedding_backward(const Ctx& c, DType t, void* dwte, void* dwpe, const void* dout,
                        const int* tokens, int64_t B, int64_t T, int64_t C, int64_t Vp,
                        const int* positions, int64_t maxT);

// ---- layernorm.cu ----  w and b null (forward), w, dw and db null (backward): no affine
void layernorm_forward(const Ctx& c, DType t, void* out, float* mean, float* rstd,
                       const void* inp, const void* w, const void* b, int64_t N, int64_t C);
size_t layernorm_backward_scratch(int64_t N, int64_t C, int num_sms);
void layernorm_backward(const Ctx& c, DType t, void* dinp, void* dw, void* db, const void* dout,
                        const void* inp, const void* w, const float* mean, const float* rstd,
                        int64_t N, int64_t C);

// ---- matmul.cu ----
// cuBLASLt state: handle, its workspace (a slice of the planned workspace), algorithm cache.
struct MatmulState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::unordered_map<uint64_t, cublasLtMatmulAlgo_t> algos;
  std::unordered_set<uint64_t> unsupported;  // epilogue products cuBLASLt cannot run
  // dbias through the dW product's BGRADB epilogue (else a separate reduction over dout);
  // strict: throw where cuBLASLt has no such epilogue instead of falling back (for tests)
  bool bgrad_epilogue = true;
  bool bgrad_strict = false;
  // Time cuBLASLt's top-ranked algorithms on the first call of each overwriting product and
  // keep the fastest (the heuristic's first pick is not always it, e.g. with GELU epilogues);
  // the choice can differ between runs, so FT_MATMUL_AUTOTUNE=0 turns it off.
  bool autotune = true;
  // tune_quiet: the device drained before a product's candidates are timed, and the
  // heuristic's first kept unless another beats it by kTuneMargin (candidate_timing.cuh);
  // tune_log: each tuning's times and choice on stderr
  bool tune_quiet = true, tune_log = false;
  // only algorithms that reduce split-K partials in fp32 (FT_MATMUL_REDUCTION=fp32)
  bool fp32_reduction = false;
  // Where cuBLASLt's unsplit algorithms go first (those whose configuration has one K split, in
  // its order; its order as is where none ranks): automatic, for products whose K is not a
  // multiple of 8 (FT_MATMUL_SPLITK=auto, the default); none, every product; any, never.
  enum class SplitK { automatic, none, any };
  SplitK split_k = SplitK::automatic;
  // pre's bias gradient from the DGELU product's epilogue (DGELU_BGRAD) when asked for;
  // off unless FT_DGELU_BGRAD=1 (slower than a separate reduction on H200)
  bool dgelu_bgrad = false;
};
// out[N,OC] = inp[N,C] @ w[OC,C]^T (+ bias[OC] if bias != nullptr)
void matmul_forward(MatmulState& m, const Ctx& c, DType t, void* out, const void* inp,
                    const void* w, const void* bias, int64_t N, int64_t C, int64_t OC);
// out[N,OC] = inp @ w^T (+ bias) + residual[N,OC]: the add in the epilogue (beta = 1, C =
// residual, which must not alias out)
void matmul_residual_forward(MatmulState& m, const Ctx& c, DType t, void* out, const void* inp,
                             const void* w, const void* bias, const void* residual, int64_t N,
                             int64_t C, int64_t OC);
// dinp = dout @ w (if dinp); dw += dout^T @ inp; dbias += colsum(dout) (if dbias);
// accumulate = false: dw and dbias are overwritten (beta = 0) instead
void matmul_backward(MatmulState& m, const Ctx& c, DType t, void* dinp, void* dw, void* dbias,
                     const void* dout, const void* inp, const void* w, int64_t N, int64_t C,
                     int64_t OC,
                     bool accumulate = true);
size_t bias_backward_scratch(int64_t OC, int num_sms);
// dbias[OC] = beta * dbias + colsum(dout[N, OC]): the deterministic two-stage column reduction
// (partial sums of row groups in the scratch, then bias_reduce); beta 1 (accumulate) or 0.
// Row n starts at dout + n * ld (ld = 0: OC; another ld: a block of a wider row's columns, which
// then must be whole 16-byte packs, aligned, as must ld's bytes)
void bias_backward(const Ctx& c, DType t, void* dbias, const void* dout, int64_t N, int64_t OC, float beta,
                   int64_t ld = 0);
// its second stage alone, for a kernel that wrote the partial sums [G, OC] (floats) itself
void bias_reduce(const Ctx& c, DType t, void* dbias, const float* partial, int G, int64_t OC, float beta);
// its row groups for N rows of OC columns in packs of P: about two blocks an SM over the column
// blocks, within the op scratch (G = 0: not even one group fits)
RowGroups bias_row_groups(const Ctx& c, int64_t N, int64_t OC, int P);
// Fused GELU (cuBLASLt epilogues). Both return false, having run nothing, where the epilogue
// is unavailable (dtype, shape, alignment); the caller then runs the unfused ops.
// pre[N,OC] = inp @ w^T + bias, out = gelu(pre)
bool matmul_gelu_forward(MatmulState& m, const Ctx& c, DType t, void* pre, void* out,
                         const void* inp, const void* w, const void* bias, int64_t N, int64_t C,
                         int64_t OC);
// dpre[N,C] = (dout @ w) * gelu'(pre); dw += dout^T @ inp; dbias += colsum(dout) (if dbias);
// if dpre_bias: dpre_bias += colsum(dpre) through the DGELU_BGRAD epilogue where cuBLASLt has
// it (then *dpre_bias_written = true; else dpre_bias is untouched)
bool matmul_backward_gelu(MatmulState& m, const Ctx& c, DType t, void* dpre, void* dw,
                          void* dbias, const void* dout, const void* inp, const void* w,
                          const void* pre, int64_t N, int64_t C, int64_t OC,
                          bool accumulate = true, void* dpre_bias = nullptr,
                          bool* dpre_bias_written = nullptr);

// ---- attention.cu ----
// lse[B,NH,T] fp32 (log2 domain) is all forward keeps for backward. causal = false attends to
// every key; seq_lens (device i32[B], or nullptr) masks keys past each sample's length and
// zeroes its query rows past it (their lse is +inf, so backward gives them 0 gradient).
// positions (device i32[B,T], or nullptr; causal only, not with seq_lens) keeps attention
// inside packed samples: query t sees keys [t - positions[b,t], t]. Masked attention (not
// causal, seq_lens) and packed attention are each their own kernel instantiations: GPT-2's
// causal kernels are compiled exactly as before.
void attention_forward(const Ctx& c, DType t, void* out, float* lse, const void* qkv, int64_t B,
                       int64_t T, int64_t NH, int64_t HS, bool causal = true,
                       const int* seq_lens = nullptr, const int* positions = nullptr);
size_t attention_backward_scratch(int64_t B, int64_t T, int64_t NH);
void attention_backward(const Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv,
                        const void* out, const float* lse, int64_t B, int64_t T, int64_t NH,
                        int64_t HS, bool causal = true, const int* seq_lens = nullptr,
                        const int* positions = nullptr);

// attention_onepass.cu: the backward of non-causal, unpadded attention with T = 64, 128 or 256
// and head size 64 (bf16 or f16, sm_80+) in one kernel, one block a (sample, head);
// bit-reproducible. stats: the forward's log-sum-exp, times stats_to_log2 in base 2 (cuDNN's
// natural log: log2 e; fittrain's kernels: 1). keys_per_warp: 16 or 32 (0: the default for T).
// fits: the shape, and the device (sm_80+, and the block's shared memory: 146 KiB at T = 256,
// more than sm_86/89/120 cards give a block).
bool attention_backward_onepass_fits(const Ctx& c, int64_t T, int64_t HS, bool causal);
void attention_backward_onepass(const Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv,
                                const void* out, const float* stats, float stats_to_log2, int64_t B,
                                int64_t T, int64_t NH, int keys_per_warp = 0);

// sm90/attention_wgmma.cu: the same backward as attention_onepass.cu's (non-causal, unpadded,
// T = 64, 128 or 256, head size 64, bf16 or f16, one block a (sample, head), bit-reproducible)
// with Hopper's warpgroup products; compiled for sm_90a, so it fits compute capability 9.0 only.
bool attention_backward_wgmma_fits(const Ctx& c, int64_t T, int64_t HS, bool causal);
void attention_backward_wgmma(const Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv,
                              const void* out, const float* stats, float stats_to_log2, int64_t B, int64_t T,
                              int64_t NH);

// ---- attention_cudnn.cu ----
// Attention (causal or not; no padding masks or packed samples: those go to fittrain's
// kernels) through cuDNN's fused flash-attention engines; a forward and a backward plan per
// (causal, dtype, B, T, NH, HS), built on first use and cached (with tuning, up to kTunePlans
// candidates each, timed at the shape's first call). stats[B,NH,T] (fp32)
// hold each row's natural-log log-sum-exp: not attention.cu's log2 lse, so a step's forward
// and backward must take the same path (CudaBackend decides both with the same test).
#ifdef FITTRAIN_HAVE_CUDNN
using CudnnHandle = cudnnHandle_t;
#else
using CudnnHandle = void*;
#endif
class CudnnAttention {
 public:
  CudnnAttention();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;
  bool available() const { return handle_ != nullptr; }
  size_t version() const { return version_; }  // cudnnGetVersion(), e.g. 91900
  // Tuning (Switches::attention_tune): each shape's first call times up to kTunePlans of
  // cuDNN's ranked plans and keeps the fastest; off: cuDNN's first. Set before the first plan.
  static constexpr int kTunePlans = 4;
  void set_tuning(bool on) { tune_ = on; }
  // Scratch (Ctx::scratch) a forward call needs, and with `backward` a backward call too (the
  // backward keeps its dQ accumulator there: 268 MiB at CDEIT's windows at batch 32); always
  // > 0 where cuDNN runs the shape, 0 when this build has no cuDNN or cuDNN declines the dtype
  // or shape (both plans are built and cached on the first ask).
  size_t workspace_bytes(DType t, int64_t B, int64_t T, int64_t NH, int64_t HS,
                         bool causal = true, bool backward = true);
  // out[B,T,C], stats[B,NH,T] from qkv[B,T,3C]
  void forward(const Ctx& c, DType t, void* out, float* stats, const void* qkv, int64_t B,
               int64_t T, int64_t NH, int64_t HS, bool causal = true);
  // dqkv[B,T,3C] (overwritten) from dout[B,T,C], qkv, out and the forward's stats
  void backward(const Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv,
                const void* out, const float* stats, int64_t B, int64_t T, int64_t NH, int64_t HS,
                bool causal = true);

 private:
  struct Plan;
  // (backward, causal, dtype, B, T, NH, HS)
  using Key = std::tuple<bool, bool, int, int64_t, int64_t, int64_t, int64_t>;
  bool shape_ok(DType t, int64_t T, int64_t HS) const;
  Plan* plan(bool backward, bool causal, DType t, int64_t B, int64_t T, int64_t NH, int64_t HS);
#ifdef FITTRAIN_HAVE_CUDNN
  template <class Run>
  void run_tuned(Plan& p, cudaStream_t stream, Run&& run);
#endif
  CudnnHandle handle_ = nullptr;
  size_t version_ = 0;
  bool warned_ = false, tune_ = true;
  std::map<Key, std::unique_ptr<Plan>> plans_;  // nullptr: cuDNN declined this shape
};

// A SiLU MLP's second product with the SiLU as a prologue of its operand (silu_matmul_cudnn.cu):
// out[N,OC] = silu(inp[N,C]) wᵀ (+ bias), one cuDNN graph (bf16/f16; the SiLU rounded to the
// storage type, as the separate pass rounds it), so no pass writes and re-reads silu(inp).
class CudnnSiluMatmul {
 public:
  static constexpr int kMaxPlans = 4;  // of cuDNN's ranked engine configurations, timed by the caller
  // The workspace every plan is held to (or the scratch, where that is less); the plan counts
  // this cap rather than asking cuDNN. A plan's workspace is known only once it is built, and
  // building one compiles its kernels: about 3.5 s a shape on a machine that has not compiled
  // it before (an H200, session 29: CDEIT's `fittrain plan` took 48-56 s, about 40 of them on
  // the 12 shapes its fit and report ask about, of which training runs 4). CDEIT's shapes' plans needed 0-9.4
  // MiB; one that needs more is not offered, and where none is left the pass + product runs.
  static constexpr size_t kMaxWorkspace = size_t{8} << 20;
  CudnnSiluMatmul();
  ~CudnnSiluMatmul();
  CudnnSiluMatmul(const CudnnSiluMatmul&) = delete;
  CudnnSiluMatmul& operator=(const CudnnSiluMatmul&) = delete;
  bool available() const { return handle_ != nullptr; }
  // How many plans cuDNN makes for this shape within min(kMaxWorkspace, scratch_bytes) bytes
  // (built and cached on the first ask; 0: cuDNN declines it, or this build has none).
  int plans(DType t, int64_t N, int64_t C, int64_t OC, bool bias, size_t scratch_bytes);
  // Runs plan i (< plans() with c.scratch_bytes) with c.scratch as its workspace.
  void run(const Ctx& c, int i, DType t, void* out, const void* inp, const void* w, const void* bias, int64_t N,
           int64_t C, int64_t OC);

 private:
  struct Plans;
  // dtype, N, C, OC, bias, the workspace cap (plans built for another cap are another entry,
  // so a plan kept never needs more than the cap it was asked under)
  using Key = std::tuple<int, int64_t, int64_t, int64_t, bool, size_t>;
  Plans* find(DType t, int64_t N, int64_t C, int64_t OC, bool bias, size_t max_workspace);
  CudnnHandle handle_ = nullptr;
  std::map<Key, std::unique_ptr<Plans>> plans_;  // nullptr: cuDNN declined the shape
};

// ---- gelu.cu ----
void gelu_forward(const Ctx& c, DType t, void* out, const void* inp, int64_t n);
void gelu_backward(const Ctx& c, DType t, void* dinp, const void* inp, const void* dout,
                   int64_t n);

// ---- silu.cu ----
void silu_forward(const Ctx& c, DType t, void* out, const void* inp, int64_t n);
// out (optional): also out = silu(inp) (may alias inp; dinp may alias dout)
void silu_backward(const Ctx& c, DType t, void* dinp, const void* inp, const void* dout,
                   int64_t n, void* out = nullptr);
// silu_backward with out, over [N, H], also dbias[H] = beta * dbias + colsum(dinp) (beta 1 or 0);
// layout: which kernel takes rows of whole packs (switches.h)
void silu_backward_recompute_bias(const Ctx& c, DType t, void* dinp, void* out, const void* inp, const void* dout,
                                  void* dbias, int64_t N, int64_t H, float beta, SiluBiasLayout layout);
// op scratch silu_backward_recompute_bias uses at [N, H] (its row groups' column partials)
size_t silu_bias_scratch(int64_t N, int64_t H, int num_sms);

// ---- modulate.cu ----  x, out, dx, dout [B,T,C]; shift, scale, dshift, dscale [B,C]
void modulate_forward(const Ctx& c, DType t, void* out, const void* x, const void* shift,
                      const void* scale, int64_t B, int64_t T, int64_t C);
void modulate_backward(const Ctx& c, DType t, void* dx, void* dshift, void* dscale,
                       const void* dout, const void* x, const void* scale, int64_t B, int64_t T,
                       int64_t C);

// ---- gated_residual.cu ----  out, res, y, dy, dout [B,T,C]; gate, dgate [B,C]; win: y and
// dy in window order (backend.h, WindowOrder), null: token order
void gated_residual_forward(const Ctx& c, DType t, void* out, const void* res, const void* y,
                            const void* gate, int64_t B, int64_t T, int64_t C, const window::Geom* win);
// dbias (optional): dbias[C] = beta * dbias + colsum(dy) over all B*T rows (beta 1 or 0)
void gated_residual_backward(const Ctx& c, DType t, void* dy, void* dgate, const void* dout,
                             const void* y, const void* gate, int64_t B, int64_t T, int64_t C,
                             const window::Geom* win, void* dbias = nullptr, float beta = 1.f);

// ---- residual.cu ----
void residual_forward(const Ctx& c, DType t, void* out, const void* a, const void* b, int64_t n);

// ---- classifier.cu ----
// staged: the shared-memory kernel where classifier_staged_fits (sm_90, two rows in shared
// memory), else the two-pass kernel.
bool classifier_staged_fits(const Ctx& c, DType t, int64_t Vp);
void classifier_forward_backward(const Ctx& c, DType t, float* losses, void* logits,
                                 const int* targets, int64_t BT, int64_t Vp, int64_t V,
                                 float dloss, bool staged = true);

// ---- sum_squares.cu ----
size_t sum_squares_scratch(int num_sms);
double sum_squares(const Ctx& c, DType t, const void* x, int64_t n);
// runs > 1: runs of n elements, stride elements apart (n and stride whole 16-byte packs)
void sum_squares_to(const Ctx& c, DType t, const void* x, int64_t n, double* out, int64_t runs = 1,
                    int64_t stride = 0);

// ---- adamw.cu ----
void adamw_update(const Ctx& c, DType t, void* params, float* master, const void* grads,
                  float* m, float* v, std::span<const ParamSlice> slices, const AdamWStep& s);
// out = out - (out - src) * (1 - decay) (decay 0: out = src, out not read); out of dtype t
void ema_update(const Ctx& c, DType t, void* out, const float* src, int64_t n, float decay);
// dst[i] = values[i] (at most 8), by a kernel whose parameters carry them
void set_scalars(const Ctx& c, double* dst, std::span<const double> values);
// control[0..1] = update_control_host(*loss, *sum_squares, r), on the device
void update_control(const Ctx& c, const double* loss, const double* sum_squares, float* control,
                    const UpdateRule& r);

}  // namespace ft::cuda

// ---- kv_attention.cu (generation with a KV cache) ----
namespace ft::cuda {
// kcache/vcache[i, start[i] + s] = k/v of qkv[i, s] (start null: 0); caches [rows, Tmax, C]
void kv_cache_store(const Ctx& c, DType t, void* kcache, void* vcache, const void* qkv,
                    const int* start, int64_t b, int64_t T, int64_t C, int64_t Tmax);
// one query per row g (qkv[g, 0:C]) over its keys [0, lens[g]); head size 32, 64 or 128
void attention_decode(const Ctx& c, DType t, void* out, const void* qkv, const void* kcache,
                      const void* vcache, const int* lens, int64_t G, int64_t C, int64_t Tmax,
                      int n_head);
// out[g] = first index of the largest of logits[g, 0:V] (rows Vp wide)
void argmax_rows(const Ctx& c, DType t, int* out, const void* logits, int64_t G, int64_t V,
                 int64_t Vp);
}  // namespace ft::cuda

// ---- bpr.cu (recommender head) ----
namespace ft::cuda {
// Scratch of bpr_forward_backward with dloss != 0: N*(K+1) slot coefficients, keys and
// indices, and the radix sort's temporary storage.
size_t bpr_scratch(int64_t N, int64_t K);
// losses f32[N]; dh [N,C] (=), dE [Vp,C] (+=) only when dloss != 0; pos i32[N] (< 0 or >= Vp:
// a padding row), neg i32[N,K] (out of [0, Vp): the term is dropped). Any C (scalar loads).
// Deterministic dE: slots radix-sorted by item (stable), each item's run summed in order.
void bpr_forward_backward(const Ctx& c, DType t, float* losses, void* dh, void* dE,
                          const void* h, const void* E, const int* pos, const int* neg,
                          int64_t N, int64_t C, int64_t K, int64_t Vp, float dloss);
// out f32[N,M] = h[n] . E[items[n,m]]; NaN for an id outside [0, Vp)
void item_scores(const Ctx& c, DType t, float* out, const void* h, const void* E,
                 const int* items, int64_t N, int64_t M, int64_t C, int64_t Vp);
}  // namespace ft::cuda

// ---- diffusion (patchify.cu, diffusion.cu, rmsnorm.cu) ----
#include "backend/cuda/any_dtype.cuh"
namespace ft::cuda {
// out[B,T,C*p*p] (dtype to) = img[B,C,H,W] (dtype ti) cut into p x p patches; unpatchify is
// the inverse (see Backend::patchify). H, W multiples of p (checked by the caller).
void patchify(const Ctx& c, DType to, void* out, DType ti, const void* img, int64_t B, int64_t C, int64_t H,
              int64_t W, int64_t p);
void unpatchify(const Ctx& c, DType ti, void* img, DType tt, const void* tokens, int64_t B, int64_t C, int64_t H,
                int64_t W, int64_t p);
// out = coef0 x + coef1 y + coef2 z per sample (y.p null: no y term; noise_out.p null: z not
// stored); coef f32[B,3], keys i32[B]; B samples of n elements
void diffusion_mix(const Ctx& c, AnyPtr out, AnyPtr noise_out, AnyCPtr x, AnyCPtr y, const float* coef,
                   const int* keys, uint64_t seed, int64_t B, int64_t n);
// losses f32[B] = mean (pred - target)^2 a sample; dpred = 2 dloss (pred - target) / n when
// dloss != 0. One block a sample: deterministic.
void mse_loss(const Ctx& c, float* losses, AnyPtr dpred, AnyCPtr pred, AnyCPtr target, int64_t B, int64_t n,
              float dloss);
// out[B,D] = [cos(t f), sin(t f)] (DiT's embedding); t f32[B]
void timestep_embedding(const Ctx& c, AnyPtr out, const float* t, int64_t B, int64_t D, float max_period);
// RMSNorm without affine over rows of C: out = x rstd, rstd f32[N]; backward dinp +=
void rmsnorm_forward(const Ctx& c, DType t, void* out, float* rstd, const void* inp, int64_t N, int64_t C);
void rmsnorm_backward(const Ctx& c, DType t, void* dinp, const void* dout, const void* inp, const float* rstd,
                      int64_t N, int64_t C);
// ---- patch_embed.cu (Backend::patch_embed_*): every tensor of dtype t; c/wc, bias, table null
// when absent. out[N,O] = [x|c] [wx|wc]^T + bias + table[n % T]; the backward writes
// dw = beta * dw + sums (beta 1: add, 0: overwrite), dwc / dbias skipped when null.
size_t patch_embed_backward_scratch(int64_t O, int num_sms);
void patch_embed_forward(const Ctx& c, DType t, void* out, const void* x, const void* wx, const void* cin,
                         const void* wc, const void* bias, const void* table, int64_t N, int64_t O, int64_t Kx,
                         int64_t Kc, int64_t T);
void patch_embed_backward(const Ctx& c, DType t, void* dwx, void* dwc, void* dbias, const void* dout, const void* x,
                          const void* cin, int64_t N, int64_t O, int64_t Kx, int64_t Kc, float beta);
}  // namespace ft::cuda

// ---- norm_modulate.cu ----
#include "backend/window_shapes.h"
namespace ft::cuda {
// The fused adaLN input (Backend::norm_modulate_forward/backward): inp, out, dout, dinp
// [B,T,C]; shift, scale, dshift, dscale [B,C]; mean (null for rms), rstd f32[B*T]. win: the
// window geometry (out row r holds inp row window::partition_src(*win, r)), or null.
void norm_modulate_forward(const Ctx& c, DType t, void* out, float* mean, float* rstd, const void* inp,
                           const void* shift, const void* scale, int64_t B, int64_t T, int64_t C,
                           const window::Geom* win, bool rms, float eps);
// gated_residual_forward then norm_modulate_forward in one pass (Backend::
// gated_residual_norm_modulate_forward): r = res + gate * y (y's row of token row n is
// window::reverse_src(*ywin, n), or n), out = the fused norm + modulate of r as stored. Returns
// false, launching nothing, where the rows do not fit the register kernel (C not a whole
// number of 16-byte packs, misaligned pointers, C over 32 * 8 packs): run the two ops then.
bool gated_residual_norm_modulate_forward(const Ctx& c, DType t, void* r, void* out, float* mean, float* rstd,
                                          const void* res, const void* y, const void* gate, const window::Geom* ywin,
                                          const void* shift, const void* scale, int64_t B, int64_t T, int64_t C,
                                          const window::Geom* win, bool rms, float eps);
// ---- norm_modulate_residual.cu ----
// Backend::norm_modulate_gated_residual_backward in one pass: the norm + modulate's backward
// into dr (+=), then dy = gate * dr (y's rows: window::reverse_src(*ywin, n), or n), dgate =
// sum dr * y, dbias = beta * dbias + the column sums of dy (dbias may be null). Returns false,
// launching nothing, where the register kernel does not hold the row or the op scratch is under
// norm_modulate_residual_backward_scratch: run the two ops then. staged: each warp's next rows
// copied ahead into shared memory by cp.async (Switches::residual_norm_staged).
size_t norm_modulate_residual_backward_scratch(int64_t B, int64_t T, int64_t C, int num_sms);
bool norm_modulate_gated_residual_backward(const Ctx& c, DType t, void* dr, void* dshift, void* dscale,
                                           const void* dout, const void* r, const float* mean, const float* rstd,
                                           const void* scale, const window::Geom* win, void* dy, void* dgate,
                                           const void* y, const void* gate, const window::Geom* ywin, void* dbias,
                                           float beta, int64_t B, int64_t T, int64_t C, bool rms, bool staged);
// Scratch of the backward: f32 column partials [B, G, 2, C] of its G chunks a sample (0 when
// G == 1: the blocks then write dshift/dscale themselves).
size_t norm_modulate_backward_scratch(int64_t B, int64_t T, int64_t C, int num_sms);
// dinp += ...; dshift, dscale overwritten; deterministic (fixed-order sums, no float atomics).
void norm_modulate_backward(const Ctx& c, DType t, void* dinp, void* dshift, void* dscale, const void* dout,
                            const void* inp, const float* mean, const float* rstd, const void* scale, int64_t B,
                            int64_t T, int64_t C, const window::Geom* win, bool rms, bool overwrite = false);
}  // namespace ft::cuda
