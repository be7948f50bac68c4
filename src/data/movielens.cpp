// MovieLens parsing (streaming) and the synthetic generator; see movielens.h.
#include "data/movielens.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string_view>

#include "core/error.h"
#include "core/rng.h"

namespace ft {
namespace fs = std::filesystem;

RatingsFormat parse_ratings_format(const std::string& s) {
  if (s == "auto") return RatingsFormat::kAuto;
  if (s == "dat") return RatingsFormat::kDat;
  if (s == "csv") return RatingsFormat::kCsv;
  throw UserError("unknown ratings format '" + s + "' (expected auto, dat or csv)");
}

RatingsFormat resolve_ratings_format(const std::string& path, RatingsFormat f) {
  if (f != RatingsFormat::kAuto) return f;
  std::string ext = fs::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".dat") return RatingsFormat::kDat;
  if (ext == ".csv") return RatingsFormat::kCsv;
  throw UserError(path + ": cannot tell the ratings format from the extension '" + ext +
                  "' (expected .dat for UserID::MovieID::Rating::Timestamp or .csv for "
                  "userId,movieId,rating,timestamp), or pass --ratings-format dat|csv");
}

namespace {

// The line's text for an error message, cut so that a binary file does not flood the terminal.
std::string shown(std::string_view s) {
  std::string o(s.substr(0, 60));
  if (s.size() > 60) o += "...";
  return o;
}

struct LineParser {
  const std::string& path;
  RatingsFormat format;
  uint64_t line = 0;
  // CSV: column of each field, and the header's field count.
  int col_user = -1, col_item = -1, col_rating = -1, col_time = -1;
  size_t csv_fields = 0;
  bool header_seen = false;
  std::vector<std::string_view> fields;

  [[noreturn]] void fail(const std::string& what) const {
    throw UserError(detail::concat(path, ":", line, ": ", what));
  }

  void split(std::string_view s) {
    fields.clear();
    const std::string_view sep = format == RatingsFormat::kDat ? "::" : ",";
    size_t start = 0;
    for (;;) {
      const size_t p = s.find(sep, start);
      if (p == std::string_view::npos) {
        fields.push_back(s.substr(start));
        return;
      }
      fields.push_back(s.substr(start, p - start));
      start = p + sep.size();
    }
  }

  uint32_t id(std::string_view f, const char* name) const {
    if (!f.empty() && f[0] == '-') fail(detail::concat("negative ", name, " '", shown(f), "'"));
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
    if (f.empty() || ec != std::errc() || p != f.data() + f.size())
      fail(detail::concat(name, " '", shown(f), "' is not a non-negative integer"));
    if (v > 0xFFFFFFFFull) fail(detail::concat(name, " ", v, " does not fit 32 bits"));
    return static_cast<uint32_t>(v);
  }

  int64_t timestamp(std::string_view f) const {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
    if (f.empty() || ec != std::errc() || p != f.data() + f.size())
      fail(detail::concat("bad timestamp '", shown(f), "' (expected integer seconds)"));
    return v;
  }

  void rating(std::string_view f) const {
    double v = 0;
    auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
    if (f.empty() || ec != std::errc() || p != f.data() + f.size() || !std::isfinite(v))
      fail(detail::concat("bad rating '", shown(f), "' (expected a number)"));
  }

  void header(std::string_view s) {
    split(s);
    csv_fields = fields.size();
    for (size_t i = 0; i < fields.size(); ++i) {
      const std::string_view f = fields[i];
      if (f == "userId") col_user = static_cast<int>(i);
      else if (f == "movieId" || f == "itemId") col_item = static_cast<int>(i);
      else if (f == "rating") col_rating = static_cast<int>(i);
      else if (f == "timestamp") col_time = static_cast<int>(i);
    }
    if (col_user < 0 || col_item < 0 || col_time < 0)
      fail("the CSV header '" + shown(s) + "' must name userId, movieId and timestamp columns " +
           "(as in ml-latest-small and ml-25m's ratings.csv)");
    header_seen = true;
  }

