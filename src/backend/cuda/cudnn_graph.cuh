// cuDNN's backend API as fittrain's graphs use it (attention_cudnn.cu's SDPA graphs,
// silu_matmul_cudnn.cu's product with a SiLU prologue): owned descriptors, a graph builder
// whose tensors and ops live until the plan is made, plan building from cuDNN's heuristics and
// execution. Written against the backend API directly: cudnn_frontend (the header library that
// usually builds these) is not packaged for Debian and the GPU machines have no network.
// A graph that cuDNN declines is not a bug: builders throw Unsupported and callers fall back
// to fittrain's own kernels. Device-side headers only (included by .cu files).
#pragma once
#ifdef FITTRAIN_HAVE_CUDNN
#include <array>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_common.cuh"

namespace ft::cuda::cudnn_graph {

inline std::string last_error() {
  char buf[2048] = {0};
  cudnnGetLastErrorString(buf, sizeof buf);
  return buf;
}

// A graph that cuDNN declines is not a bug: the caller falls back to our own kernels. (A
// std::exception, so that one escaping a caller that does not expect it is still reported.)
struct Unsupported : std::exception {
  explicit Unsupported(std::string w) : why(std::move(w)) {}
  const char* what() const noexcept override { return why.c_str(); }
  std::string why;
};

// An allocation cuDNN could not make is not a decline: it is the OutOfMemoryError the trainer
// re-plans for (cached as "unsupported", the shape would fall back to our kernels for good).
#define FT_CUDNN_TRY(call)                                                                   \
  do {                                                                                      \
    cudnnStatus_t st_ = (call);                                                             \
    if (st_ == CUDNN_STATUS_ALLOC_FAILED)                                                   \
      throw ::ft::OutOfMemoryError(detail::concat(__FILE__, ":", __LINE__,                  \
                                                  ": cuDNN could not allocate in ", #call)); \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                        \
      throw Unsupported{detail::concat(#call, ": ", cudnnGetErrorString(st_), " ",          \
                                       last_error())};                                \
  } while (0)

// Owns one backend descriptor.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    FT_CUDNN_TRY(cudnnBackendCreateDescriptor(type, &d_));
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
            const void* value) {
    FT_CUDNN_TRY(cudnnBackendSetAttribute(d_, name, type, count, value));
    return *this;
  }
  Desc& set_desc(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value) {
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
  }
  void finalize() { FT_CUDNN_TRY(cudnnBackendFinalize(d_)); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;
using Dims3 = std::array<int64_t, 3>;

// Builds one operation graph; keeps every descriptor alive until the plan is made.
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnHandle_t h) : handle_(h) {}

  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t dt, Dims dim, Dims stride,
                                  bool is_virtual = false, bool by_value = false) {
    return tensor_nd(uid, dt, dim, stride, is_virtual, by_value);
  }
  // Rank-3 tensors [batch, rows, cols]: what cuDNN's fused matmul engines take (the SiLU
  // product's graph found no engine configuration with the same tensors in rank 4).
  cudnnBackendDescriptor_t tensor3(int64_t uid, cudnnDataType_t dt, Dims3 dim, Dims3 stride) {
    return tensor_nd(uid, dt, dim, stride, false, false);
  }
  cudnnBackendDescriptor_t virt3(cudnnDataType_t dt, Dims3 dim, Dims3 stride) {
    return tensor_nd(next_virtual_++, dt, dim, stride, true, false);
  }
  cudnnBackendDescriptor_t tensor_nd(int64_t uid, cudnnDataType_t dt, std::span<const int64_t> dim,
                                     std::span<const int64_t> stride, bool is_virtual, bool by_value) {
    Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = 16;
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, (int64_t)dim.size(), dim.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, (int64_t)stride.size(), stride.data())
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align)
        .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    t.finalize();
    keep_.push_back(std::move(t));
    return keep_.back().get();
  }
  cudnnBackendDescriptor_t virt(cudnnDataType_t dt, Dims dim, Dims stride) {
    return tensor(next_virtual_++, dt, dim, stride, true);
  }
  // A host scalar passed by value at execution ([1,1,1,1] float).
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }

  // y = mode(x[, b][, t]); t is the condition of BINARY_SELECT.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, cudnnBackendDescriptor_t t = nullptr,
                 int64_t axis = -1) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    if (mode == CUDNN_POINTWISE_SWISH_FWD || mode == CUDNN_POINTWISE_SWISH_BWD) {
      const float beta = 1.f;  // swish(x) = x sigmoid(beta x) with beta = 1: SiLU
      pw.set(CUDNN_ATTR_POINTWISE_SWISH_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    }
    pw.finalize();
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get())
        .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
        .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    op.finalize();
    keep_.push_back(std::move(pw));
    add_op(std::move(op));
  }
  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y) {
    Desc r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode)
        .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    r.finalize();
    Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r.get());
    op.finalize();
    keep_.push_back(std::move(r));
    add_op(std::move(op));
  }
  // c = a @ b over the last two dims, batched over the first two
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    Desc m(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    m.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    m.finalize();
    Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, m.get());
    op.finalize();
    keep_.push_back(std::move(m));
    add_op(std::move(op));
  }
  // y views x with other dims/strides (a transpose, here)
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x).set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    op.finalize();
    add_op(std::move(op));
  }
  struct Plan {
    Desc plan;
    int64_t workspace = 0;
  };
  // Up to `max_plans` plans, in the order cuDNN's heuristics rank their engine configurations
  // (mode A, then the FALLBACK mode's), of those that finalize with a workspace of at most
  // `max_workspace` bytes. Throws Unsupported when there is none.
  std::vector<Plan> build_plans(int max_plans, int64_t max_workspace) {
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const Desc& d : ops_) raw.push_back(d.get());
    Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)raw.size(),
              raw.data())
        .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
    graph.finalize();
    std::string why = "cuDNN's heuristics offer no engine for this graph";
    int64_t smallest_over = -1;  // the least workspace of the plans the cap turned away
    std::vector<Plan> out;
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      if ((int64_t)out.size() >= max_plans) break;
      Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph.get())
          .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
      heur.finalize();
      int64_t n = 0;
      FT_CUDNN_TRY(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, nullptr));
      if (n <= 0) continue;
      std::vector<Desc> cfgs;
      std::vector<cudnnBackendDescriptor_t> cfg_raw;
      for (int64_t i = 0; i < n; ++i) {
        cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        cfg_raw.push_back(cfgs.back().get());
      }
      FT_CUDNN_TRY(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &n, cfg_raw.data()));
      for (int64_t i = 0; i < n && (int64_t)out.size() < max_plans; ++i) {
        try {
          Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
          plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_)
              .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg_raw[i]);
          plan.finalize();
          int64_t count = 0, ws = 0;
          FT_CUDNN_TRY(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                CUDNN_TYPE_INT64, 1, &count, &ws));
          if (ws <= max_workspace) out.push_back(Plan{std::move(plan), ws});
          else if (smallest_over < 0 || ws < smallest_over) smallest_over = ws;
        } catch (const Unsupported& u) {
          why = "no engine configuration finalizes: " + u.why;
        }
      }
    }
    if (out.empty() && smallest_over >= 0)
      throw Unsupported{detail::concat("every plan needs more workspace than the ", max_workspace,
                                       " bytes allowed (the smallest ", smallest_over, ")")};
    if (out.empty()) throw Unsupported{why};
    return out;
  }

 private:
  void add_op(Desc op) { ops_.push_back(std::move(op)); }

  cudnnHandle_t handle_;
  int64_t next_virtual_ = 100;
  std::vector<Desc> keep_;  // tensors and op parameter descriptors
  std::vector<Desc> ops_;
};

inline void execute(cudnnHandle_t h, cudaStream_t stream, const Desc& plan, std::vector<int64_t> uids,
                    std::vector<void*> ptrs, void* workspace) {
  // A plan that was built runs: a failure here is an error, not a decline to fall back from.
  std::optional<Desc> vp;
  try {
    vp.emplace(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    vp->set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, (int64_t)uids.size(), uids.data())
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, (int64_t)ptrs.size(), ptrs.data())
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    vp->finalize();
  } catch (const Unsupported& u) {
    throw InternalError(detail::concat("cuDNN: the variant pack of a built plan: ", u.why));
  }
  CUDNN_CHECK(cudnnSetStream(h, stream));
  CUDNN_CHECK(cudnnBackendExecute(h, plan.get(), vp->get()));
}

inline cudnnDataType_t data_type(DType t) {
  return t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : t == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

}  // namespace ft::cuda::cudnn_graph

#endif  // FITTRAIN_HAVE_CUDNN
