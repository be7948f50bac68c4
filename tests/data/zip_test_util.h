// Helpers for the zip/npy/EIT tests: zip archives and .npy files built byte by byte, so the
// readers are checked against what numpy and zlib produce rather than against fittrain's own
// writers (DEFLATE members as np.savez_compressed writes them, zip64 size fields, headers in
// any dtype and order).
#pragma once
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace ft::test {

template <class T>
std::span<const uint8_t> byte_span(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

// Raw DEFLATE (no zlib header), as zip members hold it.
inline std::vector<uint8_t> raw_deflate(std::span<const uint8_t> data) {
  z_stream zs{};
  deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::vector<uint8_t> out(deflateBound(&zs, data.size()));
  zs.next_in = const_cast<Bytef*>(data.data());
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

struct RawMember {
  std::string name;
  std::vector<uint8_t> data;  // uncompressed
  bool deflate = false;
  bool zip64 = false;  // sizes saturated in the 32-bit fields, given in a zip64 extra field
};

inline void put_le(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// With `zip64_end` the end record's fields are saturated and the real ones are in a zip64
// end-of-central-directory record and its locator, as zip64 writers emit them.
inline std::vector<uint8_t> make_zip(const std::vector<RawMember>& members, const std::string& comment = "",
                                     bool zip64_end = false) {
  std::vector<uint8_t> out, cd;
  for (const RawMember& m : members) {
    const std::vector<uint8_t> payload = m.deflate ? raw_deflate(m.data) : m.data;
    const uint32_t crc = static_cast<uint32_t>(crc32(0, m.data.data(), static_cast<uInt>(m.data.size())));
    std::vector<uint8_t> extra;
    if (m.zip64) {
      put_le(extra, 0x0001, 2);
      put_le(extra, 16, 2);
      put_le(extra, m.data.size(), 8);
      put_le(extra, payload.size(), 8);
    }
    const uint64_t csize = m.zip64 ? 0xffffffffu : payload.size(), usize = m.zip64 ? 0xffffffffu : m.data.size();
    auto common = [&](std::vector<uint8_t>& v) {
      put_le(v, m.zip64 ? 45 : 20, 2);
      put_le(v, 0, 2);
      put_le(v, m.deflate ? 8 : 0, 2);
      put_le(v, 0, 2);
      put_le(v, 0x21, 2);
      put_le(v, crc, 4);
      put_le(v, csize, 4);
      put_le(v, usize, 4);
      put_le(v, m.name.size(), 2);
      put_le(v, extra.size(), 2);
    };
    const uint64_t offset = out.size();
    put_le(out, 0x04034b50, 4);
    common(out);
    out.insert(out.end(), m.name.begin(), m.name.end());
    out.insert(out.end(), extra.begin(), extra.end());
    out.insert(out.end(), payload.begin(), payload.end());
    put_le(cd, 0x02014b50, 4);
    put_le(cd, 45, 2);
    common(cd);
    put_le(cd, 0, 2);
    put_le(cd, 0, 2);
    put_le(cd, 0, 2);
    put_le(cd, 0, 4);
    put_le(cd, offset, 4);
    cd.insert(cd.end(), m.name.begin(), m.name.end());
    cd.insert(cd.end(), extra.begin(), extra.end());
  }
  const uint64_t cd_offset = out.size();
  out.insert(out.end(), cd.begin(), cd.end());
  if (zip64_end) {
    const uint64_t at = out.size();
    put_le(out, 0x06064b50, 4);
    put_le(out, 44, 8);  // bytes after this field
    put_le(out, 45, 2);
    put_le(out, 45, 2);
    put_le(out, 0, 8);   // disks
    put_le(out, members.size(), 8);
    put_le(out, members.size(), 8);
    put_le(out, cd.size(), 8);
    put_le(out, cd_offset, 8);
    put_le(out, 0x07064b50, 4);
    put_le(out, 0, 4);
    put_le(out, at, 8);
    put_le(out, 1, 4);
  }
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 4);
  put_le(out, zip64_end ? 0xffff : members.size(), 2);
  put_le(out, zip64_end ? 0xffff : members.size(), 2);
  put_le(out, zip64_end ? 0xffffffffu : cd.size(), 4);
  put_le(out, zip64_end ? 0xffffffffu : cd_offset, 4);
  put_le(out, comment.size(), 2);
  out.insert(out.end(), comment.begin(), comment.end());
  return out;
}

// An .npy file with header dict `dict` (padded as numpy pads it) and raw `data`.
inline std::vector<uint8_t> npy_raw(std::string dict, std::span<const uint8_t> data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  put_le(out, dict.size(), major == 1 ? 2 : 4);
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline void write_vec(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

}  // namespace ft::test
