// The CUDA backend: bf16, fp16 (or fp32) kernels on one stream, matrix products through cuBLASLt,
// fused flash-style attention and fused softmax/cross-entropy of its own.
#pragma once
#include <memory>

#include "backend/backend.h"

namespace ft {
// Number of visible CUDA devices; 0 (never an exception) when there is no driver or device.
int cuda_device_count();
// On device `ordinal` (made current for this process first), or the current one for -1.
std::unique_ptr<Backend> make_cuda_backend(int ordinal = -1);
}  // namespace ft
