// The device trace through CUPTI's activity API (see backend/device_trace.h). CUPTI hands
// filled record buffers to bufferCompleted (on its own thread, or at a flush); records are
// copied out there, so the buffers go back at once.
#include "backend/device_trace.h"

#include <cupti.h>
#include <cuda_runtime.h>
#include <cxxabi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"

#define CUPTI_CHECK(call)                                                                               \
  do {                                                                                                  \
    const CUptiResult r_ = (call);                                                                      \
    if (r_ != CUPTI_SUCCESS) {                                                                          \
      const char* s_ = nullptr;                                                                         \
      cuptiGetResultString(r_, &s_);                                                                    \
      throw ::ft::InternalError(::ft::detail::concat(__FILE__, ":", __LINE__, ": CUPTI error ",         \
                                                     s_ ? s_ : "?", " in ", #call));                    \
    }                                                                                                   \
  } while (0)

namespace ft::device_trace {

namespace {

struct Record {
  enum class Kind : uint8_t { kernel, memcpy, memset, mark } kind;
  uint32_t stream = 0, device = 0;
  uint64_t start = 0, end = 0, bytes = 0;
  int64_t value = 0;
  std::string name;  // kernel (demangled, without its argument list) or mark
};

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

std::mutex g_mu;  // guards the two below
std::vector<Record> g_records;
std::unordered_map<const char*, std::string> g_names;  // CUPTI's name pointer -> readable name
std::atomic<bool> g_recording{false};
bool g_callbacks_registered = false;

std::string readable(const char* mangled) {
  auto it = g_names.find(mangled);
  if (it != g_names.end()) return it->second;
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  const std::string s = kernel_name((status == 0 && d) ? d : mangled);
  std::free(d);
  g_names.emplace(mangled, s);
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mu);
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    Record r;
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        r = Record{Record::Kind::kernel, k->streamId, k->deviceId, k->start, k->end, 0, 0, readable(k->name)};
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        r = Record{Record::Kind::memcpy, m->streamId, m->deviceId, m->start, m->end, m->bytes, m->copyKind, {}};
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        r = Record{Record::Kind::memset, m->streamId, m->deviceId, m->start, m->end, m->bytes, 0, {}};
        break;
      }
      default:
        continue;
    }
    g_records.push_back(std::move(r));
  }
  std::free(buffer);
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

}  // namespace

bool available() { return true; }

void start() {
  FT_CHECK(!g_recording.load(), "device trace: already recording");
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_records.clear();
  }
  if (!g_callbacks_registered) {
    CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    g_callbacks_registered = true;
  }
  for (CUpti_ActivityKind k : kKinds) CUPTI_CHECK(cuptiActivityEnable(k));
  g_recording = true;
}

bool recording() { return g_recording.load(); }

void mark(std::string_view what, int64_t value) {
  if (!g_recording.load(std::memory_order_relaxed)) return;
  uint64_t t = 0;
  if (cuptiGetTimestamp(&t) != CUPTI_SUCCESS) return;
  std::lock_guard<std::mutex> lock(g_mu);
  g_records.push_back(Record{Record::Kind::mark, 0, 0, t, t, 0, value, std::string(what)});
}

int64_t stop(const std::string& path) {
  FT_CHECK(g_recording.load(), "device trace: not recording");
  g_recording = false;
  cudaDeviceSynchronize();  // every queued activity has its end time
  CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  for (CUpti_ActivityKind k : kKinds) CUPTI_CHECK(cuptiActivityDisable(k));
  std::lock_guard<std::mutex> lock(g_mu);
  std::ofstream f(path);
  if (!f) throw UserError(detail::concat("FT_TRACE: cannot write ", path));
  int64_t device_records = 0;
  for (const Record& r : g_records) {
    if (r.kind == Record::Kind::mark) {
      f << R"({"kind":"mark","what":")" << json_escape(r.name) << R"(","value":)" << r.value << R"(,"time":)"
        << r.start << "}\n";
      continue;
    }
    ++device_records;
    const char* kind = r.kind == Record::Kind::kernel ? "kernel" : r.kind == Record::Kind::memcpy ? "memcpy" : "memset";
    f << R"({"kind":")" << kind << '"';
    if (r.kind == Record::Kind::kernel) f << R"(,"name":")" << json_escape(r.name) << '"';
    else f << R"(,"bytes":)" << r.bytes;
    if (r.kind == Record::Kind::memcpy) f << R"(,"copy":)" << r.value;
    f << R"(,"start":)" << r.start << R"(,"end":)" << r.end << R"(,"stream":)" << r.stream << R"(,"device":)"
      << r.device << "}\n";
  }
  if (!f.flush()) throw UserError(detail::concat("FT_TRACE: writing ", path, " failed"));
  g_records.clear();
  return device_records;
}

}  // namespace ft::device_trace
