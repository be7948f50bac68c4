// Host memory: the kernel's figures are plausible, and the peak resident set keeps what was
// once touched.
#include "core/host_memory.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace ft {
namespace {

TEST(HostMemory, InfoAndResidentSetArePlausible) {
  size_t available = 0, total = 0;
  host_memory_info(&available, &total);
  EXPECT_GT(total, size_t{1} << 28);
  EXPECT_LE(available, total);
  EXPECT_GT(host_rss_bytes(), size_t{0});
  EXPECT_LT(host_rss_bytes(), total);
}

// The peak resident set never falls: 64 MiB touched and freed stay in it. Each resident set
// is read before the peak (the set may grow between two reads), and the kernel counts pages
// per thread in batches of up to 64 pages before adding them up, so the two figures may
// differ by that much a thread (measured: 40 pages with 2 threads).
TEST(HostMemory, PeakResidentSetHoldsWhatWasOnceTouched) {
  const size_t slack = 64 * static_cast<size_t>(sysconf(_SC_PAGESIZE)) * (std::thread::hardware_concurrency() + 1);
  const size_t n = size_t{64} << 20, rss_before = host_rss_bytes(), before = host_peak_rss_bytes();
  EXPECT_GE(before + slack, rss_before);
  size_t rss_with = 0;
  {
    const std::vector<float> p(n / sizeof(float), 1.0f);  // every page touched
    rss_with = host_rss_bytes();
    EXPECT_GE(rss_with, n);
  }
  EXPECT_GE(host_peak_rss_bytes() + slack, std::max(before, rss_with));
}

}  // namespace
}  // namespace ft
