// Checkpoint writer and reader; the format is described in checkpoint.h.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <chrono>
#include <filesystem>
#include <unordered_set>
#include <utility>

#include "core/crc32c.h"
#include "core/error.h"

namespace ft {

namespace testing {
int64_t fail_checkpoint_write_after_bytes = -1;
}  // namespace testing

namespace {

// Integers are stored in host order, which the format fixes as little-endian.
static_assert(std::endian::native == std::endian::little,
              "checkpoint format assumes little-endian");

constexpr char kMagic[8] = {'F', 'T', 'C', 'K', 'P', 'T', '\0', '\1'};
constexpr size_t kHeaderBytes = 32;
constexpr size_t kEntryBytes = 104;
constexpr size_t kNameBytes = 64;
constexpr size_t kDtypeBytes = 16;
constexpr size_t kChunk = 4 << 20;        // the granularity payloads are written and read in

uint64_t align8(uint64_t x) { return (x + 7) & ~uint64_t{7}; }

template <class T>
void put(uint8_t* p, T v) { std::memcpy(p, &v, sizeof(T)); }
template <class T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string errno_text() { return std::strerror(errno); }

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

// The tmp file being written: closed and removed unless released after the rename.
class TmpFile {
 public:
  explicit TmpFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FT_USER_CHECK(fd_ >= 0, "cannot create checkpoint file ", path_, ": ", errno_text());
  }
  ~TmpFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!released_) ::unlink(path_.c_str());
  }
  TmpFile(const TmpFile&) = delete;
  TmpFile& operator=(const TmpFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  // pwrite of all n bytes at `off`, honouring the failure-injection hook.
  void write_at(const void* data, size_t n, uint64_t off) {
    const auto* p = static_cast<const uint8_t*>(data);
    const int64_t limit = testing::fail_checkpoint_write_after_bytes;
    bool inject = false;
    if (limit >= 0 && written_ + n > static_cast<uint64_t>(limit)) {
      n = static_cast<uint64_t>(limit) > written_ ? limit - written_ : 0;
      inject = true;
    }
    while (n > 0) {
      ssize_t r = ::pwrite(fd_, p, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      FT_USER_CHECK(r > 0, "cannot write checkpoint file ", path_, ": ", errno_text());
      p += r;
      n -= static_cast<size_t>(r);
      off += static_cast<uint64_t>(r);
      written_ += static_cast<uint64_t>(r);
    }
    FT_USER_CHECK(!inject, "cannot write checkpoint file ", path_,
                  ": injected failure after ", limit, " bytes (ft::testing hook)");
    // Test hook (FT_TEST_SLOW_CHECKPOINT_MS): every write takes this long, so that a SIGKILL
    // test's random kills land inside checkpoint writes (tests/cli/kill_test.cpp).
    static const int slow_ms = [] {
      const char* e = std::getenv("FT_TEST_SLOW_CHECKPOINT_MS");
      return e ? std::atoi(e) : 0;
    }();
    if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
  }

  void sync_and_close() {
    FT_USER_CHECK(::fsync(fd_) == 0, "cannot fsync checkpoint file ", path_, ": ", errno_text());
    int r = ::close(fd_);
    fd_ = -1;
    FT_USER_CHECK(r == 0, "cannot close checkpoint file ", path_, ": ", errno_text());
  }
  void release() { released_ = true; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool released_ = false;
};

void fsync_dir(const std::string& file_path) {
  std::filesystem::path dir = std::filesystem::path(file_path).parent_path();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  FT_USER_CHECK(fd >= 0, "checkpoint ", file_path, " was written but its directory ",
                dir.string(), " cannot be opened to fsync: ", errno_text());
  int r = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  errno = saved;
  FT_USER_CHECK(r == 0, "checkpoint ", file_path, " was written but fsync of directory ",
                dir.string(), " failed: ", errno_text());
}

// pread of exactly n bytes; a short read means the file shrank under us.
void pread_all(int fd, const std::string& path, void* dst, size_t n, uint64_t off) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    FT_USER_CHECK(r >= 0, "cannot read checkpoint ", path, ": ", errno_text());
    FT_USER_CHECK(r > 0, "checkpoint ", path, " is truncated: unexpected end of file at byte ",
                  off);
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
}

}  // namespace

// ---- writer ----------------------------------------------------------------------------------

