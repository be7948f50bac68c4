#include "backend/cuda/process_memory.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

namespace ft::cuda {

namespace {

// The few NVML entry points needed, declared here because the toolkit ships no nvml.h on
// every install; these signatures are NVML's stable C ABI (nvml.h, NVML API v2+).
using nvmlReturn_t = int;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};

struct Nvml {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*by_pci)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  bool ok = false;
  Nvml() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(lib, "nvmlInit_v2"));
    by_pci = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    memory = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    ok = init && by_pci && memory && init() == 0;
  }
};

}  // namespace

std::optional<size_t> device_used_bytes(int device) {
  static Nvml nvml;  // initialised once, thread-safe
  if (!nvml.ok) return std::nullopt;
  char bus[32] = {0};
  // The PCI bus id names the same GPU for the runtime and NVML whatever CUDA_VISIBLE_DEVICES
  // renumbers; asking for it creates no context.
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  nvmlDevice_t dev = nullptr;
  nvmlMemory_t mem{};
  if (nvml.by_pci(bus, &dev) != 0 || nvml.memory(dev, &mem) != 0) return std::nullopt;
  return static_cast<size_t>(mem.used);
}

}  // namespace ft::cuda
