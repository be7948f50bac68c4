// A SiLU MLP's second product with the SiLU fused in (Backend::silu_matmul_forward): one cuDNN
// graph, the SiLU (SWISH_FWD, beta 1) a prologue on the product's first operand and the bias
// an epilogue:
//   a = swish(inp) (virtual, the storage type: the separate pass rounds it the same way),
//   c = a wᵀ (fp32), out = c + bias (the storage type).
// w [OC, C] row-major is the product's [C, OC] operand through strides. CDEIT spends about
// 0.39 ms a first-stage block at batch 32 on the separate SiLU pass (an H100); a probe of this
// graph without the bias (bench/silu_fusion_probe.cu, session 14) ran it in 0.623 ms against
// cuBLASLt's 0.377 ms product alone. Which is faster on the card is measured by the caller
// (cuda_backend_silu.cu) on the first call of a shape, so a slower fused plan is never kept.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_ops.cuh"
#include "backend/cuda/cudnn_graph.cuh"

namespace ft::cuda {

#ifdef FITTRAIN_HAVE_CUDNN

namespace {
using namespace cudnn_graph;
enum Uid : int64_t { kInp = 1, kW, kBias, kOut };
}  // namespace

struct CudnnSiluMatmul::Plans {
  std::vector<GraphBuilder::Plan> plans;
  size_t workspace = 0;  // the largest
};

CudnnSiluMatmul::CudnnSiluMatmul() {
  if (cudnnCreate(&handle_) != CUDNN_STATUS_SUCCESS) handle_ = nullptr;
}
CudnnSiluMatmul::~CudnnSiluMatmul() {
  plans_.clear();
  if (handle_) cudnnDestroy(handle_);
}

CudnnSiluMatmul::Plans* CudnnSiluMatmul::find(DType t, int64_t N, int64_t C, int64_t OC, bool bias,
                                              size_t max_workspace) {
  const Key key{(int)t, N, C, OC, bias, max_workspace};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  std::unique_ptr<Plans> p;
  if (handle_ && (t == DType::bf16 || t == DType::f16) && N > 0 && C % 8 == 0 && OC % 8 == 0) {
    try {
      GraphBuilder g(handle_);
      // rank-3 tensors [1, rows, cols], as the probe that found plans used them (in rank 4 the
      // heuristics offered this graph no engine configuration on an H100, session 14)
      const cudnnDataType_t io = data_type(t), f32 = CUDNN_DATA_FLOAT;
      auto in = g.tensor3(kInp, io, {1, N, C}, {N * C, C, 1});
      auto act = g.virt3(io, {1, N, C}, {N * C, C, 1});
      g.pointwise(CUDNN_POINTWISE_SWISH_FWD, in, nullptr, act);
      auto wt = g.tensor3(kW, io, {1, C, OC}, {OC * C, 1, C});  // w [OC, C] as [C, OC]
      auto out = g.tensor3(kOut, io, {1, N, OC}, {N * OC, OC, 1});
      if (bias) {
        auto acc = g.virt3(f32, {1, N, OC}, {N * OC, OC, 1});
        g.matmul(act, wt, acc);
        auto b = g.tensor3(kBias, io, {1, 1, OC}, {OC, OC, 1});
        g.pointwise(CUDNN_POINTWISE_ADD, acc, b, out);
      } else {
        g.matmul(act, wt, out);
      }
      p = std::make_unique<Plans>();
      p->plans = g.build_plans(kMaxPlans, (int64_t)max_workspace);
      for (const auto& pl : p->plans) p->workspace = std::max(p->workspace, (size_t)pl.workspace);
      if (std::getenv("FT_CUDNN_VERBOSE"))
        std::fprintf(stderr, "[fittrain] cuDNN SiLU product N=%lld C=%lld OC=%lld: %zu plans, workspace up to %zu bytes\n",
                     (long long)N, (long long)C, (long long)OC, p->plans.size(), p->workspace);
    } catch (const Unsupported& u) {
      if (std::getenv("FT_CUDNN_VERBOSE"))  // each shape once: the answer is cached
        std::fprintf(stderr, "[fittrain] cuDNN SiLU product unavailable for N=%lld C=%lld OC=%lld (%s)\n",
                     (long long)N, (long long)C, (long long)OC, u.why.c_str());
      p.reset();
    }
  }
  Plans* raw = p.get();
  plans_.emplace(key, std::move(p));
  return raw;
}

int CudnnSiluMatmul::plans(DType t, int64_t N, int64_t C, int64_t OC, bool bias, size_t scratch_bytes) {
  Plans* p = find(t, N, C, OC, bias, std::min(kMaxWorkspace, scratch_bytes));
  return p ? (int)p->plans.size() : 0;
}

void CudnnSiluMatmul::run(const Ctx& c, int i, DType t, void* out, const void* inp, const void* w, const void* bias,
                          int64_t N, int64_t C, int64_t OC) {
  Plans* p = find(t, N, C, OC, bias != nullptr, std::min(kMaxWorkspace, c.scratch_bytes));
  FT_CHECK(p && i >= 0 && i < (int)p->plans.size(), "cuDNN SiLU product: no plan ", i, " for N=", N, " C=", C,
           " OC=", OC);
  const GraphBuilder::Plan& pl = p->plans[(size_t)i];
  FT_CHECK((size_t)pl.workspace <= c.scratch_bytes, "cuDNN SiLU product: workspace ", pl.workspace,
           " bytes exceeds the planned scratch of ", c.scratch_bytes);
  std::vector<int64_t> uids{kInp, kW, kOut};
  std::vector<void*> ptrs{const_cast<void*>(inp), const_cast<void*>(w), out};
  if (bias) {
    uids.push_back(kBias);
    ptrs.push_back(const_cast<void*>(bias));
  }
  execute(handle_, c.stream, pl.plan, std::move(uids), std::move(ptrs), c.scratch);
}

#else  // no cuDNN in this build: the separate pass and product

struct CudnnSiluMatmul::Plans {};
CudnnSiluMatmul::CudnnSiluMatmul() = default;
CudnnSiluMatmul::~CudnnSiluMatmul() = default;
CudnnSiluMatmul::Plans* CudnnSiluMatmul::find(DType, int64_t, int64_t, int64_t, bool, size_t) { return nullptr; }
int CudnnSiluMatmul::plans(DType, int64_t, int64_t, int64_t, bool, size_t) { return 0; }
void CudnnSiluMatmul::run(const Ctx&, int, DType, void*, const void*, const void*, const void*, int64_t, int64_t,
                          int64_t) {
  FT_CHECK(false, "this build has no cuDNN");
}

#endif

}  // namespace ft::cuda
