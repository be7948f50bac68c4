// Host memory as the kernel reports it: available and total (/proc/meminfo) for budgets,
// and this process's resident set (/proc/self/statm) and its peak (VmHWM) for plans and logs.
#pragma once
#include <cstddef>

namespace ft {

// MemAvailable and MemTotal in bytes. Throws InternalError if /proc/meminfo can't be read.
void host_memory_info(size_t* available, size_t* total);
size_t host_rss_bytes();
// The largest resident set this process has had (VmHWM of /proc/self/status; 0 if unreadable).
size_t host_peak_rss_bytes();

}  // namespace ft
