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

// A kernel's name in the trace, from its demangled signature: without a leading "void " and
// the argument list, "(anonymous namespace)" kept as "{anon}" (cutting at its "(" left every
// kernel of an anonymous namespace named "ft::cuda::", one row in the summaries). Inline: the
// CUPTI library calls it, the CPU tests check it.
inline std::string kernel_name(std::string_view demangled) {
  std::string s(demangled);
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  constexpr std::string_view kAnon = "(anonymous namespace)";
  for (size_t at = s.find(kAnon); at != std::string::npos; at = s.find(kAnon, at)) s.replace(at, kAnon.size(), "{anon}");
  // "ft::foo<...>(args)" -> "ft::foo<...>": the argument list says nothing new (a "(" inside
  // the template arguments, e.g. a function type, is not the list)
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0) {
      s.resize(i);
      break;
    }
  }
  return s;
}

}  // namespace ft::device_trace
