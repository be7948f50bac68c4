// Host memory: the kernel's figures are plausible, and zeroed_host_floats gives zeros even
// where the allocator hands back memory that held other values.
#include "core/host_memory.h"

#include <gtest/gtest.h>

#include <algorithm>
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

TEST(HostMemory, ZeroedFloatsAreZerosWhereOtherValuesWere) {
  for (const size_t n : {size_t{1}, size_t{1000}, size_t{3} << 20}) {
    { std::vector<float> dirty(n, 7.5f); }  // freed: the next allocation of this size may reuse it
    const auto p = zeroed_host_floats(n);
    EXPECT_TRUE(std::all_of(p.get(), p.get() + n, [](float x) { return x == 0.0f; })) << n;
  }
}

}  // namespace
}  // namespace ft