void write_checkpoint(const std::string& path, const nlohmann::json& meta,
                      std::span<const CheckpointSection> sections) {
  std::unordered_set<std::string> names;
  for (const auto& s : sections) {
    FT_CHECK(!s.name.empty() && s.name.size() <= kNameBytes &&
                 s.name.find('\0') == std::string::npos,
             "checkpoint section name '", s.name, "' must have 1..64 characters");
    FT_CHECK(s.dtype.size() < kDtypeBytes && s.dtype.find('\0') == std::string::npos,
             "checkpoint section '", s.name, "': dtype tag '", s.dtype, "' is too long");
    FT_CHECK(s.data != nullptr || s.bytes == 0 || s.stream, "checkpoint section '", s.name, "' has no data");
    FT_CHECK(names.insert(s.name).second, "duplicate checkpoint section '", s.name, "'");
  }
  // Serialise first: an unserialisable meta must fail before any file exists.
  const std::string meta_str = meta.dump();

  // Layout is fully known before writing; only the payload CRCs are filled in afterwards.
  const uint64_t table_off = align8(kHeaderBytes + meta_str.size());
  uint64_t off = table_off + sections.size() * kEntryBytes;
  std::vector<uint64_t> offsets(sections.size());
  for (size_t i = 0; i < sections.size(); ++i) {
    off = align8(off);
    offsets[i] = off;
    off += sections[i].bytes;
  }

  uint8_t header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  put<uint32_t>(header + 8, kCheckpointVersion);
  put<uint32_t>(header + 12, static_cast<uint32_t>(sections.size()));
  put<uint64_t>(header + 16, meta_str.size());
  put<uint32_t>(header + 24, crc32c(meta_str.data(), meta_str.size()));
  put<uint32_t>(header + 28, crc32c(header, 28));

  static const uint8_t kZeros[8] = {};
  TmpFile tmp(path + ".tmp");
  tmp.write_at(header, kHeaderBytes, 0);
  tmp.write_at(meta_str.data(), meta_str.size(), kHeaderBytes);
  const uint64_t meta_end = kHeaderBytes + meta_str.size();
  tmp.write_at(kZeros, table_off - meta_end, meta_end);

  // Table entries go in with the payload CRC still zero and are rewritten once known, so the
  // file is written front to back except for this one small region.
  std::vector<uint8_t> table(sections.size() * kEntryBytes, 0);
  auto fill_entry = [&](size_t i, uint32_t crc) {
    uint8_t* e = table.data() + i * kEntryBytes;
    std::memset(e, 0, kEntryBytes);
    std::memcpy(e, sections[i].name.data(), sections[i].name.size());
    std::memcpy(e + kNameBytes, sections[i].dtype.data(), sections[i].dtype.size());
    put<uint64_t>(e + 80, sections[i].bytes);
    put<uint64_t>(e + 88, offsets[i]);
    put<uint32_t>(e + 96, crc);
    put<uint32_t>(e + 100, crc32c(e, 100));
  };
  for (size_t i = 0; i < sections.size(); ++i) fill_entry(i, 0);
  tmp.write_at(table.data(), table.size(), table_off);

  uint64_t pos = table_off + table.size();
  for (size_t i = 0; i < sections.size(); ++i) {
    tmp.write_at(kZeros, offsets[i] - pos, pos);
    pos = offsets[i];
    const CheckpointSection& sec = sections[i];
    const uint64_t start = pos;
    uint32_t crc = 0;
    auto sink = [&](const void* data, size_t bytes) {
      const auto* p = static_cast<const uint8_t*>(data);
      FT_CHECK(pos - start + bytes <= sec.bytes, "checkpoint section '", sec.name, "' streamed more than its ",
               sec.bytes, " bytes");
      for (size_t done = 0; done < bytes;) {
        const size_t n = std::min(kChunk, bytes - done);
        tmp.write_at(p + done, n, pos);
        crc = crc32c(p + done, n, crc);
        done += n;
        pos += n;
      }
    };
    if (sec.stream) sec.stream(sink);
    else sink(sec.data, sec.bytes);
    FT_CHECK(pos - start == sec.bytes, "checkpoint section '", sec.name, "' streamed ", pos - start, " of its ",
             sec.bytes, " bytes");
    fill_entry(i, crc);
  }
  tmp.write_at(table.data(), table.size(), table_off);

  tmp.sync_and_close();
  FT_USER_CHECK(::rename(tmp.path().c_str(), path.c_str()) == 0, "cannot rename ", tmp.path(),
                " to ", path, ": ", errno_text());
  tmp.release();
  fsync_dir(path);
}

// ---- reader ----------------------------------------------------------------------------------

CheckpointReader::~CheckpointReader() { close(); }

CheckpointReader::CheckpointReader(CheckpointReader&& o) noexcept { *this = std::move(o); }

CheckpointReader& CheckpointReader::operator=(CheckpointReader&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    version_ = o.version_;
    meta_ = std::move(o.meta_);
    entries_ = std::move(o.entries_);
  }
  return *this;
}

