// Attention (causal, or not: the causal mask is a subgraph the non-causal graphs leave out)
// through cuDNN's fused flash-attention engines (Hopper: wgmma kernels that
// our mma.sync kernel in attention_tc2.cu cannot match: H200, B=16 T=1024 12 heads of 64,
// forward 0.086 vs 0.144 ms, backward 0.28 vs 0.43 ms per layer).
//
// The graphs are built with cudnn_graph.cuh (cuDNN's backend API; cudnn_frontend is not
// packaged for Debian). Each graph is the operation pattern cuDNN's SDPA engines recognise:
//   forward:  S = (Q Kᵀ)·scale, causal select(-inf), softmax (max, exp, sum; stats = max +
//             log sum, natural log), O = P V with P in the storage type;
//   backward: D = rowsum(dO∘O); recompute P = exp(S - stats) under the same mask;
//             dV = Pᵀ dO; dS = P∘(dO Vᵀ - D)·scale; dK = dSᵀ Q; dQ = dS K (fp32, then cast).
// Q, K, V are read in place from the qkv[B,T,3C] buffer and dQ, dK, dV written in place into
// dqkv[B,T,3C] through strides, so no transposes or copies run. The stats are per-row
// log-sum-exp in fp32 [B,NH,T] — the buffer the planner already reserves for attention.
//
// cuDNN's backward accumulates dQ with atomics: it is fast but not bit-reproducible. The
// backend uses it by default and keeps the deterministic kernels of attention_tc2.cu for
// FT_ATTENTION=fittrain (see cuda_backend.cu).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/candidate_timing.cuh"
#include "backend/cuda/cuda_ops.cuh"
#include "backend/cuda/cudnn_graph.cuh"

namespace ft::cuda {

#ifdef FITTRAIN_HAVE_CUDNN

namespace {

using namespace cudnn_graph;

// Unique ids of the tensors the caller binds at execution; virtual tensors count from 100.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kNegInf, kOne, kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum,
};

// (q kᵀ) · scale, fp32 [B,H,Tq,Tk]: the scores both graphs start from
cudnnBackendDescriptor_t scores(GraphBuilder& g, cudnnBackendDescriptor_t q, cudnnBackendDescriptor_t kt, Dims dim,
                                Dims stride) {
  auto s = g.virt(CUDNN_DATA_FLOAT, dim, stride), scaled = g.virt(CUDNN_DATA_FLOAT, dim, stride);
  g.matmul(q, kt, s);
  g.pointwise(CUDNN_POINTWISE_MUL, s, g.scalar(kScale), scaled);
  return scaled;
}
// s := select(row >= col, s, -inf): the causal mask on a [B,H,Tq,Tk] score tensor.
cudnnBackendDescriptor_t causal_mask(GraphBuilder& g, cudnnBackendDescriptor_t s, Dims dim, Dims stride) {
  auto row = g.virt(CUDNN_DATA_INT32, dim, stride), col = g.virt(CUDNN_DATA_INT32, dim, stride);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, row, CUDNN_DATA_INT32, nullptr, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, col, CUDNN_DATA_INT32, nullptr, 3);
  auto keep = g.virt(CUDNN_DATA_BOOLEAN, dim, stride);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, keep, CUDNN_DATA_BOOLEAN);
  auto out = g.virt(CUDNN_DATA_FLOAT, dim, stride);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, g.scalar(kNegInf), out, CUDNN_DATA_FLOAT, keep);
  return out;
}

// The layouts, [B,H,T,D] views with strides in elements.
struct Layouts {
  Dims q, kt, o, stats, s, st, dqacc;  // strides
  Dims qd, ktd, sd, statd;             // dims
  Layouts(int64_t B, int64_t T, int64_t H, int64_t D) {
    const int64_t C = H * D, C3 = 3 * C;
    qd = {B, H, T, D};
    q = {T * C3, D, C3, 1};  // also K, V, dQ, dK, dV inside qkv/dqkv
    ktd = {B, H, D, T};
    kt = {T * C3, D, 1, C3};
    o = {T * C, D, C, 1};  // O and dO: [B,T,C]
    statd = {B, H, T, 1};
    stats = {H * T, T, 1, 1};
    sd = {B, H, T, T};
    s = {H * T * T, T * T, T, 1};
    st = {H * T * T, T * T, 1, T};  // the transpose of s
    dqacc = {H * T * D, T * D, D, 1};
  }
};

}  // namespace

