// CudaBackendBase::silu_matmul_forward (cuda_backend_impl.h): a SiLU MLP's second product,
// through cuDNN's fused plan (silu_matmul_cudnn.cu) where the first call of a shape measured it
// faster than the SiLU pass + cuBLASLt product (Backend::silu_matmul_forward), else the latter.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/backend_checks.h"
#include "backend/cuda/candidate_timing.cuh"
#include "backend/cuda/cuda_backend_impl.h"

namespace ft::cuda {

size_t CudaBackendBase::silu_matmul_scratch(const OpShape& o, Precision p) const {
  if (p == Precision::fp32 || sw_.silu_matmul == SiluMatmul::off || o.rows <= 0 || !silu_mm_.available()) return 0;
  return CudnnSiluMatmul::kMaxWorkspace;
}

void CudaBackendBase::silu_matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, Tensor act) {
  const char* op = "silu_matmul_forward";
  const auto [N, C, OC] = check_forward_product(op, inp, w, bias, {&out});
  check_elementwise(op, inp, {&act});
  // cuDNN's tensors are declared 16-byte aligned; a parameter slice need not be (the flat
  // parameter buffer packs tensors back to back), and then the pass and product run
  const bool aligned =
      aligned16(out.data) && aligned16(inp.data) && aligned16(w.data) && (bias.empty() || aligned16(bias.data));
  if (aligned && sw_.silu_matmul != SiluMatmul::off && inp.dtype != DType::f32 && silu_mm_.available()) {
    const auto key = std::make_tuple((int)inp.dtype, N, C, OC, !bias.empty());
    auto it = silu_mm_path_.find(key);
    if (it == silu_mm_path_.end()) {
      const int n = silu_mm_.plans(inp.dtype, N, C, OC, !bias.empty(), ctx_.scratch_bytes);
      const int path = n == 0 ? -1 : sw_.silu_matmul == SiluMatmul::cudnn ? 0 : choose_silu_matmul(out, inp, w, bias, act, n);
      it = silu_mm_path_.emplace(key, path).first;
    }
    if (it->second >= 0) {
      silu_mm_.run(ctx_, it->second, inp.dtype, out.data, inp.data, w.data, bias.empty() ? nullptr : bias.data, N, C,
                   OC);
      return;
    }
  }
  Backend::silu_matmul_forward(out, inp, w, bias, act);
}

// Times the pass + product (-1) and each of cuDNN's `plans` plans on this call's own operands
// (the op only overwrites out and act, so repeating it is harmless), as every tuning times and
// picks (candidate_timing.cuh: interleaved rounds; no margin, the fastest wins).
int CudaBackendBase::choose_silu_matmul(Tensor out, Tensor inp, Tensor w, Tensor bias, Tensor act, int plans) {
  const auto [N, C, OC] = check_forward_product("silu_matmul_forward", inp, w, bias, {&out});
  auto call = [&](int path) {
    if (path < 0) Backend::silu_matmul_forward(out, inp, w, bias, act);
    else silu_mm_.run(ctx_, path, inp.dtype, out.data, inp.data, w.data, bias.empty() ? nullptr : bias.data, N, C, OC);
  };
  std::vector<bool> ok((size_t)plans + 1, true);  // [the pass + product, cuDNN's plans...]
  for (int path = -1; path < plans; ++path) {  // warm-up (and the product's own autotuning)
    if (path < 0) {
      call(path);
      continue;
    }
    // Earlier work's errors surface here, outside the try: only this plan's own are dropped.
    CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    try {  // a plan cuDNN finalized but cannot execute is dropped, not fatal
      call(path);
      CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    } catch (const InternalError& e) {
      ok[(size_t)(path + 1)] = false;
      if (std::getenv("FT_CUDNN_VERBOSE")) std::fprintf(stderr, "[fittrain] SiLU product plan %d: %s\n", path, e.what());
      // A plan whose kernel faulted left a sticky error: that ends the run, here, named.
      CUDA_CHECK(cudaDeviceSynchronize());
    }
  }
  const std::vector<float> best = time_candidates(ctx_.stream, ok, [&](size_t i) { call((int)i - 1); });
  const int chosen = (int)pick_fastest(best) - 1;
  if (std::getenv("FT_CUDNN_VERBOSE"))
    std::fprintf(stderr, "[fittrain] SiLU product N=%lld C=%lld OC=%lld: pass + product %.3f ms, cuDNN best %.3f ms: %s\n",
                 (long long)N, (long long)C, (long long)OC, best[0],
                 *std::min_element(best.begin() + 1, best.end()), chosen < 0 ? "pass + product" : "cuDNN");
  return chosen;
}

}  // namespace ft::cuda
