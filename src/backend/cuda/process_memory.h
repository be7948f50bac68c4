// Device memory used on a GPU as nvidia-smi counts it (NVML's memory.used), read without a
// CUDA context so it can be taken before the backend creates one: the difference across
// the backend's creation is what the CUDA context and the library handles hold.
#pragma once
#include <cstddef>
#include <optional>

namespace ft::cuda {

// Bytes in use on the CUDA device `device` (runtime API ordinal) over all processes, or
// nullopt when NVML is not available (no driver library, a container without it). NVML is
// loaded with dlopen so the binary runs where libnvidia-ml is absent (CPU-only machines).
std::optional<size_t> device_used_bytes(int device);

}  // namespace ft::cuda
