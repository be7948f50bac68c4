// A minimal Parquet WRITER, for the reader's tests and fuzz seeds only: flat string columns in
// each page layout, encoding and codec the reader supports, written from the format's
// specification (Thrift compact protocol for the footer and page headers). It also carries
// hooks that corrupt single pages, so the tests can aim at one check of the reader.
// scripts/make_parquet_fixtures.py covers the other side: files written by pyarrow.
#pragma once
#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ft::test::pq {

enum class Values { kPlain, kDictionary, kDictionaryThenPlain, kDeltaLength };

// A page before compression, as the hook sees it (see WriteOptions::edit_page).
struct Page {
  int type = 0;  // 0 DATA_PAGE, 2 DICTIONARY_PAGE, 3 DATA_PAGE_V2
  std::string levels;  // RLE/bit-packed definition levels, without v1's length prefix
  std::string values;
  int32_t num_values = 0, num_nulls = 0;
  int32_t encoding = 0;
  int32_t uncompressed_size_delta = 0;  // added to the header's uncompressed size
};

struct WriteOptions {
  int codec = 0;  // 0 UNCOMPRESSED, 1 SNAPPY, 2 GZIP, 6 ZSTD; others are stored raw, labelled so
  Values values = Values::kPlain;
  bool v2 = false;
  bool optional = false;
  size_t rows_per_page = 1000;
  size_t rows_per_group = SIZE_MAX;
  size_t dictionary_data_pages = 1;  // kDictionaryThenPlain: pages using the dictionary
  bool plain_dictionary = false;     // label indices PLAIN_DICTIONARY (v1 style), not RLE_DICTIONARY
  bool crc = false;
  int32_t physical_type = 6;  // BYTE_ARRAY; another number only labels the column so
  bool nested_extra = false;  // adds a group column "meta" { x } after the flat ones
  std::function<void(Page&, int page_index)> edit_page;  // pages numbered per column chunk
};

struct TestColumn {
  std::string name;
  std::vector<std::optional<std::string>> values;
};

namespace detail {

class Thrift {
 public:
  std::string out;
  void field(int16_t id, int type) {
    const int d = id - last_.back();
    if (d > 0 && d <= 15) {
      out += static_cast<char>(d << 4 | type);
    } else {
      out += static_cast<char>(type);
      zigzag(id);
    }
    last_.back() = id;
  }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out += static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    out += static_cast<char>(v);
  }
  void zigzag(int64_t v) { varint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void i32(int16_t id, int32_t v) { field(id, 5); zigzag(v); }
  void i64(int16_t id, int64_t v) { field(id, 6); zigzag(v); }
  void str(int16_t id, const std::string& s) { field(id, 8); varint(s.size()); out += s; }
  void boolean(int16_t id, bool b) { field(id, b ? 1 : 2); }
  void begin(int16_t id) { field(id, 12); last_.push_back(0); }
  void begin_element() { last_.push_back(0); }  // a struct inside a list
  void end() { out += '\0'; last_.pop_back(); }
  void list(int16_t id, int elem, size_t n) {
    field(id, 9);
    if (n < 15) {
      out += static_cast<char>(n << 4 | elem);
    } else {
      out += static_cast<char>(0xf0 | elem);
      varint(n);
    }
  }
  void stop() { out += '\0'; }

 private:
  std::vector<int16_t> last_{0};
};

inline void le32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>(v >> (8 * i));
}

inline void bitpack(std::string& out, const std::vector<uint32_t>& v, int width) {
  uint64_t acc = 0;
  int bits = 0;
  for (uint32_t x : v) {
    acc |= static_cast<uint64_t>(x) << bits;
    bits += width;
    while (bits >= 8) {
      out += static_cast<char>(acc & 0xff);
      acc >>= 8;
      bits -= 8;
    }
  }
  if (bits > 0) out += static_cast<char>(acc & 0xff);
}

inline void uvarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

// RLE/bit-packed hybrid: runs of 8 or more equal values as RLE runs, the rest bit-packed.
inline std::string rle_hybrid(const std::vector<uint32_t>& v, int width) {
  std::string out;
  auto run_at = [&](size_t i) {
    size_t j = i;
    while (j < v.size() && v[j] == v[i]) ++j;
    return j - i;
  };
  size_t i = 0;
  while (i < v.size()) {
    const size_t r = run_at(i);
    if (r >= 8) {
      uvarint(out, static_cast<uint64_t>(r) << 1);
      for (int b = 0; b < (width + 7) / 8; ++b) out += static_cast<char>(v[i] >> (8 * b));
      i += r;
      continue;
    }
    size_t m = i;
    while (m < v.size() && run_at(m) < 8) ++m;
    const size_t groups = (m - i + 7) / 8;
    std::vector<uint32_t> chunk(groups * 8, 0);
    for (size_t k = 0; k < groups * 8 && i + k < v.size(); ++k) chunk[k] = v[i + k];
    uvarint(out, static_cast<uint64_t>(groups) << 1 | 1);
    bitpack(out, chunk, width);
    i += groups * 8;
  }
  return out;
}

