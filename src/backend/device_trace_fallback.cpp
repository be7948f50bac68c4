// Builds without CUPTI (no CUDA, or CUPTI not found): no device trace.
#ifndef FITTRAIN_HAVE_CUPTI
#include "backend/device_trace.h"

#include "core/error.h"

namespace ft::device_trace {

bool available() { return false; }
void start() {
  throw UserError("FT_TRACE: a device trace needs a CUDA build with CUPTI (the CUDA toolkit's profiling library)");
}
bool recording() { return false; }
void mark(std::string_view, int64_t) {}
int64_t stop(const std::string&) { return 0; }

}  // namespace ft::device_trace
#endif
