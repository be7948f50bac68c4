// Safetensors reader and writer; the format is described in safetensors.h.
#include "train/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"

namespace ft {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian");

namespace {

// The reference implementation refuses larger headers (a corrupt length must not make us
// allocate gigabytes before the JSON is even looked at).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::string errno_text() { return std::strerror(errno); }

void pread_all(int fd, const std::string& path, void* dst, size_t n, uint64_t off) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    FT_USER_CHECK(r >= 0, "cannot read ", path, ": ", errno_text());
    FT_USER_CHECK(r > 0, path, " is truncated: unexpected end of file at byte ", off);
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// The tmp file of an atomic write: removed unless committed.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FT_USER_CHECK(fd_ >= 0, "cannot create ", tmp_, ": ", errno_text());
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t r = ::write(fd_, p, n);
      if (r < 0 && errno == EINTR) continue;
      FT_USER_CHECK(r > 0, "cannot write ", tmp_, ": ", errno_text());
      p += r;
      n -= static_cast<size_t>(r);
    }
  }
  void commit() {
    FT_USER_CHECK(::fsync(fd_) == 0, "cannot fsync ", tmp_, ": ", errno_text());
    const int r = ::close(fd_);
    fd_ = -1;
    FT_USER_CHECK(r == 0, "cannot close ", tmp_, ": ", errno_text());
    FT_USER_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, "cannot rename ", tmp_, " to ", path_, ": ",
                  errno_text());
    committed_ = true;
    std::filesystem::path dir = std::filesystem::path(path_).parent_path();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    FT_USER_CHECK(dfd >= 0, path_, " was written but its folder cannot be opened to fsync: ", errno_text());
    const int s = ::fsync(dfd);
    ::close(dfd);
    FT_USER_CHECK(s == 0, path_, " was written but fsync of its folder failed");
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

size_t safetensors_dtype_size(const std::string& d) {
  if (d == "BOOL" || d == "U8" || d == "I8" || d == "F8_E5M2" || d == "F8_E4M3" || d == "F8_E8M0") return 1;
  if (d == "U16" || d == "I16" || d == "F16" || d == "BF16") return 2;
  if (d == "U32" || d == "I32" || d == "F32") return 4;
  if (d == "U64" || d == "I64" || d == "F64" || d == "C64") return 8;
  return 0;
}

