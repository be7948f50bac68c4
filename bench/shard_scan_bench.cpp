// Speed of the open-time vocabulary scan (TokenShard::max_token) and of the cached path.
//   bench/shard_scan.sh [GiB]   builds this against build/libfittrain_core.a and runs it
//   shard_scan_bench SHARD      times: scan with the file's pages evicted (posix_fadvise
//                               DONTNEED: read from disk), scan from the page cache, and a
//                               TokenDataset open that finds the scan in the cache.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "data/dataset.h"
#include "data/shard_scan.h"
#include "data/token_shard.h"

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
void evict(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SHARD\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const double mb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
  for (int cold = 1; cold >= 0; --cold) {
    for (int rep = 0; rep < 3; ++rep) {
      if (cold) evict(path);
      ft::TokenShard s(path);
      const double t0 = now_s();
      const uint32_t m = s.max_token();
      const double dt = now_s() - t0;
      std::printf("%s scan: %.1f MB in %.3f s = %.0f MB/s (max token %u)\n",
                  cold ? "disk  " : "cached", mb, dt, mb / dt, m);
    }
  }
  const std::string cache = "/tmp/fittrain_scan_bench_cache";
  std::filesystem::remove_all(cache);
  for (int rep = 0; rep < 2; ++rep) {
    const double t0 = now_s();
    ft::TokenDataset ds(std::vector<std::string>{path}, 1024, 1u << 20, "--data-path",
                        ft::ScanCacheOptions{cache, 0});
    std::printf("TokenDataset open %s: %.4f s\n", ds.shards_from_cache() ? "with the scan cached " : "scanning (cache empty)",
                now_s() - t0);
  }
  std::filesystem::remove_all(cache);
  return 0;
}
