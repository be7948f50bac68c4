// Device trace: what the GPU ran (kernels, copies, memsets), with the device's own start and
// end times, plus host-side marks on the same clock. It shows what a profile of kernel
// durations cannot: idle gaps, and how communication overlaps compute across streams
// (bench/trace_summary.py reads it). The device image has no Nsight Systems; this is CUPTI's
// activity API, which Nsight Systems and PyTorch's profiler are built on.
//
// CUDA builds that found CUPTI only (backend/cuda/cupti/device_trace.cpp); elsewhere
// available() is false and start() refuses with a UserError.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace ft::device_trace {

bool available();
// Begins recording every device activity of this process.
void start();
bool recording();
// A host-side event (e.g. "step", 21) at the current time; nothing when not recording.
void mark(std::string_view what, int64_t value);
// Ends recording and writes one JSON object a line to `path`:
//   {"kind":"kernel","name":...,"start":ns,"end":ns,"stream":s,"device":d}
//   {"kind":"memcpy"|"memset","bytes":n,"start":ns,"end":ns,"stream":s,"device":d}
//   {"kind":"mark","what":...,"value":v,"time":ns}
// Returns the number of device records written.
int64_t stop(const std::string& path);

}  // namespace ft::device_trace