void CheckpointReader::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void CheckpointReader::open(const std::string& path) {
  close();
  path_ = path;
  meta_ = nlohmann::json();
  entries_.clear();
  version_ = 0;

  // Validate into locals and a local fd; *this only becomes open when everything passed.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FT_USER_CHECK(fd >= 0, "cannot open checkpoint ", path, ": ", errno_text());
  struct FdGuard {
    int fd;
    ~FdGuard() { if (fd >= 0) ::close(fd); }
  } guard{fd};

  struct stat st {};
  FT_USER_CHECK(::fstat(fd, &st) == 0, "cannot stat checkpoint ", path, ": ", errno_text());
  FT_USER_CHECK(S_ISREG(st.st_mode), "checkpoint ", path, " is not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  FT_USER_CHECK(size >= kHeaderBytes, "checkpoint ", path, " is truncated: ", size,
                " bytes, smaller than the ", kHeaderBytes, "-byte header");

  uint8_t h[kHeaderBytes];
  pread_all(fd, path, h, kHeaderBytes, 0);
  FT_USER_CHECK(std::memcmp(h, kMagic, 8) == 0, "file ", path,
                " is not a fittrain checkpoint (bad magic)");
  const uint32_t version = get<uint32_t>(h + 8);
  FT_USER_CHECK(version <= kCheckpointVersion, "checkpoint ", path, " has format version ",
                version, ", newer than this build of fittrain reads (", kCheckpointVersion,
                "); use a newer fittrain");
  FT_USER_CHECK(version >= 1, "checkpoint ", path, " has invalid format version 0");
  const uint32_t header_crc = crc32c(h, 28);
  FT_USER_CHECK(header_crc == get<uint32_t>(h + 28), "checkpoint ", path,
                " has a corrupt header (CRC32C stored ", hex32(get<uint32_t>(h + 28)),
                ", computed ", hex32(header_crc), ")");
  const uint32_t num_sections = get<uint32_t>(h + 12);
  const uint64_t meta_bytes = get<uint64_t>(h + 16);

  // Sizes are checked against the file before anything is allocated from them.
  FT_USER_CHECK(meta_bytes <= size - kHeaderBytes, "checkpoint ", path,
                " is truncated: header says ", meta_bytes, " bytes of metadata but the file has ",
                size, " bytes");
  const uint64_t table_off = align8(kHeaderBytes + meta_bytes);
  const uint64_t table_bytes = uint64_t{num_sections} * kEntryBytes;
  FT_USER_CHECK(table_off <= size && table_bytes <= size - table_off, "checkpoint ", path,
                " is truncated: its section table (", num_sections, " entries) ends past the ",
                size, "-byte file");
  const uint64_t table_end = table_off + table_bytes;

  std::string meta_str(meta_bytes, '\0');
  pread_all(fd, path, meta_str.data(), meta_bytes, kHeaderBytes);
  const uint32_t meta_crc = crc32c(meta_str.data(), meta_str.size());
  FT_USER_CHECK(meta_crc == get<uint32_t>(h + 24), "checkpoint ", path,
                " has corrupt metadata (CRC32C stored ", hex32(get<uint32_t>(h + 24)),
                ", computed ", hex32(meta_crc), ")");
  nlohmann::json meta = nlohmann::json::parse(meta_str, nullptr, /*allow_exceptions=*/false);
  FT_USER_CHECK(!meta.is_discarded(), "checkpoint ", path, " has metadata that is not valid JSON");

  std::vector<uint8_t> table(table_bytes);
  pread_all(fd, path, table.data(), table_bytes, table_off);
  std::vector<Entry> entries(num_sections);
  std::unordered_set<std::string> names;
  for (uint32_t i = 0; i < num_sections; ++i) {
    const uint8_t* e = table.data() + size_t{i} * kEntryBytes;
    const uint32_t ecrc = crc32c(e, 100);
    FT_USER_CHECK(ecrc == get<uint32_t>(e + 100), "checkpoint ", path,
                  " has a corrupt section table (entry ", i, ": CRC32C stored ",
                  hex32(get<uint32_t>(e + 100)), ", computed ", hex32(ecrc), ")");
    Entry& en = entries[i];
    const char* name = reinterpret_cast<const char*>(e);
    en.name.assign(name, strnlen(name, kNameBytes));
    const char* dtype = reinterpret_cast<const char*>(e + kNameBytes);
    const size_t dtype_len = strnlen(dtype, kDtypeBytes);
    FT_USER_CHECK(!en.name.empty() && dtype_len < kDtypeBytes, "checkpoint ", path,
                  ": section table entry ", i, " is malformed");
    en.dtype.assign(dtype, dtype_len);
    en.bytes = get<uint64_t>(e + 80);
    en.offset = get<uint64_t>(e + 88);
    en.crc = get<uint32_t>(e + 96);
    FT_USER_CHECK(names.insert(en.name).second, "checkpoint ", path, " has section '", en.name,
                  "' twice");
    FT_USER_CHECK(en.offset % 8 == 0 && en.offset >= table_end, "checkpoint ", path,
                  ": section '", en.name, "' has an invalid offset ", en.offset);
    FT_USER_CHECK(en.offset <= size && en.bytes <= size - en.offset, "checkpoint ", path,
                  " is truncated: section '", en.name, "' ends at byte ", en.offset + en.bytes,
                  " but the file has ", size, " bytes");
  }
  // Payloads must not overlap, and the file must end where the last one does: trailing bytes
  // mean the file is not what the writer produced.
  std::vector<const Entry*> by_off;
  for (const auto& en : entries) by_off.push_back(&en);
  std::sort(by_off.begin(), by_off.end(),
            [](const Entry* a, const Entry* b) { return a->offset < b->offset; });
  // Alignment padding (after the metadata, between payloads) is not covered by any CRC, so
  // it must be what the writer puts there: fewer than 8 zero bytes. Then every byte of a
  // valid file is checked by something.
  auto check_padding = [&](uint64_t from, uint64_t to, const std::string& where) {
    uint8_t pad[8] = {};
    FT_USER_CHECK(to - from < 8, "checkpoint ", path, " has a gap of ", to - from,
                  " bytes ", where);
    pread_all(fd, path, pad, to - from, from);
    FT_USER_CHECK(std::all_of(pad, pad + (to - from), [](uint8_t b) { return b == 0; }),
                  "checkpoint ", path, " has corrupt padding ", where);
  };
  check_padding(kHeaderBytes + meta_bytes, table_off, "after the metadata");
  uint64_t end = table_end;
  for (const Entry* en : by_off) {
    FT_USER_CHECK(en->offset >= end, "checkpoint ", path, ": section '", en->name,
                  "' overlaps the previous one");
    check_padding(end, en->offset, detail::concat("before section '", en->name, "'"));
    end = en->offset + en->bytes;
  }
  FT_USER_CHECK(size == end, "checkpoint ", path, " has ", size - end,
                " unexpected bytes after the last section");

  fd_ = std::exchange(guard.fd, -1);
  version_ = version;
  meta_ = std::move(meta);
  entries_ = std::move(entries);
}