inline int bit_width(uint64_t max) {
  int w = 0;
  while (max >> w) ++w;
  return w;
}

// DELTA_BINARY_PACKED: blocks of 128 values in 4 miniblocks of 32.
inline std::string delta_binary_packed(const std::vector<int64_t>& v) {
  std::string out;
  uvarint(out, 128);
  uvarint(out, 4);
  uvarint(out, v.size());
  auto zz = [](int64_t x) { return (static_cast<uint64_t>(x) << 1) ^ static_cast<uint64_t>(x >> 63); };
  uvarint(out, zz(v.empty() ? 0 : v[0]));
  for (size_t b = 1; b < v.size(); b += 128) {
    const size_t n = std::min<size_t>(128, v.size() - b);
    std::vector<int64_t> d(n);
    for (size_t k = 0; k < n; ++k) d[k] = v[b + k] - v[b + k - 1];
    const int64_t mn = *std::min_element(d.begin(), d.end());
    uvarint(out, zz(mn));
    std::vector<int> widths(4, 0);
    for (size_t mb = 0; mb < 4; ++mb)
      for (size_t k = mb * 32; k < std::min(n, mb * 32 + 32); ++k)
        widths[mb] = std::max(widths[mb], bit_width(static_cast<uint64_t>(d[k] - mn)));
    for (int w : widths) out += static_cast<char>(w);
    for (size_t mb = 0; mb * 32 < n; ++mb) {
      std::vector<uint32_t> vals(32, 0);
      for (size_t k = 0; k < 32 && mb * 32 + k < n; ++k) vals[k] = static_cast<uint32_t>(d[mb * 32 + k] - mn);
      bitpack(out, vals, widths[mb]);
    }
  }
  return out;
}

inline std::string compress(int codec, const std::string& s) {
  std::string out;
  if (codec == 1) {
    size_t n = snappy_max_compressed_length(s.size());
    out.resize(n);
    if (snappy_compress(s.data(), s.size(), out.data(), &n) != SNAPPY_OK) throw std::runtime_error("snappy");
    out.resize(n);
  } else if (codec == 6) {
    out.resize(ZSTD_compressBound(s.size()));
    const size_t n = ZSTD_compress(out.data(), out.size(), s.data(), s.size(), 3);
    if (ZSTD_isError(n)) throw std::runtime_error("zstd");
    out.resize(n);
  } else if (codec == 2) {
    z_stream z{};
    if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw std::runtime_error("zlib");
    out.resize(deflateBound(&z, s.size()) + 32);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
    z.avail_in = static_cast<uInt>(s.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate");
    out.resize(z.total_out);
    deflateEnd(&z);
  } else {
    out = s;
  }
  return out;
}

inline std::string plain(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    le32(out, static_cast<uint32_t>(s.size()));
    out += s;
  }
  return out;
}

// Serializes one page (header + body), compressing as the codec and page version say.
inline std::string page_bytes(const Page& p, const WriteOptions& o) {
  std::string body, stored;
  if (p.type == 3) {
    const std::string values = o.codec != 0 ? compress(o.codec, p.values) : p.values;
    body = p.levels + p.values;
    stored = p.levels + values;
  } else {
    if (p.type == 0 && o.optional) le32(body, static_cast<uint32_t>(p.levels.size()));
    if (p.type == 0) body += p.levels;
    body += p.values;
    stored = compress(o.codec, body);
  }
  Thrift t;
  t.i32(1, p.type);
  t.i32(2, static_cast<int32_t>(body.size()) + p.uncompressed_size_delta);
  t.i32(3, static_cast<int32_t>(stored.size()));
  if (o.crc) t.i32(4, static_cast<int32_t>(crc32(0, reinterpret_cast<const Bytef*>(stored.data()), static_cast<uInt>(stored.size()))));
  if (p.type == 0) {
    t.begin(5);
    t.i32(1, p.num_values);
    t.i32(2, p.encoding);
    t.i32(3, 3);
    t.i32(4, 3);
    t.end();
  } else if (p.type == 2) {
    t.begin(7);
    t.i32(1, p.num_values);
    t.i32(2, p.encoding);
    t.boolean(3, false);
    t.end();
  } else {
    t.begin(8);
    t.i32(1, p.num_values);
    t.i32(2, p.num_nulls);
    t.i32(3, p.num_values);
    t.i32(4, p.encoding);
    t.i32(5, static_cast<int32_t>(p.levels.size()));
    t.i32(6, 0);
    t.boolean(7, o.codec != 0);
    t.end();
  }
  t.stop();
  return t.out + stored;
}

