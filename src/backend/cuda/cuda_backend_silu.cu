// CudaBackendBase::silu_matmul_forward (cuda_backend_impl.h): a SiLU MLP's second product,
// through cuDNN's fused plan (silu_matmul_cudnn.cu) where the first call of a shape measured it
// faster than the SiLU pass + cuBLASLt product (Backend::silu_matmul_forward), else the latter.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/backend_checks.h"
#include "backend/cuda/cuda_backend_impl.h"

namespace ft::cuda {

size_t CudaBackendBase::silu_matmul_scratch(const OpShape& o, Precision p) const {
  if (p == Precision::fp32 || sw_.silu_matmul == SiluMatmul::off || o.rows <= 0) return 0;
  size_t ws = 0;
  silu_mm_.plans(p == Precision::fp16 ? DType::f16 : DType::bf16, o.rows, o.cols, o.out_cols, /*bias=*/true,
                 kSiluMatmulMaxWorkspace, &ws);
  return ws;
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
// (the op only overwrites out and act, so repeating it is harmless): each candidate the best of
// three rounds of three calls, the rounds interleaved over the candidates so that a clock
// change during one timing does not decide (as the products' autotuning does, matmul.cu).
int CudaBackendBase::choose_silu_matmul(Tensor out, Tensor inp, Tensor w, Tensor bias, Tensor act, int plans) {
  const auto [N, C, OC] = check_forward_product("silu_matmul_forward", inp, w, bias, {&out});
  auto call = [&](int path) {
    if (path < 0) Backend::silu_matmul_forward(out, inp, w, bias, act);
    else silu_mm_.run(ctx_, path, inp.dtype, out.data, inp.data, w.data, bias.empty() ? nullptr : bias.data, N, C, OC);
  };
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> best((size_t)plans + 1, INFINITY);
  std::vector<bool> ok((size_t)plans + 1, true);
  for (int path = -1; path < plans; ++path) {  // warm-up (and the product's own autotuning)
    if (path < 0) {
      call(path);
      continue;
    }
    try {  // a plan cuDNN finalized but cannot execute is dropped, not fatal
      call(path);
      CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    } catch (const InternalError& e) {
      ok[(size_t)(path + 1)] = false;
      if (std::getenv("FT_CUDNN_VERBOSE")) std::fprintf(stderr, "[fittrain] SiLU product plan %d: %s\n", path, e.what());
    }
  }
  for (int round = 0; round < 3; ++round)
    for (int path = -1; path < plans; ++path) {
      if (!ok[(size_t)(path + 1)]) continue;
      CUDA_CHECK(cudaEventRecord(start, ctx_.stream));
      for (int r = 0; r < 3; ++r) call(path);
      CUDA_CHECK(cudaEventRecord(stop, ctx_.stream));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      best[(size_t)(path + 1)] = std::min(best[(size_t)(path + 1)], ms);
    }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  int chosen = -1;
  for (int path = 0; path < plans; ++path)
    if (best[(size_t)(path + 1)] < best[(size_t)(chosen + 1)]) chosen = path;
  if (std::getenv("FT_CUDNN_VERBOSE"))
    std::fprintf(stderr, "[fittrain] SiLU product N=%lld C=%lld OC=%lld: pass + product %.3f ms, cuDNN best %.3f ms: %s\n",
                 (long long)N, (long long)C, (long long)OC, best[0] / 3,
                 *std::min_element(best.begin() + 1, best.end()) / 3, chosen < 0 ? "pass + product" : "cuDNN");
  return chosen;
}

}  // namespace ft::cuda