  // One line without its end; false for a line that holds no rating (blank, header).
  bool parse(std::string_view s, RawInteraction& r) {
    ++line;
    if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
    if (s.empty()) return false;
    if (format == RatingsFormat::kCsv) {
      if (!header_seen) {
        header(s);
        return false;
      }
      split(s);
      if (fields.size() != csv_fields)
        fail(detail::concat("expected ", csv_fields, " comma-separated fields as in the header, got ",
                            fields.size(), " in '", shown(s), "'"));
      r.user = id(fields[col_user], "user id");
      r.item = id(fields[col_item], "movie id");
      if (col_rating >= 0) rating(fields[col_rating]);
      r.time = timestamp(fields[col_time]);
      return true;
    }
    split(s);
    if (fields.size() != 4)
      fail(detail::concat("expected 4 fields UserID::MovieID::Rating::Timestamp, got ", fields.size(),
                          " in '", shown(s), "'"));
    r.user = id(fields[0], "user id");
    r.item = id(fields[1], "movie id");
    rating(fields[2]);
    r.time = timestamp(fields[3]);
    return true;
  }
};

struct File {
  std::FILE* f = nullptr;
  ~File() {
    if (f) std::fclose(f);
  }
};

}  // namespace

uint64_t for_each_rating(const std::string& path, RatingsFormat format,
                         const std::function<void(const RawInteraction&)>& fn) {
  format = resolve_ratings_format(path, format);
  FT_USER_CHECK(!fs::is_directory(path), path, ": is a folder, not a ratings file");
  File file;
  file.f = std::fopen(path.c_str(), "rb");
  FT_USER_CHECK(file.f, path, ": cannot open ratings file: ", std::strerror(errno));
  LineParser lp{path, format, 0, -1, -1, -1, -1, 0, false, {}};
  // One buffer; a line that straddles two reads is moved to the front before the next read.
  constexpr size_t kBuf = 1 << 20;
  std::unique_ptr<char[]> buf(new char[kBuf]);
  size_t have = 0;
  RawInteraction r;
  for (;;) {
    const size_t got = std::fread(buf.get() + have, 1, kBuf - have, file.f);
    FT_USER_CHECK(!std::ferror(file.f), path, ": read error: ", std::strerror(errno));
    const bool eof = got == 0;
    have += got;
    size_t start = 0;
    for (;;) {
      const void* nl = std::memchr(buf.get() + start, '\n', have - start);
      if (!nl) break;
      const size_t end = static_cast<size_t>(static_cast<const char*>(nl) - buf.get());
      if (lp.parse(std::string_view(buf.get() + start, end - start), r)) fn(r);
      start = end + 1;
    }
    if (eof) {
      // The last line may lack its newline.
      if (start < have && lp.parse(std::string_view(buf.get() + start, have - start), r)) fn(r);
      break;
    }
    if (start == 0 && have == kBuf) {
      ++lp.line;
      lp.fail("line longer than 1 MiB (not a ratings file?)");
    }
    std::memmove(buf.get(), buf.get() + start, have - start);
    have -= start;
  }
  FT_USER_CHECK(format != RatingsFormat::kCsv || lp.header_seen, path, ": empty CSV file (no header line)");
  return lp.line;
}

uint64_t read_ratings(const std::string& path, RatingsFormat format, std::vector<RawInteraction>& out) {
  // Count the lines first (one cheap pass, the file then sits in the page cache) and reserve
  // exactly: growing by doubling would hold up to 3x the ratings while it reallocates.
  {
    File file;
    file.f = std::fopen(path.c_str(), "rb");
    if (file.f && !fs::is_directory(path)) {
      constexpr size_t kBuf = 1 << 20;
      std::unique_ptr<char[]> buf(new char[kBuf]);
      uint64_t lines = 1;
      size_t got;
      while ((got = std::fread(buf.get(), 1, kBuf, file.f)) > 0)
        lines += static_cast<uint64_t>(std::count(buf.get(), buf.get() + got, '\n'));
      out.reserve(out.size() + lines);
    }
  }
  return for_each_rating(path, format, [&](const RawInteraction& r) { out.push_back(r); });
}

void write_file_atomic(const std::string& path, std::span<const ByteRange> pieces) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FT_USER_CHECK(fd >= 0, tmp, ": cannot create: ", std::strerror(errno));
  for (const ByteRange& piece : pieces) {
  const auto* p = static_cast<const unsigned char*>(piece.data);
  size_t left = piece.bytes;
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw UserError(tmp + ": cannot write: " + std::strerror(e));
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw UserError(tmp + ": fsync failed: " + std::strerror(e));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw UserError(path + ": cannot rename " + tmp + " into place: " + std::strerror(e));
  }
  // fsync the folder so the rename itself survives a crash.
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

}  // namespace ft
