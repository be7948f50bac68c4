// Host memory as the kernel reports it: available and total (/proc/meminfo) for budgets,
// and this process's resident set (/proc/self/statm) and its peak (VmHWM) for plans and logs;
// large zeroed host arrays.
#pragma once
#include <cstddef>
#include <memory>

namespace ft {

// MemAvailable and MemTotal in bytes. Throws InternalError if /proc/meminfo can't be read.
void host_memory_info(size_t* available, size_t* total);
size_t host_rss_bytes();
// The largest resident set this process has had (VmHWM of /proc/self/status; 0 if unreadable).
size_t host_peak_rss_bytes();

// n floats of zeros, their pages first touched by every OpenMP thread at once. A
// std::vector<float>(n) faults in and zeroes every page on one thread: for GPT-2 XL's fp32
// weights (6.2 GB) that took 6.6-13.0 s on the 2-core development VM, against 2.1-2.6 s with
// both cores (docs/PERFORMANCE.md, session 37).
std::unique_ptr<float[]> zeroed_host_floats(size_t n);

}  // namespace ft
