// Stream and event handles of the backend seam (backend/backend.h), in their own header so
// that the optimizer step's parameters (backend/update_rule.h) can name a stream too.
#pragma once

namespace ft {

// Opaque stream/event handles, so communication can run beside compute without the caller
// seeing a device type. CUDA: native is a cudaStream_t / cudaEvent_t; the CPU is synchronous
// and its handles are null. A default (null) StreamHandle means the compute stream.
struct StreamHandle {
  void* native = nullptr;
};
struct EventHandle {
  void* native = nullptr;
};
// A side stream's claim on the SMs against the compute stream's: when both have blocks
// waiting, a higher-priority stream's are scheduled first (running blocks are never
// preempted). The compute stream is `normal`. `high`: collectives that the backward's kernels
// would otherwise hold back. `low`: work that should only fill SMs the compute stream leaves
// idle (the ZeRO-1 update running beside the next forward).
enum class StreamPriority { low, normal, high };

}  // namespace ft
