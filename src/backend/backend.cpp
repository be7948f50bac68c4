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


bool cuda_available() {
#ifdef FITTRAIN_HAVE_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

#ifndef FITTRAIN_HAVE_CUDA
std::string cuda_build_description() { return "not built (no nvcc when this binary was configured)"; }
#endif

int cuda_devices() {
#ifdef FITTRAIN_HAVE_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

std::unique_ptr<Backend> make_backend(DeviceKind kind, int cuda_device) {
  if (kind == DeviceKind::cpu) return make_cpu_backend();
#ifdef FITTRAIN_HAVE_CUDA
  const int n = cuda_device_count();
  FT_USER_CHECK(n > 0, "--device cuda: no CUDA device is visible");
  FT_USER_CHECK(cuda_device < n, "CUDA device ", cuda_device, " is not visible (", n, " device", n == 1 ? "" : "s",
                ": 0..", n - 1, ")");
  return make_cuda_backend(cuda_device);
#else
  throw UserError("--device cuda: this build of fittrain has no CUDA backend (rebuild with nvcc present)");
#endif
}

}  // namespace ft