int64_t SafetensorsInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- reader ------------------------------------------------------------------------------------

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FT_USER_CHECK(fd_ >= 0, "cannot open ", path, ": ", errno_text());
  try {
    struct stat st {};
    FT_USER_CHECK(::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode), path, " is not a regular file");
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    FT_USER_CHECK(size >= 8, path, " is truncated: ", size, " bytes, fewer than the 8-byte header length");
    uint64_t n = 0;
    pread_all(fd_, path, &n, 8, 0);
    FT_USER_CHECK(n <= size - 8, path, ": header length ", n, " runs past the end of the file (", size,
                  " bytes): truncated or not a safetensors file");
    FT_USER_CHECK(n <= kMaxHeaderBytes, path, ": header length ", n, " exceeds the format's limit of ",
                  kMaxHeaderBytes, " bytes");
    std::string text(n, '\0');
    pread_all(fd_, path, text.data(), n, 8);
    const nlohmann::json h = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    FT_USER_CHECK(!h.is_discarded(), path, ": the header is not valid JSON");
    FT_USER_CHECK(h.is_object(), path, ": the header is not a JSON object");
    data_start_ = 8 + n;
    const uint64_t buffer = size - data_start_;
    for (auto it = h.begin(); it != h.end(); ++it) {
      const std::string& name = it.key();
      const nlohmann::json& v = it.value();
      if (name == "__metadata__") {
        FT_USER_CHECK(v.is_object(), path, ": __metadata__ is not a JSON object");
        for (auto m = v.begin(); m != v.end(); ++m) {
          FT_USER_CHECK(m.value().is_string(), path, ": __metadata__ '", m.key(), "' is not a string");
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      FT_USER_CHECK(v.is_object(), path, ": tensor '", name, "' is not a JSON object");
      SafetensorsInfo t;
      t.name = name;
      FT_USER_CHECK(v.contains("dtype") && v["dtype"].is_string(), path, ": tensor '", name, "' has no dtype");
      t.dtype = v["dtype"].get<std::string>();
      const size_t esize = safetensors_dtype_size(t.dtype);
      FT_USER_CHECK(esize > 0, path, ": tensor '", name, "' has unknown dtype '", t.dtype, "'");
      FT_USER_CHECK(v.contains("shape") && v["shape"].is_array(), path, ": tensor '", name, "' has no shape");
      uint64_t numel = 1;
      for (const auto& d : v["shape"]) {
        FT_USER_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), path,
                      ": tensor '", name, "' has a bad dimension ", d.dump(), " in its shape");
        const uint64_t dim = d.get<uint64_t>();
        FT_USER_CHECK(dim <= uint64_t{INT64_MAX} && !__builtin_mul_overflow(numel, dim, &numel), path, ": tensor '",
                      name, "' has a shape too large to address");
        t.shape.push_back(static_cast<int64_t>(dim));
      }
      const auto& off = v.contains("data_offsets") ? v["data_offsets"] : nlohmann::json();
      FT_USER_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                    path, ": tensor '", name, "' has no valid data_offsets [begin, end]");
      t.begin = off[0].get<uint64_t>();
      t.end = off[1].get<uint64_t>();
      FT_USER_CHECK(t.begin <= t.end, path, ": tensor '", name, "' has data_offsets [", t.begin, ", ", t.end,
                    "] that end before they begin");
      uint64_t want = 0;
      FT_USER_CHECK(!__builtin_mul_overflow(numel, uint64_t{esize}, &want) && want == t.end - t.begin, path,
                    ": tensor '", name, "' of shape ", shape_text(t.shape), " and dtype ", t.dtype, " needs ",
                    numel * esize, " bytes but its data_offsets [", t.begin, ", ", t.end, "] hold ",
                    t.end - t.begin);
      FT_USER_CHECK(t.end <= buffer, path, ": tensor '", name, "' ends at byte ", t.end, " of the data, past its ",
                    buffer, " bytes (truncated file?)");
      tensors_.push_back(std::move(t));
    }
    // The buffer must be covered exactly: no byte is read by two tensors, none by no tensor.
    std::vector<const SafetensorsInfo*> by_off;
    for (const auto& t : tensors_) by_off.push_back(&t);
    std::sort(by_off.begin(), by_off.end(), [](const SafetensorsInfo* a, const SafetensorsInfo* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t cursor = 0;
    const SafetensorsInfo* prev = nullptr;
    for (const SafetensorsInfo* t : by_off) {
      FT_USER_CHECK(t->begin >= cursor, path, ": tensor '", t->name, "' (bytes ", t->begin, "..", t->end,
                    ") overlaps tensor '", prev ? prev->name : "", "' (bytes ", prev ? prev->begin : 0, "..", cursor,
                    ")");
      FT_USER_CHECK(t->begin == cursor, path, ": a gap of ", t->begin - cursor, " bytes before tensor '", t->name,
                    "' (the format requires the tensors to cover the data contiguously)");
      cursor = t->end;
      prev = t;
    }
    FT_USER_CHECK(cursor == buffer, path, ": ", buffer - cursor, " bytes after the last tensor",
                  prev ? " '" + prev->name + "'" : std::string(), " belong to no tensor");
    std::sort(tensors_.begin(), tensors_.end(),
              [](const SafetensorsInfo& a, const SafetensorsInfo& b) { return a.name < b.name; });
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsInfo* SafetensorsReader::find(const std::string& name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const SafetensorsInfo& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

std::vector<char> SafetensorsReader::read_bytes(const std::string& name) const {
  const SafetensorsInfo* t = find(name);
  FT_USER_CHECK(t, path_, " has no tensor '", name, "'");
  std::vector<char> out(t->end - t->begin);
  pread_all(fd_, path_, out.data(), out.size(), data_start_ + t->begin);
  return out;
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name) const {
  const SafetensorsInfo* t = find(name);
  FT_USER_CHECK(t, path_, " has no tensor '", name, "'");
  FT_USER_CHECK(t->dtype == "F32" || t->dtype == "F16" || t->dtype == "BF16" || t->dtype == "F64", path_,
                ": tensor '", name, "' has dtype ", t->dtype, "; weights must be F32, F16, BF16 or F64");
  const size_t n = static_cast<size_t>(t->numel());
  std::vector<float> out(n);
  if (t->dtype == "F32") {  // straight into the result: a tensor is never held twice
    pread_all(fd_, path_, out.data(), n * 4, data_start_ + t->begin);
    return out;
  }
  const size_t esize = t->dtype == "F64" ? 8 : 2;
  constexpr size_t kBlock = size_t{1} << 20;  // elements converted at a time
  std::vector<char> raw(std::min(n, kBlock) * esize);
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t k = std::min(kBlock, n - b);
    pread_all(fd_, path_, raw.data(), k * esize, data_start_ + t->begin + b * esize);
    if (esize == 8) {
      for (size_t i = 0; i < k; ++i) {
        double d;
        std::memcpy(&d, raw.data() + 8 * i, 8);
        out[b + i] = static_cast<float>(d);
      }
    } else {
      const DType dt = t->dtype == "F16" ? DType::f16 : DType::bf16;
      for (size_t i = 0; i < k; ++i) {
        uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        out[b + i] = half_bits_to_float(dt, h);
      }
    }
  }
  return out;
}

bool SafetensorsReader::same_tensor(const std::string& a, const std::string& b) const {
  const SafetensorsInfo *x = find(a), *y = find(b);
  FT_USER_CHECK(x && y, path_, " has no tensor '", x ? b : a, "'");
  if (x->dtype != y->dtype || x->shape != y->shape) return false;
  const uint64_t bytes = x->end - x->begin;
  constexpr uint64_t kBlock = uint64_t{4} << 20;
  std::vector<char> p(std::min(bytes, kBlock)), q(p.size());
  for (uint64_t off = 0; off < bytes; off += kBlock) {
    const size_t k = static_cast<size_t>(std::min(kBlock, bytes - off));
    pread_all(fd_, path_, p.data(), k, data_start_ + x->begin + off);
    pread_all(fd_, path_, q.data(), k, data_start_ + y->begin + off);
    if (std::memcmp(p.data(), q.data(), k) != 0) return false;
  }
  return true;
}

// ---- writer ------------------------------------------------------------------------------------

void write_safetensors(const std::string& path, std::span<const SafetensorsOut> tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsOut*> order;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    FT_CHECK(!t.name.empty() && t.name != "__metadata__" && names.insert(t.name).second, "safetensors tensor name '",
             t.name, "' is empty, reserved or repeated");
    FT_CHECK(safetensors_dtype_size(t.dtype) > 0, "tensor '", t.name, "': unknown safetensors dtype ", t.dtype);
    FT_CHECK(t.fill, "tensor '", t.name, "' has nothing to fill it");
    order.push_back(&t);
  }
  auto bytes_of = [](const SafetensorsOut& t) {
    size_t n = safetensors_dtype_size(t.dtype);
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    return n;
  };
  std::stable_sort(order.begin(), order.end(), [](const SafetensorsOut* a, const SafetensorsOut* b) {
    const size_t sa = safetensors_dtype_size(a->dtype), sb = safetensors_dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  size_t largest = 0;
  for (const SafetensorsOut* t : order) {
    const size_t n = bytes_of(*t);
    h[t->name] = {{"dtype", t->dtype}, {"shape", t->shape}, {"data_offsets", {off, off + n}}};
    off += n;
    largest = std::max(largest, n);
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t n = header.size();
  AtomicFile f(path);
  f.write(&n, 8);
  f.write(header.data(), header.size());
  std::vector<char> staging(largest);
  for (const SafetensorsOut* t : order) {
    const size_t bytes = bytes_of(*t);
    t->fill(staging.data());
    f.write(staging.data(), bytes);
  }
  f.commit();
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

}  // namespace ft
