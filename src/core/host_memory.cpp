#include "core/host_memory.h"

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "core/error.h"

namespace ft {

void host_memory_info(size_t* available, size_t* total) {
  size_t avail = 0, tot = 0, value = 0;
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  while (f >> key >> value) {
    std::getline(f, unit);  // " kB"
    if (key == "MemTotal:") tot = value * 1024;
    if (key == "MemAvailable:") avail = value * 1024;
  }
  FT_CHECK(tot > 0, "cannot read MemTotal from /proc/meminfo");
  if (available) *available = avail;
  if (total) *total = tot;
}

size_t host_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages_total = 0, pages_rss = 0;
  f >> pages_total >> pages_rss;
  return pages_rss * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

size_t host_peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  size_t kib = 0;
  while (f >> key) {
    if (key == "VmHWM:" && f >> kib) return kib * 1024;
    f.ignore(1 << 16, '\n');
  }
  return 0;
}

}  // namespace ft
