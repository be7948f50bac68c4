#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#ifdef FITTRAIN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace ft {

const char* device_name(DeviceKind d) { return d == DeviceKind::cpu ? "cpu" : "cuda"; }

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

std::vector<OpShape> gpt2_op_shapes(const OpDims& d) {
  const int64_t N = d.B * d.T;
  const int64_t HS = d.NH > 0 && d.C % d.NH == 0 ? d.C / d.NH : 0;
  // (the gradient count is not in OpDims; no backend sizes scratch by it)
  std::vector<OpShape> ops{OpShape::embedding(N, d.C), OpShape::sum_squares(0)};
  if (d.C > 0) ops.push_back(OpShape::layernorm(N, d.C));
  for (int64_t oc : {d.C, 3 * d.C, 4 * d.C, d.Vp})
    if (oc > 0) ops.push_back(OpShape::matmul(N, d.C, oc));
  // Always listed (even without heads): the CPU's attention scratch depends on T alone.
  OpShape att = OpShape::attention(d.B, d.T, d.NH, HS, /*causal=*/true);
  ops.push_back(att);
  if (d.Vp > 0) ops.push_back(OpShape::classifier(N, d.V, d.Vp));
  return ops;
}

// deprecated OpDims queries: GPT-2's op list through the OpShape ones. bf16 as the workspace
// has always been sized (the CUDA backend planned cuDNN's bf16 plans whatever the precision).
size_t Backend::workspace_bytes(const OpDims& d) const {
  const std::vector<OpShape> ops = gpt2_op_shapes(d);
  return workspace_bytes(std::span<const OpShape>(ops), Precision::bf16);
}
size_t Backend::attention_saved_bytes(const OpDims& d, Precision p) const {
  const int64_t HS = d.NH > 0 && d.C % d.NH == 0 ? d.C / d.NH : 0;
  return attention_saved_bytes(OpShape::attention(d.B, d.T, d.NH, HS), p);
}

bool cuda_available() {
#ifdef FITTRAIN_HAVE_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(DeviceKind kind) {
  if (kind == DeviceKind::cpu) return make_cpu_backend();
#ifdef FITTRAIN_HAVE_CUDA
  FT_USER_CHECK(cuda_device_count() > 0, "--device cuda: no CUDA device is visible");
  return make_cuda_backend();
#else
  throw UserError("--device cuda: this build of fittrain has no CUDA backend (rebuild with nvcc present)");
#endif
}

}  // namespace ft
