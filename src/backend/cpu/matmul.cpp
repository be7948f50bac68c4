#include "backend/cpu/matmul.h"

#include <cblas.h>

namespace ft {

void matmul_forward_cpu(float* out, const float* inp, const float* w, const float* bias,
                        int64_t N, int64_t C, int64_t OC) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(N),
              static_cast<blasint>(OC), static_cast<blasint>(C), 1.0f, inp,
              static_cast<blasint>(C), w, static_cast<blasint>(C), 0.0f, out,
              static_cast<blasint>(OC));
  if (bias == nullptr) return;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* o = out + n * OC;
    for (int64_t j = 0; j < OC; ++j) o[j] += bias[j];
  }
}

void matmul_backward_cpu(float* dinp, float* dw, float* dbias, const float* dout,
                         const float* inp, const float* w, int64_t N, int64_t C, int64_t OC,
                         bool accumulate) {
  if (dinp != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(N),
                static_cast<blasint>(C), static_cast<blasint>(OC), 1.0f, dout,
                static_cast<blasint>(OC), w, static_cast<blasint>(C), 0.0f, dinp,
                static_cast<blasint>(C));
  }
  if (dw == nullptr) return;  // the weight's gradient comes from a later call
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<blasint>(OC),
              static_cast<blasint>(C), static_cast<blasint>(N), 1.0f, dout,
              static_cast<blasint>(OC), inp, static_cast<blasint>(C), accumulate ? 1.0f : 0.0f, dw,
              static_cast<blasint>(C));
  if (dbias != nullptr) bias_backward_cpu(dbias, dout, N, OC, accumulate);
}

void bias_backward_cpu(float* dbias, const float* dout, int64_t N, int64_t OC, bool accumulate, int64_t ld) {
  constexpr int64_t kBlock = 32;
  if (ld == 0) ld = OC;
  const int64_t nblocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t j0 = blk * kBlock;
    const int64_t len = j0 + kBlock < OC ? kBlock : OC - j0;
    double s[kBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* d = dout + n * ld + j0;
      for (int64_t j = 0; j < len; ++j) s[j] += d[j];
    }
    for (int64_t j = 0; j < len; ++j)
      dbias[j0 + j] = static_cast<float>(s[j]) + (accumulate ? dbias[j0 + j] : 0.f);
  }
}

}  // namespace ft