// A shape's candidate plans, in the order cuDNN's heuristics rank them (the first alone unless
// tuning is on), and the one its calls run: -1 until the first call times them.
struct CudnnAttention::Plan {
  std::vector<GraphBuilder::Plan> candidates;
  int chosen = -1;
  int64_t workspace = 0;  // the first candidate's; the others are kept only within it
  const Desc& run() const { return candidates[chosen < 0 ? 0 : chosen].plan; }
};

namespace {
int env_plan_index() {
  const char* v = std::getenv("FT_CUDNN_ATTN_PLAN");
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long k = std::strtol(v, &end, 10);
  FT_USER_CHECK(*end == 0 && k >= 0 && k < 16, "FT_CUDNN_ATTN_PLAN must be 0..15, got '", v, "'");
  return (int)k;
}
}  // namespace

CudnnAttention::CudnnAttention() {
  if (cudnnCreate(&handle_) != CUDNN_STATUS_SUCCESS) handle_ = nullptr;
  version_ = cudnnGetVersion();
}
CudnnAttention::~CudnnAttention() {
  plans_.clear();
  if (handle_) cudnnDestroy(handle_);
}

bool CudnnAttention::shape_ok(DType t, int64_t T, int64_t HS) const {
  // cuDNN's SDPA engines: fp16/bf16, head size a multiple of 8 up to 128 (backward), sm_80+.
  // Before 9.16 the backward needed the key length a multiple of 128 without a padding mask.
  return handle_ && (t == DType::bf16 || t == DType::f16) && HS % 8 == 0 && HS <= 128 &&
         (version_ >= 91600 || T % 128 == 0);
}

