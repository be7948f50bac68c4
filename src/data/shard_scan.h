// The largest token of a shard, remembered across runs so that large data is scanned once.
//
// TokenDataset checks at open that every token of every shard is below the vocabulary, so
// that bad data stops a run before step 1 rather than at the step that draws it. The check
// needs the shard's largest token: one pass over the map (TokenShard::max_token, a few GB/s),
// cached in a small file per shard under the cache folder, keyed by the shard's absolute
// path, device, inode, size, mtime and ctime (nanoseconds). Any difference, an unreadable or
// corrupt cache file (CRC-32C over its text), or no cache folder at all means a rescan: a
// cache failure never fails a run, it only costs a scan. A shard changed within the last
// two seconds is not cached (file timestamps are coarse, so a change in the same tick could
// go unseen), the way git treats "racily clean" index entries.
#pragma once
#include <cstdint>
#include <string>

#include "data/token_shard.h"

namespace ft {

// $FITTRAIN_CACHE_DIR, else $XDG_CACHE_HOME/fittrain, else $HOME/.cache/fittrain; "" when
// none of them is set (no cache).
std::string default_scan_cache_dir();

struct ShardScan {
  uint32_t max_token = 0;
  bool from_cache = false;  // true: read from the cache, the shard was not scanned
};

struct ScanCacheOptions {
  std::string dir;                     // "" : no cache (always scan)
  int64_t racy_ns = 2'000'000'000;     // don't cache a shard changed this recently
};

// The shard's largest token, from the cache when its entry matches the shard, else by a
// scan whose result is then stored (best effort: errors are ignored).
ShardScan scan_shard(const TokenShard& shard, const ScanCacheOptions& cache);

// The cache file that holds `shard_path`'s entry under `dir`.
std::string scan_cache_file(const std::string& dir, const std::string& shard_path);

}  // namespace ft