struct ChunkInfo {
  std::vector<std::string> path;
  int64_t num_values = 0, data_offset = 0, dict_offset = -1, size = 0;
};

// Appends one column chunk of values[begin, end) to file.
inline ChunkInfo write_chunk(std::string& file, const std::vector<std::optional<std::string>>& all, size_t begin,
                             size_t end, const WriteOptions& o) {
  ChunkInfo c;
  c.num_values = static_cast<int64_t>(end - begin);
  const int64_t start = static_cast<int64_t>(file.size());
  int page_index = 0;
  auto emit = [&](Page p) {
    if (o.edit_page) o.edit_page(p, page_index);
    ++page_index;
    file += page_bytes(p, o);
  };
  const bool dict = o.values == Values::kDictionary || o.values == Values::kDictionaryThenPlain;
  const size_t per_page = std::max<size_t>(o.rows_per_page, 1);
  const size_t dict_rows = o.values == Values::kDictionaryThenPlain ? o.dictionary_data_pages * per_page : SIZE_MAX;
  std::map<std::string, uint32_t> index;
  std::vector<std::string> dict_values;
  if (dict) {
    for (size_t i = begin; i < end && i - begin < dict_rows; ++i)
      if (all[i] && index.emplace(*all[i], static_cast<uint32_t>(dict_values.size())).second) dict_values.push_back(*all[i]);
    Page d;
    d.type = 2;
    d.values = plain(dict_values);
    d.num_values = static_cast<int32_t>(dict_values.size());
    d.encoding = o.plain_dictionary ? 2 : 0;
    c.dict_offset = start;
    emit(d);
  }
  c.data_offset = static_cast<int64_t>(file.size());
  for (size_t p0 = begin; p0 < end || (p0 == begin && begin == end); p0 += per_page) {
    const size_t p1 = std::min(end, p0 + per_page);
    Page p;
    p.type = o.v2 ? 3 : 0;
    p.num_values = static_cast<int32_t>(p1 - p0);
    std::vector<uint32_t> defs;
    std::vector<std::string> present;
    for (size_t i = p0; i < p1; ++i) {
      defs.push_back(all[i] ? 1 : 0);
      if (all[i]) present.push_back(*all[i]);
      else if (!o.optional) throw std::runtime_error("null in a required column");
    }
    p.num_nulls = static_cast<int32_t>(defs.size() - present.size());
    if (o.optional) p.levels = rle_hybrid(defs, 1);
    const bool use_dict = dict && p0 - begin < dict_rows;
    if (use_dict) {
      std::vector<uint32_t> idx;
      for (const auto& s : present) idx.push_back(index.at(s));
      const int w = bit_width(dict_values.empty() ? 0 : dict_values.size() - 1);
      p.values = std::string(1, static_cast<char>(w)) + rle_hybrid(idx, w);
      p.encoding = o.plain_dictionary ? 2 : 8;
    } else if (o.values == Values::kDeltaLength) {
      std::vector<int64_t> lens;
      std::string bytes;
      for (const auto& s : present) {
        lens.push_back(static_cast<int64_t>(s.size()));
        bytes += s;
      }
      p.values = delta_binary_packed(lens) + bytes;
      p.encoding = 6;
    } else {
      p.values = plain(present);
      p.encoding = 0;
    }
    emit(p);
    if (p1 == end) break;
  }
  c.size = static_cast<int64_t>(file.size()) - start;
  return c;
}

inline void column_meta(Thrift& t, const ChunkInfo& c, const WriteOptions& o, int32_t type) {
  t.begin(3);
  t.i32(1, type);
  t.list(2, 5, 3);
  t.zigzag(0);
  t.zigzag(3);
  t.zigzag(o.values == Values::kDeltaLength ? 6 : 8);
  t.list(3, 8, c.path.size());
  for (const auto& s : c.path) {
    t.varint(s.size());
    t.out += s;
  }
  t.i32(4, o.codec);
  t.i64(5, c.num_values);
  t.i64(6, c.size);
  t.i64(7, c.size);
  t.i64(9, c.data_offset);
  if (c.dict_offset >= 0) t.i64(11, c.dict_offset);
  t.begin(12);  // statistics: skipped by the reader
  t.str(5, "max");
  t.str(6, "min");
  t.end();
  t.end();
}

}  // namespace detail

