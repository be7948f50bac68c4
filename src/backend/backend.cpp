#include "backend/backend.h"

#include <cstdlib>
#include <vector>

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

void require_cuda_device() {
#ifdef FITTRAIN_HAVE_CUDA
  FT_USER_CHECK(cuda_device_count() > 0, "--device cuda: no CUDA device is visible (CUDA_VISIBLE_DEVICES='",
                std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "(not set)", "')");
#else
  throw UserError("--device cuda: this build of fittrain has no CUDA backend (rebuild with nvcc present)");
#endif
}

std::unique_ptr<Backend> make_backend(DeviceKind kind, int cuda_device) {
  if (kind == DeviceKind::cpu) return make_cpu_backend();
  require_cuda_device();
#ifdef FITTRAIN_HAVE_CUDA
  const int n = cuda_device_count();
  FT_USER_CHECK(cuda_device < n, "CUDA device ", cuda_device, " is not visible (", n, " device", n == 1 ? "" : "s",
                ": 0..", n - 1, ")");
  return make_cuda_backend(cuda_device);
#else
  return nullptr;  // unreachable: require_cuda_device threw
#endif
}

namespace {
// The CPU's: ordinary memory, and the backend's own (synchronous) copy.
class CopyingReadback final : public HostReadback {
 public:
  CopyingReadback(Backend& be, size_t bytes) : be_(be), buf_(bytes) {}
  const void* data() const override { return buf_.data(); }
  size_t bytes() const override { return buf_.size(); }
  void start(const void* src, size_t n) override {
    FT_CHECK(n <= buf_.size(), "HostReadback: ", n, " bytes into ", buf_.size());
    be_.copy_to_host(buf_.data(), src, n);
  }
  void wait() override {}

 private:
  Backend& be_;
  std::vector<char> buf_;
};
}  // namespace

void Backend::gated_residual_norm_modulate_forward(Tensor r, Tensor out, Tensor mean, Tensor rstd, Tensor res, Tensor y,
                                                  Tensor gate, const WindowOrder& y_order, Tensor shift, Tensor scale,
                                                  const NormModulateOptions& o) {
  gated_residual_forward(r, res, y, gate, y_order);
  norm_modulate_forward(out, mean, rstd, r, shift, scale, o);
}

void Backend::norm_modulate_gated_residual_backward(const ResidualNormGrads& g) {
  FT_CHECK(!g.o.overwrite_dinp, "norm_modulate_gated_residual_backward: dr accumulates (overwrite_dinp is for "
           "norm_modulate_backward)");
  norm_modulate_backward(g.dr, g.dshift, g.dscale, g.dout, g.r, g.mean, g.rstd, g.scale, g.o);
  gated_residual_backward(g.dy, g.dgate, g.dr, g.y, g.gate, g.y_order, g.dbias_y, g.gw);
}

std::unique_ptr<HostReadback> Backend::make_host_readback(size_t bytes) {
  return std::make_unique<CopyingReadback>(*this, bytes);
}

}  // namespace ft