CudnnAttention::Plan* CudnnAttention::plan(bool backward, bool causal, DType t, int64_t B,
                                           int64_t T, int64_t H, int64_t D) {
  const Key key{backward, causal, (int)t, B, T, H, D};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  std::unique_ptr<Plan> p;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    GraphBuilder g(handle_);
    const Layouts L(B, T, H, D);
    const cudnnDataType_t io = data_type(t), f32 = CUDNN_DATA_FLOAT;
    auto q = g.tensor(kQ, io, L.qd, L.q);
    auto kt = g.tensor(kK, io, L.ktd, L.kt);
    auto stats = g.tensor(kStats, f32, L.statd, L.stats);
    if (!backward) {
      auto v = g.tensor(kV, io, L.qd, L.q);
      auto o = g.tensor(kO, io, L.qd, L.o);
      auto sc = scores(g, q, kt, L.sd, L.s);
      auto sm = causal ? causal_mask(g, sc, L.sd, L.s) : sc;
      auto mx = g.virt(f32, L.statd, L.stats);
      g.reduction(CUDNN_REDUCE_TENSOR_MAX, sm, mx);
      auto sub = g.virt(f32, L.sd, L.s);
      g.pointwise(CUDNN_POINTWISE_SUB, sm, mx, sub);
      auto e = g.virt(f32, L.sd, L.s);
      g.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, e);
      auto sum = g.virt(f32, L.statd, L.stats);
      g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
      auto lg = g.virt(f32, L.statd, L.stats);
      g.pointwise(CUDNN_POINTWISE_LOG, sum, nullptr, lg);
      g.pointwise(CUDNN_POINTWISE_ADD, mx, lg, stats);
      auto prob = g.virt(io, L.sd, L.s);  // the second product takes P in the storage type
      g.pointwise(CUDNN_POINTWISE_DIV, e, sum, prob);
      g.matmul(prob, v, o);
    } else {
      auto vt = g.tensor(kV, io, L.ktd, L.kt);
      auto o = g.tensor(kO, io, L.qd, L.o);
      auto dout = g.tensor(kDO, io, L.qd, L.o);
      auto dq = g.tensor(kDQ, io, L.qd, L.q);
      auto dk = g.tensor(kDK, io, L.qd, L.q);
      auto dv = g.tensor(kDV, io, L.qd, L.q);
      // D = rowsum(dO * O), kept in the workspace
      auto prod = g.virt(f32, L.qd, L.dqacc);
      g.pointwise(CUDNN_POINTWISE_MUL, dout, o, prod);
      auto red = g.virt(f32, L.statd, L.stats);
      g.reduction(CUDNN_REDUCE_TENSOR_ADD, prod, red);
      auto dsum = g.tensor(kSoftmaxSum, f32, L.statd, L.stats);
      g.pointwise(CUDNN_POINTWISE_MUL, red, g.scalar(kOne), dsum);
      // P = exp(S*scale - stats), masked
      auto sub = g.virt(f32, L.sd, L.s);
      g.pointwise(CUDNN_POINTWISE_SUB, scores(g, q, kt, L.sd, L.s), stats, sub);
      auto sm = causal ? causal_mask(g, sub, L.sd, L.s) : sub;
      auto p = g.virt(f32, L.sd, L.s);
      g.pointwise(CUDNN_POINTWISE_EXP, sm, nullptr, p);
      // dV = Pᵀ dO
      auto pt = g.virt(io, L.sd, L.st);
      g.reshape(p, pt);
      g.matmul(pt, dout, dv);
      // dS = P * (dO Vᵀ - D) * scale
      auto dp = g.virt(f32, L.sd, L.s);
      g.matmul(dout, vt, dp);
      auto d1 = g.virt(f32, L.sd, L.s);
      g.pointwise(CUDNN_POINTWISE_SUB, dp, dsum, d1);
      auto d2 = g.virt(f32, L.sd, L.s);
      g.pointwise(CUDNN_POINTWISE_MUL, d1, p, d2);
      auto ds = g.virt(f32, L.sd, L.s);
      g.pointwise(CUDNN_POINTWISE_MUL, d2, g.scalar(kScale), ds);
      // dK = dSᵀ Q
      auto dst = g.virt(io, L.sd, L.st);
      g.reshape(ds, dst);
      g.matmul(dst, q, dk);
      // dQ = dS K, accumulated in fp32 in the workspace, then cast into dqkv
      auto k = g.virt(io, L.qd, L.q);
      g.reshape(kt, k);
      auto dqacc = g.tensor(kDQAccum, f32, L.qd, L.dqacc);
      g.matmul(ds, k, dqacc);
      g.pointwise(CUDNN_POINTWISE_IDENTITY, dqacc, nullptr, dq);
    }
    // FT_CUDNN_ATTN_PLAN=k (a probe): only the k-th of the plans cuDNN's heuristics rank (the
    // last there is when fewer). Otherwise, with tuning on, up to kTunePlans candidates whose
    // workspace is within the first's (the arena's scratch is planned for the first).
    const int pick = env_plan_index();
    std::vector<GraphBuilder::Plan> ranked = g.build_plans(pick >= 0 ? pick + 1 : tune_ ? kTunePlans : 1, INT64_MAX);
    p = std::make_unique<Plan>();
    p->workspace = (pick >= 0 ? ranked.back() : ranked.front()).workspace;
    if (pick >= 0) {
      p->candidates.push_back(std::move(ranked.back()));
    } else {
      for (GraphBuilder::Plan& c : ranked)
        if (c.workspace <= p->workspace) p->candidates.push_back(std::move(c));
    }
    p->chosen = p->candidates.size() == 1 ? 0 : -1;
    const int64_t ws = p->workspace;
    const int got = pick >= 0 ? (int)ranked.size() - 1 : (int)p->candidates.size();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (std::getenv("FT_CUDNN_VERBOSE"))
      std::fprintf(stderr, "[fittrain] cuDNN attention %s%s %s %d B=%lld T=%lld H=%lld D=%lld: "
                   "workspace %lld bytes, built in %.1f ms\n", causal ? "" : "non-causal ",
                   backward ? "backward" : "forward", pick >= 0 ? "plan" : "candidates", got,
                   (long long)B, (long long)T, (long long)H, (long long)D, (long long)ws, ms);
  } catch (const Unsupported& u) {
    if (!warned_) {
      std::fprintf(stderr, "[fittrain] cuDNN attention unavailable (%s); using fittrain's kernels\n",
                   u.why.c_str());
      warned_ = true;
    }
    p.reset();
  }
  Plan* raw = p.get();
  plans_.emplace(key, std::move(p));
  return raw;
}

