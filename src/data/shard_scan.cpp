// Shard scan cache; see shard_scan.h.
#include "data/shard_scan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/crc32c.h"

namespace ft {
namespace fs = std::filesystem;

namespace {

constexpr const char* kMagicLine = "fittrain-shard-scan 1";

std::string absolute_path(const std::string& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  return ec ? p : a.lexically_normal().string();
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// The entry's text without its CRC line.
std::string entry_body(const std::string& abs_path, const TokenShard& s, uint32_t max_token) {
  const ShardFileId& id = s.file_id();
  std::ostringstream os;
  os << kMagicLine << "\n"
     << id.dev << " " << id.ino << " " << id.bytes << " " << id.mtime_ns << " " << id.ctime_ns << " "
     << s.token_bytes() << " " << s.size() << " " << max_token << "\n"
     << abs_path << "\n";
  return os.str();
}

std::string crc_line(const std::string& body) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "crc %08x\n", crc32c(body.data(), body.size()));
  return buf;
}

// The cached maximum if the entry exists, is intact and describes this very file.
bool read_entry(const std::string& file, const std::string& abs_path, const TokenShard& s, uint32_t* max_token) {
  std::ifstream f(file, std::ios::binary);
  if (!f) return false;
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (text.size() > 65536) return false;
  const size_t crc_at = text.rfind("crc ");
  if (crc_at == std::string::npos || crc_at == 0 || text[crc_at - 1] != '\n') return false;
  const std::string body = text.substr(0, crc_at);
  if (text.substr(crc_at) != crc_line(body)) return false;
  // Parse the maximum, then require the whole body to be what this shard would write.
  std::istringstream is(body);
  std::string magic, numbers;
  if (!std::getline(is, magic) || !std::getline(is, numbers)) return false;
  std::istringstream ns(numbers);
  uint64_t v[8];
  for (auto& x : v)
    if (!(ns >> x)) return false;
  if (v[7] > UINT32_MAX) return false;
  const auto m = static_cast<uint32_t>(v[7]);
  if (body != entry_body(abs_path, s, m)) return false;
  *max_token = m;
  return true;
}

bool same_file(const std::string& path, const ShardFileId& id) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  return static_cast<uint64_t>(st.st_dev) == id.dev && static_cast<uint64_t>(st.st_ino) == id.ino &&
         static_cast<uint64_t>(st.st_size) == id.bytes &&
         static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec == id.mtime_ns &&
         static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec == id.ctime_ns;
}

void write_entry(const std::string& file, const std::string& text) {
  std::error_code ec;
  fs::create_directories(fs::path(file).parent_path(), ec);
  if (ec) return;
  const std::string tmp = file + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;
    f << text;
    f.flush();
    if (!f) {
      f.close();
      fs::remove(tmp, ec);
      return;
    }
  }
  // Atomic: a reader sees the old entry, the new one, or none; never half of one.
  fs::rename(tmp, file, ec);
  if (ec) fs::remove(tmp, ec);
}

}  // namespace

std::string default_scan_cache_dir() {
  if (const char* d = std::getenv("FITTRAIN_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/fittrain";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/fittrain";
  return "";
}

std::string scan_cache_file(const std::string& dir, const std::string& shard_path) {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.ftscan",
                static_cast<unsigned long long>(fnv1a64(absolute_path(shard_path))));
  return dir + "/shard-scan/" + name;
}

ShardScan scan_shard(const TokenShard& shard, const ScanCacheOptions& cache) {
  ShardScan r;
  std::string file, abs;
  if (!cache.dir.empty()) {
    try {
      abs = absolute_path(shard.path());
      file = scan_cache_file(cache.dir, shard.path());
      if (read_entry(file, abs, shard, &r.max_token)) {
        r.from_cache = true;
        return r;
      }
    } catch (...) {  // a cache problem only costs a scan
      file.clear();
    }
  }
  r.max_token = shard.max_token();
  if (file.empty()) return r;
  try {
    const ShardFileId& id = shard.file_id();
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    const int64_t now_ns = static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
    const int64_t changed = std::max(id.mtime_ns, id.ctime_ns);
    // Not while a change in the same timestamp tick could still go unseen, and not if the
    // file changed during the scan.
    if (now_ns - changed >= cache.racy_ns && same_file(shard.path(), id)) {
      const std::string body = entry_body(abs, shard, r.max_token);
      write_entry(file, body + crc_line(body));
    }
  } catch (...) {
  }
  return r;
}

}  // namespace ft
