// Token shard reading (mmap) and atomic writing; see token_shard.h for the formats.
#include "data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "core/error.h"
#include "data/mapped_file.h"

namespace ft {
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly n bytes at offset; false on a short read or error.
bool pread_all(int fd, void* buf, size_t n, off_t offset) {
  auto* p = static_cast<unsigned char*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, offset);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    offset += r;
  }
  return true;
}

void write_all(int fd, const void* buf, size_t n, const std::string& path) {
  const auto* p = static_cast<const unsigned char*>(buf);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    FT_USER_CHECK(w > 0, path, ": cannot write token shard: ", std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::string file_kind(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

TokenShard::TokenShard(const std::string& path) : path_(path) {
  // stat first: open(2) of a FIFO for reading blocks until a writer comes, possibly forever.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    FT_USER_CHECK(S_ISREG(st.st_mode), path, ": is ", file_kind(st.st_mode),
                  ", not a token shard file (a shard must be a regular file)");
  }
  Fd f;
  // O_NONBLOCK: should the path become a FIFO between stat and open, open returns at once
  // and the fstat below refuses it. It changes nothing for a regular file.
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FT_USER_CHECK(f.fd >= 0, path, ": cannot open token shard: ", std::strerror(errno));
  FT_USER_CHECK(::fstat(f.fd, &st) == 0, path, ": cannot stat token shard: ",
                std::strerror(errno));
  FT_USER_CHECK(S_ISREG(st.st_mode), path, ": is ", file_kind(st.st_mode),
                ", not a token shard file (a shard must be a regular file)");
  id_.dev = static_cast<uint64_t>(st.st_dev);
  id_.ino = static_cast<uint64_t>(st.st_ino);
  id_.bytes = static_cast<uint64_t>(st.st_size);
  id_.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  id_.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  const auto file_bytes = static_cast<size_t>(st.st_size);
  FT_USER_CHECK(file_bytes >= kShardHeaderBytes, path, ": token shard is too small for its header (",
                file_bytes, " bytes, the header alone is ", kShardHeaderBytes, " bytes)");

  int32_t header[kShardHeaderInts];
  FT_USER_CHECK(pread_all(f.fd, header, sizeof(header), 0), path,
                ": cannot read token shard header: ", std::strerror(errno));
  const int32_t magic = header[0], version = header[1], count = header[2];
  if (magic == kShardMagicU16) {
    token_bytes_ = 2;
    FT_USER_CHECK(version == kShardVersionU16, path, ": unsupported token shard version ",
                  version, " for the llm.c uint16 format (expected ", kShardVersionU16, ")");
  } else if (magic == kShardMagicU32) {
    token_bytes_ = 4;
    FT_USER_CHECK(version == kShardVersionU32, path, ": unsupported token shard version ",
                  version, " for the fittrain uint32 format (expected ", kShardVersionU32, ")");
  } else {
    throw UserError(detail::concat(path, ": bad magic number ", magic,
                                   " in token shard header (expected ", kShardMagicU16,
                                   " for llm.c uint16 tokens or ", kShardMagicU32,
                                   " for fittrain uint32 tokens)"));
  }
  FT_USER_CHECK(count >= 0, path, ": negative token count ", count, " in token shard header");
  count_ = static_cast<size_t>(count);
  const size_t expected = kShardHeaderBytes + count_ * static_cast<size_t>(token_bytes_);
  FT_USER_CHECK(file_bytes == expected, path, ": token shard size mismatch: header says ",
                count_, " tokens of ", token_bytes_, " bytes, so expected ", expected,
                " bytes, but the file has ", file_bytes, " bytes",
                file_bytes < expected ? " (truncated?)" : " (trailing data)");

  map_bytes_ = file_bytes;
  void* m = map_data_file(f.fd, map_bytes_);
  FT_USER_CHECK(m != MAP_FAILED, path, ": cannot mmap token shard: ", std::strerror(errno));
  map_ = m;
  tokens_ = static_cast<const unsigned char*>(map_) + kShardHeaderBytes;
}

TokenShard::~TokenShard() { release(); }

namespace {

// Max over n tokens: SIMD lanes within each thread's contiguous part, threads over parts.
template <class T>
uint32_t max_of(const T* p, size_t n) {
  T m = 0;
#pragma omp parallel for simd reduction(max : m) schedule(static) if (n >= (size_t{1} << 22))
  for (size_t i = 0; i < n; ++i) m = p[i] > m ? p[i] : m;
  return m;
}

}  // namespace

uint32_t TokenShard::max_token() const {
  if (count_ == 0) return 0;
  // Sequential read-ahead while scanning; training then reads windows at random. Each 64 MiB
  // is handed back once scanned, so the scan of the whole shard (GPT-2's OpenWebText: 18 GB)
  // does not stay in the resident set, nor push up its peak.
  ::madvise(map_, map_bytes_, MADV_SEQUENTIAL);
  const size_t per = (size_t{64} << 20) / static_cast<size_t>(token_bytes_);
  uint32_t m = 0;
  for (size_t b = 0; b < count_; b += per) {
    const size_t k = std::min(per, count_ - b);
    const unsigned char* p = tokens_ + b * static_cast<size_t>(token_bytes_);
    m = std::max(m, token_bytes_ == 2 ? max_of(reinterpret_cast<const uint16_t*>(p), k)
                                      : max_of(reinterpret_cast<const uint32_t*>(p), k));
    release_data_range(p, k * static_cast<size_t>(token_bytes_));
  }
  ::madvise(map_, map_bytes_, MADV_NORMAL);
  return m;
}

size_t TokenShard::first_token_at_least(uint32_t limit) const {
  for (size_t i = 0; i < count_; ++i)
    if (token(i) >= limit) return i;
  return count_;
}

void TokenShard::release() noexcept {
  unmap_data_file(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
  count_ = 0;
}

TokenShard::TokenShard(TokenShard&& o) noexcept
    : path_(std::move(o.path_)),
      map_(o.map_),
      map_bytes_(o.map_bytes_),
      tokens_(o.tokens_),
      count_(o.count_),
      token_bytes_(o.token_bytes_),
      id_(o.id_) {
  o.map_ = nullptr;
  o.map_bytes_ = 0;
  o.tokens_ = nullptr;
  o.count_ = 0;
}

TokenShard& TokenShard::operator=(TokenShard&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = o.map_;
    map_bytes_ = o.map_bytes_;
    tokens_ = o.tokens_;
    count_ = o.count_;
    token_bytes_ = o.token_bytes_;
    id_ = o.id_;
    o.map_ = nullptr;
    o.map_bytes_ = 0;
    o.tokens_ = nullptr;
    o.count_ = 0;
  }
  return *this;
}

void write_shard(const std::string& path, std::span<const uint32_t> tokens) {
  FT_USER_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), path,
                ": cannot write ", tokens.size(), " tokens in one shard (the header's count is an int32)");
  bool wide = false;
  for (uint32_t t : tokens) wide |= t > 0xFFFFu;

  int32_t header[kShardHeaderInts] = {};
  header[0] = wide ? kShardMagicU32 : kShardMagicU16;
  header[1] = wide ? kShardVersionU32 : kShardVersionU16;
  header[2] = static_cast<int32_t>(tokens.size());

  const std::string tmp = path + ".tmp";
  {
    Fd f;
    f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FT_USER_CHECK(f.fd >= 0, tmp, ": cannot create token shard: ", std::strerror(errno));
    write_all(f.fd, header, sizeof(header), tmp);
    if (wide) {
      write_all(f.fd, tokens.data(), tokens.size_bytes(), tmp);
    } else {
      // Narrow in bounded chunks so that writing never doubles the caller's memory.
      std::vector<uint16_t> buf;
      constexpr size_t kChunk = 1 << 16;
      for (size_t i = 0; i < tokens.size(); i += kChunk) {
        const size_t n = std::min(kChunk, tokens.size() - i);
        buf.resize(n);
        for (size_t j = 0; j < n; ++j) buf[j] = static_cast<uint16_t>(tokens[i + j]);
        write_all(f.fd, buf.data(), n * sizeof(uint16_t), tmp);
      }
    }
    FT_USER_CHECK(::fsync(f.fd) == 0, tmp, ": fsync failed: ", std::strerror(errno));
  }
  FT_USER_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, path, ": cannot rename ", tmp,
                " into place: ", std::strerror(errno));
  // fsync the folder so the rename itself survives a crash.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  Fd d;
  d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d.fd >= 0) ::fsync(d.fd);
}

}  // namespace ft
