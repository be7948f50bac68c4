// What the CUDA backend was built with (fittrain --version).
#include <cuda_runtime_api.h>

#include <string>

#include "backend/backend.h"
#ifdef FITTRAIN_HAVE_CUDNN
#include <cudnn_version.h>
#endif

namespace ft {

std::string cuda_build_description() {
  std::string s = "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
                  ", cuBLASLt";
#ifdef FITTRAIN_HAVE_CUDNN
  s += ", cuDNN " + std::to_string(CUDNN_MAJOR) + "." + std::to_string(CUDNN_MINOR) + "." +
       std::to_string(CUDNN_PATCHLEVEL);
#else
  s += ", no cuDNN (fittrain's attention kernels only)";
#endif
  return s + "; " + std::to_string(cuda_devices()) + " device(s) visible now";
}

}  // namespace ft