bool CheckpointReader::has(const std::string& name) const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const Entry& e) { return e.name == name; });
}

const CheckpointReader::Entry& CheckpointReader::entry(const std::string& name) const {
  FT_CHECK(is_open(), "CheckpointReader used before open()");
  for (const auto& e : entries_)
    if (e.name == name) return e;
  throw UserError(detail::concat("checkpoint ", path_, " has no section '", name, "'"));
}

size_t CheckpointReader::section_bytes(const std::string& name) const {
  return static_cast<size_t>(entry(name).bytes);
}

const std::string& CheckpointReader::section_dtype(const std::string& name) const {
  return entry(name).dtype;
}

void CheckpointReader::stream(const std::string& name, size_t bytes, uint8_t* whole, const BlockFn& consume) const {
  const Entry& e = entry(name);
  FT_USER_CHECK(bytes == e.bytes, "checkpoint ", path_, ": section '", name, "' holds ", e.bytes,
                " bytes but ", bytes, " were expected (does the model match the checkpoint?)");
  std::vector<uint8_t> buf(whole ? 0 : std::min(kChunk, bytes));
  uint32_t crc = 0;
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kChunk, bytes - done);
    uint8_t* block = whole ? whole + done : buf.data();
    pread_all(fd_, path_, block, n, e.offset + done);
    crc = crc32c(block, n, crc);
    if (consume) consume(done, block, n);
    done += n;
  }
  FT_USER_CHECK(crc == e.crc, "checkpoint ", path_, ": section '", name,
                "' is corrupt (CRC32C stored ", hex32(e.crc), ", computed ", hex32(crc), ")");
}

void CheckpointReader::read(const std::string& name, void* dst, size_t bytes) const {
  stream(name, bytes, static_cast<uint8_t*>(dst), {});
}

void CheckpointReader::read_blocks(const std::string& name, size_t bytes, const BlockFn& consume) const {
  stream(name, bytes, nullptr, consume);
}

void CheckpointReader::verify_all() const {
  FT_CHECK(is_open(), "CheckpointReader used before open()");
  for (const auto& e : entries_) stream(e.name, e.bytes, nullptr, {});
}

}  // namespace ft