// Workspace of a backward call beyond the plan's own: dQ accumulator and the row sums D.
static size_t fe_bytes(int64_t B, int64_t T, int64_t H, int64_t D) {
  return align_up((size_t)(B * H * T * D) * 4, 256) + align_up((size_t)(B * H * T) * 4, 256);
}

// The first call of a shape with several candidates times them on its own operands (every
// output is overwritten, so a rerun leaves what one run leaves) on a drained device, as the
// products' autotuning does (matmul.cu), and keeps the fastest unless cuDNN's first is within
// kTuneMargin (candidate_timing.cuh).
template <class Run>
void CudnnAttention::run_tuned(Plan& p, cudaStream_t stream, Run&& run) {
  if (p.chosen < 0) {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<bool> ok(p.candidates.size(), true);
    for (size_t i = 0; i < ok.size(); ++i) {  // warm-up; a candidate other than the first that
      try {                                   // cuDNN refuses to execute is dropped, the first's
        run(p.candidates[i].plan);            // error stands
      } catch (const OutOfMemoryError&) {
        throw;  // the run re-plans; not the candidate's fault
      } catch (const std::exception&) {
        if (i == 0) throw;
        ok[i] = false;
        CUDA_CHECK(cudaDeviceSynchronize());  // a faulted kernel's sticky error ends the run here
      }
    }
    const std::vector<float> t = time_candidates(stream, ok, [&](size_t i) { run(p.candidates[i].plan); });
    p.chosen = static_cast<int>(pick_fastest(t, kTuneMargin));
    if (std::getenv("FT_CUDNN_VERBOSE")) {
      std::fprintf(stderr, "[fittrain] cuDNN attention tune:");
      for (size_t i = 0; i < t.size(); ++i) std::fprintf(stderr, " %.4f", ok[i] ? t[i] : -1.f);
      std::fprintf(stderr, " ms -> %d\n", p.chosen);
    }
  }
  run(p.run());
}

size_t CudnnAttention::workspace_bytes(DType t, int64_t B, int64_t T, int64_t H, int64_t D,
                                       bool causal, bool backward) {
  if (!shape_ok(t, T, D)) return 0;
  const Plan* f = plan(false, causal, t, B, T, H, D);
  const Plan* b = f ? plan(true, causal, t, B, T, H, D) : nullptr;
  if (!b) return 0;
  const size_t fw = std::max<size_t>(align_up((size_t)f->workspace, 256), 256);  // never 0: 0 says "no plan"
  return backward ? std::max(fw, align_up((size_t)b->workspace, 256) + fe_bytes(B, T, H, D)) : fw;
}

