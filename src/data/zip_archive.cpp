// ZipArchive: the strict zip reader and the STORED writer; see zip_archive.h for what is
// accepted. Record layouts follow PKWARE's APPNOTE.TXT (sections 4.3.7, 4.3.12, 4.3.14-16,
// 4.5.3); all fields little-endian.
#include "data/zip_archive.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "core/error.h"
#include "data/movielens.h"

namespace ft {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr size_t kLocalBytes = 30, kCentralBytes = 46, kEndBytes = 22;
constexpr size_t kZip64EndBytes = 56, kZip64LocatorBytes = 20;
constexpr uint64_t kMaxDeflateRatio = 1032;  // deflate's best: ~1032 output bytes per input byte

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t u32(const uint8_t* p) { return uint32_t{u16(p)} | uint32_t{u16(p + 2)} << 16; }
uint64_t u64(const uint8_t* p) { return uint64_t{u32(p)} | uint64_t{u32(p + 4)} << 32; }

void put16(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v));
  out.push_back(static_cast<uint8_t>(v >> 8));
}
void put32(std::vector<uint8_t>& out, uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

}  // namespace

uint32_t zip_crc32(std::span<const uint8_t> bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const uint8_t* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const auto n = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = ::crc32(crc, p, n);
    p += n;
    left -= n;
  }
  return static_cast<uint32_t>(crc);
}

ZipArchive::ZipArchive(std::span<const uint8_t> bytes, std::string label) : bytes_(bytes), label_(std::move(label)) {
  parse();
}

ZipArchive ZipArchive::open(const std::string& path, const char* what) {
  MappedFile f(path, what);
  const auto bytes = f.bytes();
  ZipArchive z(bytes, path);  // parses; the map's address survives the move below
  z.file_ = std::move(f);
  return z;
}