// The bytes of a Parquet file holding the columns (all of the same length).
inline std::string write_parquet(const std::vector<TestColumn>& cols, const WriteOptions& o) {
  using namespace detail;
  const size_t rows = cols.empty() ? 0 : cols[0].values.size();
  std::string file = "PAR1";
  std::vector<std::pair<int64_t, std::vector<ChunkInfo>>> groups;
  const size_t per_group = std::max<size_t>(o.rows_per_group, 1);
  for (size_t g0 = 0; g0 < rows || (g0 == 0 && rows == 0); g0 += per_group) {
    const size_t g1 = std::min(rows, g0 + per_group);
    std::vector<ChunkInfo> chunks;
    for (const auto& col : cols) {
      chunks.push_back(write_chunk(file, col.values, g0, g1, o));
      chunks.back().path = {col.name};
    }
    if (o.nested_extra) {
      WriteOptions plain_opts = o;
      plain_opts.edit_page = nullptr;
      chunks.push_back(write_chunk(file, cols[0].values, g0, g1, plain_opts));
      chunks.back().path = {"meta", "x"};
    }
    groups.push_back({static_cast<int64_t>(g1 - g0), chunks});
    if (g1 == rows) break;
  }
  Thrift t;
  t.i32(1, 1);
  t.list(2, 12, cols.size() + 1 + (o.nested_extra ? 2 : 0));
  t.begin_element();
  t.str(4, "schema");
  t.i32(5, static_cast<int32_t>(cols.size() + (o.nested_extra ? 1 : 0)));
  t.end();
  for (const auto& col : cols) {
    t.begin_element();
    t.i32(1, o.physical_type);
    t.i32(3, o.optional ? 1 : 0);
    t.str(4, col.name);
    t.i32(6, 0);   // converted type UTF8
    t.begin(10);   // logicalType: STRING (a union: skipped by the reader)
    t.begin(1);
    t.end();
    t.end();
    t.end();
  }
  if (o.nested_extra) {
    t.begin_element();
    t.i32(3, 0);
    t.str(4, "meta");
    t.i32(5, 1);
    t.end();
    t.begin_element();
    t.i32(1, 6);
    t.i32(3, 0);
    t.str(4, "x");
    t.end();
  }
  t.i64(3, static_cast<int64_t>(rows));
  t.list(4, 12, groups.size());
  for (const auto& [n, chunks] : groups) {
    t.begin_element();
    t.list(1, 12, chunks.size());
    for (size_t k = 0; k < chunks.size(); ++k) {
      t.begin_element();
      t.i64(2, chunks[k].data_offset);
      column_meta(t, chunks[k], o, k < cols.size() ? o.physical_type : 6);
      t.end();
    }
    int64_t bytes = 0;
    for (const auto& c : chunks) bytes += c.size;
    t.i64(2, bytes);
    t.i64(3, n);
    t.end();
  }
  t.list(5, 12, 1);  // key_value_metadata: skipped by the reader
  t.begin_element();
  t.str(1, "writer");
  t.str(2, "fittrain tests");
  t.end();
  t.str(6, "fittrain parquet_test_writer");
  t.stop();
  file += t.out;
  le32(file, static_cast<uint32_t>(t.out.size()));
  file += "PAR1";
  return file;
}

// Small files for the fuzzer's corpus (fuzz/make_seeds.cpp), one per layout, each < 4 KiB.
inline std::vector<std::pair<std::string, std::string>> fuzz_seed_files() {
  std::vector<std::optional<std::string>> rows;
  for (int i = 0; i < 24; ++i)
    rows.push_back(i % 5 == 3 ? std::nullopt : std::optional<std::string>(i % 3 ? "prompt" : "回答 " + std::to_string(i)));
  std::vector<std::optional<std::string>> required = rows;
  for (auto& r : required)
    if (!r) r = "";
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](const std::string& name, WriteOptions o) {
    o.rows_per_page = 10;
    o.rows_per_group = 16;
    out.push_back({name, write_parquet({{"prompt", o.optional ? rows : required}}, o)});
  };
  WriteOptions o;
  add("plain_v1.parquet", o);
  o.optional = true;
  o.values = Values::kDictionary;
  o.crc = true;
  add("dict_optional_crc.parquet", o);
  o.crc = false;
  o.v2 = true;
  o.values = Values::kDeltaLength;
  add("delta_v2_optional.parquet", o);
  o.values = Values::kDictionaryThenPlain;
  o.codec = 1;
  add("dict_then_plain_snappy.parquet", o);
  o.v2 = false;
  o.values = Values::kPlain;
  o.codec = 6;
  add("plain_zstd.parquet", o);
  o.codec = 2;
  o.v2 = true;
  add("plain_v2_gzip.parquet", o);
  return out;
}

}  // namespace ft::test::pq