void CudnnAttention::forward(const Ctx& c, DType t, void* out, float* stats, const void* qkv,
                             int64_t B, int64_t T, int64_t H, int64_t D, bool causal) {
  Plan* p = plan(false, causal, t, B, T, H, D);
  FT_CHECK(p, "cuDNN attention forward: no plan (ask workspace_bytes() first)");
  FT_CHECK((size_t)p->workspace <= c.scratch_bytes, "cuDNN attention: workspace ", p->workspace,
           " bytes exceeds the planned scratch of ", c.scratch_bytes);
  const int64_t C = H * D;
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  const size_t es = dtype_size(t);
  float scale = 1.f / std::sqrt((float)D), neg_inf = -INFINITY;
  std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> ptrs{base, base + C * es, base + 2 * C * es, out, stats, &scale};
  if (causal) {  // only the causal graph has the mask's -inf scalar
    uids.push_back(kNegInf);
    ptrs.push_back(&neg_inf);
  }
  run_tuned(*p, c.stream, [&](const Desc& plan) { execute(handle_, c.stream, plan, uids, ptrs, c.scratch); });
}

void CudnnAttention::backward(const Ctx& c, DType t, void* dqkv, const void* dout, const void* qkv,
                              const void* out, const float* stats, int64_t B, int64_t T, int64_t H,
                              int64_t D, bool causal) {
  Plan* p = plan(true, causal, t, B, T, H, D);
  FT_CHECK(p, "cuDNN attention backward: no plan (ask workspace_bytes() first)");
  const size_t ws = align_up((size_t)p->workspace, 256);
  FT_CHECK(ws + fe_bytes(B, T, H, D) <= c.scratch_bytes, "cuDNN attention: workspace ",
           ws + fe_bytes(B, T, H, D), " bytes exceeds the planned scratch of ", c.scratch_bytes);
  char* scratch = static_cast<char*>(c.scratch);
  void* dqacc = scratch + ws;
  void* dsum = scratch + ws + align_up((size_t)(B * H * T * D) * 4, 256);

  const int64_t C = H * D;
  const size_t es = dtype_size(t);
  char* in = static_cast<char*>(const_cast<void*>(qkv));
  char* g = static_cast<char*>(dqkv);
  float scale = 1.f / std::sqrt((float)D), neg_inf = -INFINITY, one = 1.f;
  std::vector<int64_t> uids{kQ,  kK,  kV,          kO,       kDO,    kStats, kDQ,
                            kDK, kDV, kSoftmaxSum, kDQAccum, kScale, kOne};
  std::vector<void*> ptrs{in, in + C * es, in + 2 * C * es, const_cast<void*>(out),
                          const_cast<void*>(dout), const_cast<float*>(stats), g, g + C * es,
                          g + 2 * C * es, dsum, dqacc, &scale, &one};
  if (causal) {  // only the causal graph has the mask's -inf scalar
    uids.push_back(kNegInf);
    ptrs.push_back(&neg_inf);
  }
  run_tuned(*p, c.stream, [&](const Desc& plan) {
    // cuDNN 9.6+ clears the dQ accumulator itself; earlier versions expect zeros.
    if (version_ < 90600) CUDA_CHECK(cudaMemsetAsync(dqacc, 0, (size_t)(B * H * T * D) * 4, c.stream));
    execute(handle_, c.stream, plan, uids, ptrs, scratch);
  });
}

#else  // no cuDNN in this build: every shape goes to fittrain's own kernels

struct CudnnAttention::Plan {};
CudnnAttention::CudnnAttention() = default;
CudnnAttention::~CudnnAttention() = default;
bool CudnnAttention::shape_ok(DType, int64_t, int64_t) const { return false; }
CudnnAttention::Plan* CudnnAttention::plan(bool, bool, DType, int64_t, int64_t, int64_t, int64_t) {
  return nullptr;
}
size_t CudnnAttention::workspace_bytes(DType, int64_t, int64_t, int64_t, int64_t, bool, bool) {
  return 0;
}
void CudnnAttention::forward(const Ctx&, DType, void*, float*, const void*, int64_t, int64_t,
                             int64_t, int64_t, bool) {
  FT_CHECK(false, "this build has no cuDNN");
}
void CudnnAttention::backward(const Ctx&, DType, void*, const void*, const void*, const void*,
                              const float*, int64_t, int64_t, int64_t, int64_t, bool) {
  FT_CHECK(false, "this build has no cuDNN");
}

#endif

}  // namespace ft::cuda