void ZipArchive::parse() {
  const uint8_t* b = bytes_.data();
  const uint64_t n = bytes_.size();
  auto fail = [&](const std::string& what) {
    throw UserError(label_ + ": not a valid zip archive (npz/pth files are zip archives): " + what);
  };
  if (n < kEndBytes) fail(detail::concat("only ", n, " bytes, too small for a zip archive (truncated?)"));

  // End of central directory: the last signature whose comment length reaches the end exactly.
  uint64_t end = n;  // position of the record, n = not found
  const uint64_t lowest = n - kEndBytes > 0xffff ? n - kEndBytes - 0xffff : 0;
  for (uint64_t pos = n - kEndBytes + 1; pos-- > lowest;) {
    if (u32(b + pos) == kEndSig && pos + kEndBytes + u16(b + pos + 20) == n) {
      end = pos;
      break;
    }
  }
  if (end == n) fail("no end-of-central-directory record (truncated, or not a zip file)");
  const uint8_t* e = b + end;
  if (u16(e + 4) != 0 || u16(e + 6) != 0 || u16(e + 8) != u16(e + 10))
    fail("multi-disk (split) archives are not supported");
  uint64_t entries = u16(e + 10), cd_size = u32(e + 12), cd_offset = u32(e + 16);
  if (entries == 0xffff || cd_size == 0xffffffffu || cd_offset == 0xffffffffu) {
    // zip64: the locator sits right before the end record and points at the zip64 record.
    if (end < kZip64LocatorBytes || u32(b + end - kZip64LocatorBytes) != kZip64LocatorSig)
      fail("saturated end-of-central-directory fields but no zip64 locator");
    const uint8_t* loc = b + end - kZip64LocatorBytes;
    const uint64_t at = u64(loc + 8);
    if (u32(loc + 4) != 0 || u32(loc + 16) > 1) fail("multi-disk (split) zip64 archives are not supported");
    if (at > n || n - at < kZip64EndBytes || u32(b + at) != kZip64EndSig)
      fail(detail::concat("zip64 end-of-central-directory record missing at offset ", at));
    const uint8_t* z = b + at;
    if (u32(z + 16) != 0 || u32(z + 20) != 0 || u64(z + 24) != u64(z + 32))
      fail("multi-disk (split) zip64 archives are not supported");
    entries = u64(z + 32);
    cd_size = u64(z + 40);
    cd_offset = u64(z + 48);
  }
  if (cd_offset > n || cd_size > n - cd_offset)
    fail(detail::concat("central directory at ", cd_offset, " (", cd_size, " bytes) lies outside the ", n,
                        "-byte file (truncated?)"));
  if (entries > cd_size / kCentralBytes)
    fail(detail::concat(entries, " entries cannot fit a central directory of ", cd_size, " bytes"));

  members_.reserve(entries);
  std::unordered_set<std::string_view> names;
  uint64_t pos = cd_offset;
  const uint64_t cd_end = cd_offset + cd_size;
  for (uint64_t i = 0; i < entries; ++i) {
    if (cd_end - pos < kCentralBytes || u32(b + pos) != kCentralSig)
      fail(detail::concat("central directory entry ", i, " at offset ", pos, " is missing or truncated"));
    const uint8_t* c = b + pos;
    const uint16_t flags = u16(c + 8);
    const uint64_t name_len = u16(c + 28), extra_len = u16(c + 30), comment_len = u16(c + 32);
    if (cd_end - pos - kCentralBytes < name_len + extra_len + comment_len)
      fail(detail::concat("central directory entry ", i, " runs past the directory's end"));
    ZipMember m;
    m.name.assign(reinterpret_cast<const char*>(c + kCentralBytes), name_len);
    const std::string who = "member '" + m.name + "': ";
    m.method = u16(c + 10);
    m.crc32 = u32(c + 16);
    m.compressed_size = u32(c + 20);
    m.size = u32(c + 24);
    m.local_header_offset = u32(c + 42);
    const uint16_t disk = u16(c + 34);
    // zip64 extra field: the 8-byte values present are those whose 32-bit field is saturated.
    const uint8_t* x = c + kCentralBytes + name_len;
    for (uint64_t off = 0; off + 4 <= extra_len;) {
      const uint16_t id = u16(x + off), len = u16(x + off + 2);
      if (off + 4 + len > extra_len) fail(who + "extra field runs past its entry");
      if (id == 0x0001) {
        const uint8_t* f = x + off + 4;
        uint64_t left = len;
        auto take = [&](uint64_t& v) {
          if (left < 8) fail(who + "zip64 extra field too short for its saturated sizes");
          v = u64(f);
          f += 8;
          left -= 8;
        };
        if (m.size == 0xffffffffu) take(m.size);
        if (m.compressed_size == 0xffffffffu) take(m.compressed_size);
        if (m.local_header_offset == 0xffffffffu) take(m.local_header_offset);
      }
      off += 4 + len;
    }
    if (flags & 0x41) fail(who + "encrypted members are not supported");
    if (disk != 0 && disk != 0xffff) fail(who + "lies on another disk (split archive)");
    if (m.method != kZipStored && m.method != kZipDeflate)
      fail(detail::concat(who, "compression method ", m.method, " is not supported (only STORED 0 and DEFLATE 8)"));
    if (m.method == kZipStored && m.size != m.compressed_size)
      fail(detail::concat(who, "STORED but its sizes differ (", m.compressed_size, " vs ", m.size, ")"));
    // The local header and the data must lie before the central directory.
    const uint64_t lh = m.local_header_offset;
    if (lh > cd_offset || cd_offset - lh < kLocalBytes || u32(b + lh) != kLocalSig)
      fail(detail::concat(who, "no local header at offset ", lh));
    const uint64_t data_at = lh + kLocalBytes + u16(b + lh + 26) + u16(b + lh + 28);
    if (data_at > cd_offset || m.compressed_size > cd_offset - data_at)
      fail(detail::concat(who, "data at ", data_at, " (", m.compressed_size, " bytes) overlaps the central directory or the end"));
    if (m.method == kZipDeflate && m.size > m.compressed_size * kMaxDeflateRatio + 64)
      fail(detail::concat(who, "claims ", m.size, " bytes from ", m.compressed_size,
                          " compressed (more than deflate can give; corrupt size field)"));
    if (u16(b + lh + 26) != name_len || std::memcmp(b + lh + kLocalBytes, m.name.data(), name_len) != 0)
      fail(who + "local header names a different member");
    pos += kCentralBytes + name_len + extra_len + comment_len;
    members_.push_back(std::move(m));
  }
  for (const ZipMember& m : members_)
    if (!names.insert(m.name).second) fail("member '" + m.name + "' appears twice");
}

const ZipMember* ZipArchive::find(std::string_view name) const {
  for (const ZipMember& m : members_)
    if (m.name == name) return &m;
  return nullptr;
}

const ZipMember* ZipArchive::find_suffix(std::string_view suffix) const {
  for (const ZipMember& m : members_)
    if (m.name.size() >= suffix.size() && m.name.compare(m.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return &m;
  return nullptr;
}

std::span<const uint8_t> ZipArchive::raw_data(const ZipMember& m) const {
  // parse() checked these bounds; `m` must be one of members_.
  const uint8_t* lh = bytes_.data() + m.local_header_offset;
  const uint64_t at = m.local_header_offset + kLocalBytes + u16(lh + 26) + u16(lh + 28);
  return bytes_.subspan(at, m.compressed_size);
}

std::span<const uint8_t> ZipArchive::view(const ZipMember& m, std::vector<uint8_t>& scratch) const {
  FT_CHECK(&m >= members_.data() && &m < members_.data() + members_.size(), "member of another archive");
  const std::string who = label_ + ": member '" + m.name + "': ";
  std::span<const uint8_t> out = raw_data(m);
  if (m.method == kZipDeflate) {
    scratch.resize(m.size);
    z_stream zs{};
    FT_CHECK(inflateInit2(&zs, -MAX_WBITS) == Z_OK, "inflateInit2 failed");
    const uint8_t* in = out.data();
    uint64_t in_left = out.size(), out_done = 0;
    uint8_t empty = 0;
    int rc = Z_OK;
    // zlib counts in 32 bits: feed and drain in pieces of at most 1 GiB.
    while (rc == Z_OK) {
      if (zs.avail_in == 0 && in_left > 0) {
        zs.next_in = const_cast<Bytef*>(in);
        zs.avail_in = static_cast<uInt>(std::min<uint64_t>(in_left, 1u << 30));
        in += zs.avail_in;
        in_left -= zs.avail_in;
      }
      zs.next_out = m.size > 0 ? scratch.data() + out_done : &empty;  // zlib refuses a null next_out
      zs.avail_out = static_cast<uInt>(std::min<uint64_t>(m.size - out_done, 1u << 30));
      const uInt before = zs.avail_out;
      const uInt in_before = zs.avail_in;
      rc = inflate(&zs, Z_NO_FLUSH);
      out_done += before - zs.avail_out;
      if (rc == Z_OK && before == zs.avail_out && in_before == zs.avail_in) rc = Z_BUF_ERROR;  // no progress
    }
    const bool all_in = zs.avail_in == 0 && in_left == 0;
    inflateEnd(&zs);
    FT_USER_CHECK(rc == Z_STREAM_END, who, "corrupt DEFLATE data",
                  rc == Z_BUF_ERROR ? " (ends early, or inflates past its stated size)" : "");
    FT_USER_CHECK(out_done == m.size && all_in, who, "DEFLATE data inflates to ", out_done, " bytes, the directory says ",
                  m.size, all_in ? "" : " (or has trailing bytes)");
    out = scratch;
  }
  FT_USER_CHECK(zip_crc32(out) == m.crc32, who, "CRC-32 mismatch (corrupted data)");
  return out;
}

std::vector<uint8_t> ZipArchive::read(const ZipMember& m) const {
  std::vector<uint8_t> scratch;
  const std::span<const uint8_t> v = view(m, scratch);
  if (m.method == kZipDeflate) return scratch;
  return {v.begin(), v.end()};
}

std::vector<uint8_t> zip_bytes(std::span<const ZipEntry> entries, const std::string& label) {
  std::vector<uint8_t> out, cd;
  constexpr uint64_t kMax = 0xfffffffeu;
  FT_USER_CHECK(entries.size() < 0xffff, label, ": ", entries.size(), " members need zip64, which the writer lacks");
  for (const ZipEntry& e : entries) {
    FT_USER_CHECK(!e.name.empty() && e.name.size() <= 0xffff, label, ": member name '", e.name,
                  "' must have 1 to 65535 bytes");
    FT_USER_CHECK(e.data.size() <= kMax && out.size() <= kMax - e.data.size(), label, ": member '", e.name,
                  "' would take the archive past 4 GiB (the writer has no zip64)");
    const uint32_t crc = zip_crc32(e.data), offset = static_cast<uint32_t>(out.size());
    const auto size = static_cast<uint32_t>(e.data.size());
    // version 20, no flags, STORED, time/date 1980-01-01 00:00 (reproducible archives)
    auto common = [&](std::vector<uint8_t>& v) {
      put16(v, 20);
      put16(v, 0);
      put16(v, kZipStored);
      put16(v, 0);
      put16(v, 0x21);
      put32(v, crc);
      put32(v, size);
      put32(v, size);
      put16(v, static_cast<uint32_t>(e.name.size()));
      put16(v, 0);  // extra
    };
    put32(out, kLocalSig);
    common(out);
    out.insert(out.end(), e.name.begin(), e.name.end());
    out.insert(out.end(), e.data.begin(), e.data.end());
    put32(cd, kCentralSig);
    put16(cd, 20);  // made by
    common(cd);
    put16(cd, 0);   // comment
    put16(cd, 0);   // disk
    put16(cd, 0);   // internal attributes
    put32(cd, 0);   // external attributes
    put32(cd, offset);
    cd.insert(cd.end(), e.name.begin(), e.name.end());
  }
  FT_USER_CHECK(out.size() + cd.size() <= kMax, label, ": archive would reach 4 GiB (the writer has no zip64)");
  const auto cd_offset = static_cast<uint32_t>(out.size());
  out.insert(out.end(), cd.begin(), cd.end());
  put32(out, kEndSig);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<uint32_t>(entries.size()));
  put16(out, static_cast<uint32_t>(entries.size()));
  put32(out, static_cast<uint32_t>(cd.size()));
  put32(out, cd_offset);
  put16(out, 0);
  return out;
}

void write_zip(const std::string& path, std::span<const ZipEntry> entries) {
  const std::vector<uint8_t> bytes = zip_bytes(entries, path);
  const ByteRange piece{bytes.data(), bytes.size()};
  write_file_atomic(path, {&piece, 1});
}

}  // namespace ft
