// Page decoding of the Parquet reader: decompression (Snappy, Zstd, gzip), definition levels
// and dictionary indices (the RLE/bit-packed hybrid), and BYTE_ARRAY values in PLAIN,
// dictionary and DELTA_LENGTH_BYTE_ARRAY encodings. Levels and values are decoded as they
// are handed to the callback, never into arrays sized by a page's value count: that count
// comes from the file and may lie, while the page's bytes are already bounded.
#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <limits>
#include <optional>

#include "core/error.h"
#include "data/parquet_format.h"

namespace ft::parquet {
namespace {

using detail::concat;

[[noreturn]] void fail(const std::string& msg) { throw FormatError(msg); }

uint32_t load_le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// ---- decompression ---------------------------------------------------------------------------

void inflate_gzip(const uint8_t* src, size_t n, uint8_t* dst, size_t expected) {
  z_stream z{};
  // 32 + MAX_WBITS: gzip framing (RFC 1952, what Parquet's GZIP codec means) or zlib framing,
  // which some old writers used; zlib tells them apart by the header.
  if (inflateInit2(&z, 32 + MAX_WBITS) != Z_OK) fail("cannot initialise zlib");
  z.next_in = const_cast<Bytef*>(src);
  z.avail_in = static_cast<uInt>(n);
  z.next_out = dst;
  z.avail_out = static_cast<uInt>(expected);
  const int rc = inflate(&z, Z_FINISH);
  const size_t got = expected - z.avail_out;
  inflateEnd(&z);
  if (rc == Z_BUF_ERROR && z.avail_out == 0)
    fail(concat("gzip data decompresses to more than the page header's ", expected, " bytes"));
  if (rc != Z_STREAM_END) fail(concat("corrupt gzip data (zlib: ", z.msg ? z.msg : "truncated", ")"));
  if (got != expected)
    fail(concat("gzip data decompresses to ", got, " bytes, the page header says ", expected));
}

// Returns the page's uncompressed bytes: src itself when uncompressed, else buf's.
const uint8_t* decompress(int32_t codec, const uint8_t* src, size_t n, size_t expected,
                          std::vector<uint8_t>& buf) {
  if (codec == kUncompressed) {
    if (n != expected)
      fail(concat("uncompressed page has ", n, " bytes but its header says ", expected));
    return src;
  }
  if (expected > static_cast<size_t>(kMaxPageBytes))
    fail(concat("page of ", expected, " uncompressed bytes is larger than the reader's limit of ",
                kMaxPageBytes));
  switch (codec) {
    case kSnappy: {
      size_t len = 0;
      if (snappy_uncompressed_length(reinterpret_cast<const char*>(src), n, &len) != SNAPPY_OK)
        fail("corrupt snappy data (bad length header)");
      if (len != expected)
        fail(concat("snappy data decompresses to ", len, " bytes, the page header says ", expected));
      buf.resize(expected);
      size_t out = expected;
      if (snappy_uncompress(reinterpret_cast<const char*>(src), n, reinterpret_cast<char*>(buf.data()),
                            &out) != SNAPPY_OK || out != expected)
        fail("corrupt snappy data");
      return buf.data();
    }
    case kZstd: {
      // When the first frame records its size, it must fit before we allocate for the page.
      const unsigned long long size = ZSTD_getFrameContentSize(src, n);
      if (size == ZSTD_CONTENTSIZE_ERROR) fail("corrupt zstd data (bad frame header)");
      if (size != ZSTD_CONTENTSIZE_UNKNOWN && size > expected)
        fail(concat("zstd data decompresses to ", size, " bytes, the page header says ", expected));
      buf.resize(expected);
      const size_t got = ZSTD_decompress(buf.data(), expected, src, n);
      if (ZSTD_isError(got)) fail(concat("corrupt zstd data (", ZSTD_getErrorName(got), ")"));
      if (got != expected)
        fail(concat("zstd data decompresses to ", got, " bytes, the page header says ", expected));
      return buf.data();
    }
    case kGzip: {
      // Deflate expands at most ~1032:1; a larger claim is corrupt and is refused unallocated.
      if (expected / 1032 > n + 64)
        fail(concat("gzip page claims ", expected, " bytes from ", n, " compressed bytes"));
      buf.resize(expected);
      inflate_gzip(src, n, buf.data(), expected);
      return buf.data();
    }
    default:
      fail(concat("compression codec ", codec_name(codec),
                  " is not supported (supported: UNCOMPRESSED, SNAPPY, GZIP, ZSTD)"));
  }
}

// ---- RLE / bit-packed hybrid -----------------------------------------------------------------

// value of w (<= 32) bits at bit offset `bit` of p, least significant bit first; the caller
// has checked that the bytes exist.
uint32_t bits_at(const uint8_t* p, uint64_t bit, int w) {
  uint64_t v = 0;
  const uint8_t* q = p + bit / 8;
  const int shift = static_cast<int>(bit % 8);
  const int nbytes = (shift + w + 7) / 8;
  for (int i = 0; i < nbytes; ++i) v |= static_cast<uint64_t>(q[i]) << (8 * i);
  v >>= shift;
  return static_cast<uint32_t>(w == 32 ? v : v & ((uint64_t{1} << w) - 1));
}

uint64_t varint(const uint8_t*& p, const uint8_t* end, const char* what) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p >= end) fail(concat(what, ": truncated varint"));
    const uint8_t b = *p++;
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  fail(concat(what, ": varint longer than 10 bytes"));
}

class RleDecoder {
 public:
  RleDecoder(const uint8_t* p, const uint8_t* end, int bit_width, const char* what)
      : p_(p), end_(end), width_(bit_width), what_(what) {}

  // The next value; false once the data is exhausted.
  bool next(uint32_t& out) {
    while (left_ == 0) {
      if (p_ >= end_) return false;
      const uint64_t h = varint(p_, end_, what_);
      const uint64_t avail = static_cast<uint64_t>(end_ - p_);
      if (h & 1) {
        // Bit-packed groups of 8 values. A writer may stop the last group's bytes early, so
        // only the values whose bits are present can be read; the data ends with them.
        const uint64_t groups = h >> 1;
        if (groups > (uint64_t{1} << 32)) fail(concat(what_, ": bit-packed run of ", groups, " groups is too long"));
        packed_ = true;
        base_ = p_;
        bit_ = 0;
        left_ = groups * 8;
        if (width_ > 0) {
          const uint64_t bytes = groups * static_cast<uint64_t>(width_);
          const uint64_t have = bytes < avail ? bytes : avail;
          const uint64_t readable = have * 8 / static_cast<uint64_t>(width_);
          if (readable < left_) left_ = readable;
          if (groups > 0 && left_ == 0) fail(concat(what_, ": bit-packed run past the end of the data"));
          p_ += have;
        }
      } else {
        const int nbytes = (width_ + 7) / 8;
        if (avail < static_cast<uint64_t>(nbytes)) fail(concat(what_, ": RLE run past the end of the data"));
        uint64_t v = 0;
        for (int i = 0; i < nbytes; ++i) v |= static_cast<uint64_t>(p_[i]) << (8 * i);
        p_ += nbytes;
        if (width_ < 32 && v >> width_) fail(concat(what_, ": RLE value ", v, " wider than ", width_, " bits"));
        value_ = static_cast<uint32_t>(v);
        left_ = h >> 1;
        packed_ = false;
      }
    }
    --left_;
    if (!packed_) {
      out = value_;
    } else {
      out = width_ == 0 ? 0 : bits_at(base_, bit_, width_);
      bit_ += static_cast<uint64_t>(width_);
    }
    return true;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  int width_;
  const char* what_;
  uint64_t left_ = 0;
  bool packed_ = false;
  uint32_t value_ = 0;
  const uint8_t* base_ = nullptr;
  uint64_t bit_ = 0;
};

// ---- DELTA_BINARY_PACKED (32-bit) ------------------------------------------------------------

// Lengths of DELTA_LENGTH_BYTE_ARRAY are INT32: decoded with 32-bit wrapping arithmetic,
// which gives the right values whether the writer's deltas wrapped in 32 or 64 bits.
class DeltaDecoder {
 public:
  DeltaDecoder(const uint8_t* p, const uint8_t* end) : p_(p), end_(end) {
    const char* w = "DELTA_BINARY_PACKED header";
    block_size_ = varint(p_, end_, w);
    miniblocks_ = varint(p_, end_, w);
    total_ = varint(p_, end_, w);
    const uint64_t z = varint(p_, end_, w);
    last_ = static_cast<uint32_t>(static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1));
    if (block_size_ == 0 || block_size_ % 128 != 0 || block_size_ > (1u << 20))
      fail(concat("DELTA_BINARY_PACKED block size ", block_size_, " is not a multiple of 128 (up to 1 Mi)"));
    if (miniblocks_ == 0 || miniblocks_ > block_size_ / 8 || block_size_ % miniblocks_ != 0 ||
        (block_size_ / miniblocks_) % 8 != 0)
      fail(concat("DELTA_BINARY_PACKED: ", miniblocks_, " miniblocks do not divide a block of ", block_size_));
    per_mini_ = block_size_ / miniblocks_;
    mini_index_ = miniblocks_;  // the first delta starts a block
  }

  uint64_t total() const { return total_; }
  // Where the encoded values end (valid once all total() values were read).
  const uint8_t* end_of_data() const { return p_; }

  uint32_t next() {
    if (read_ == total_) fail("DELTA_BINARY_PACKED: more values requested than encoded");
    ++read_;
    if (read_ == 1) return last_;
    if (mini_left_ == 0) start_miniblock();
    --mini_left_;
    const uint32_t packed = width_ == 0 ? 0 : bits_at(mini_base_, mini_bit_, width_);
    mini_bit_ += static_cast<uint64_t>(width_);
    last_ = last_ + min_delta_ + packed;
    return last_;
  }

 private:
  void start_miniblock() {
    if (mini_index_ == miniblocks_) {  // a new block: min delta and the miniblocks' widths
      const uint64_t z = varint(p_, end_, "DELTA_BINARY_PACKED block");
      min_delta_ = static_cast<uint32_t>(static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1));
      if (static_cast<uint64_t>(end_ - p_) < miniblocks_) fail("DELTA_BINARY_PACKED: bit widths past the end of the data");
      widths_ = p_;
      p_ += miniblocks_;
      mini_index_ = 0;
    }
    width_ = widths_[mini_index_++];
    if (width_ > 32) fail(concat("DELTA_BINARY_PACKED: bit width ", width_, " for 32-bit values"));
    const uint64_t bytes = per_mini_ * static_cast<uint64_t>(width_) / 8;
    if (static_cast<uint64_t>(end_ - p_) < bytes) fail("DELTA_BINARY_PACKED: miniblock past the end of the data");
    mini_base_ = p_;
    mini_bit_ = 0;
    p_ += bytes;
    mini_left_ = per_mini_;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  uint64_t block_size_ = 0, miniblocks_ = 0, per_mini_ = 0, total_ = 0, read_ = 0;
  uint64_t mini_index_ = 0, mini_left_ = 0, mini_bit_ = 0;
  uint32_t last_ = 0, min_delta_ = 0;
  int width_ = 0;
  const uint8_t* widths_ = nullptr;
  const uint8_t* mini_base_ = nullptr;
};

// ---- values ----------------------------------------------------------------------------------

// Yields a page's non-null values in order, whatever their encoding.
class ValueReader {
 public:
  // max_values: the page's value count, which bounds what an encoding may claim to hold.
  ValueReader(int32_t encoding, const uint8_t* p, const uint8_t* end, const Dictionary& dict,
              int64_t max_values)
      : enc_(encoding), p_(p), end_(end), dict_(dict), max_(max_values) {
    if (enc_ == kPlainDictionary || enc_ == kRleDictionary) {
      if (!dict.present) fail(concat(encoding_name(enc_), " page but the column chunk has no dictionary page"));
    } else if (enc_ == kDeltaLengthByteArray) {
      start_delta();
    } else if (enc_ != kPlain) {
      fail(concat("encoding ", encoding_name(enc_), " is not supported for strings (supported: PLAIN, ",
                  "PLAIN_DICTIONARY, RLE_DICTIONARY, DELTA_LENGTH_BYTE_ARRAY)"));
    }
  }

  std::string_view next(int64_t i) {
    switch (enc_) {
      case kPlain: {
        if (end_ - p_ < 4) fail(concat("PLAIN value ", i, ": length past the end of the page"));
        const uint32_t n = load_le32(p_);
        p_ += 4;
        if (n > static_cast<uint64_t>(end_ - p_))
          fail(concat("PLAIN value ", i, ": ", n, " bytes run past the end of the page"));
        std::string_view v(reinterpret_cast<const char*>(p_), n);
        p_ += n;
        return v;
      }
      case kDeltaLengthByteArray: {
        if (!delta_) fail(concat("DELTA_LENGTH_BYTE_ARRAY: value ", i, " but the page has no values section"));
        const uint32_t n = delta_->next();
        std::string_view v(reinterpret_cast<const char*>(data_), n);  // bounds checked in start_delta
        data_ += n;
        return v;
      }
      default: {
        if (!rle_) {
          if (p_ >= end_) fail("dictionary indices: the page has no bit width byte");
          const int w = *p_++;
          if (w > 32) fail(concat("dictionary indices: bit width ", w, " is over 32"));
          rle_.emplace(p_, end_, w, "dictionary indices");
        }
        uint32_t k = 0;
        if (!rle_->next(k)) fail(concat("dictionary indices end before value ", i));
        if (k >= dict_.values.size())
          fail(concat("dictionary index ", k, " out of range (the dictionary has ", dict_.values.size(), " values)"));
        return dict_.values[k];
      }
    }
  }

  // How many values the encoding itself holds, where it says (DELTA_LENGTH_BYTE_ARRAY).
  int64_t declared() const {
    if (enc_ != kDeltaLengthByteArray) return -1;
    return delta_ ? static_cast<int64_t>(delta_->total()) : 0;
  }

 private:
  // DELTA_LENGTH_BYTE_ARRAY: all lengths first, then all bytes. A first pass over the lengths
  // finds where the bytes start and checks they fit; the second hands the values out.
  void start_delta() {
    if (p_ == end_) return;  // a page of nulls only may carry no values section at all
    DeltaDecoder scan(p_, end_);
    if (scan.total() > static_cast<uint64_t>(max_))
      fail(concat("DELTA_LENGTH_BYTE_ARRAY holds ", scan.total(), " lengths in a page of ", max_, " values"));
    uint64_t sum = 0;
    for (uint64_t k = 0; k < scan.total(); ++k) {
      const uint32_t n = scan.next();
      if (n > static_cast<uint32_t>(INT32_MAX)) fail(concat("DELTA_LENGTH_BYTE_ARRAY: negative length of value ", k));
      sum += n;
    }
    data_ = scan.end_of_data();
    if (sum > static_cast<uint64_t>(end_ - data_))
      fail(concat("DELTA_LENGTH_BYTE_ARRAY: lengths add up to ", sum, " bytes but ", end_ - data_, " remain"));
    delta_.emplace(p_, end_);
  }

  int32_t enc_;
  const uint8_t* p_;
  const uint8_t* end_;
  const Dictionary& dict_;
  int64_t max_;
  std::optional<RleDecoder> rle_;
  std::optional<DeltaDecoder> delta_;
  const uint8_t* data_ = nullptr;
};

}  // namespace

uint32_t page_crc(const uint8_t* data, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt part = n > (1u << 30) ? (1u << 30) : static_cast<uInt>(n);
    c = crc32(c, data, part);
    data += part;
    n -= part;
  }
  return static_cast<uint32_t>(c);
}

void decode_dictionary_page(const PageHeader& h, const uint8_t* data, int32_t codec, Dictionary& out) {
  if (!h.has_dictionary_page) fail("DICTIONARY_PAGE without a dictionary_page_header");
  const int32_t enc = h.dictionary_page.encoding;
  if (enc != kPlain && enc != kPlainDictionary)
    fail(concat("dictionary page encoding ", encoding_name(enc), " is not supported (expected PLAIN)"));
  std::vector<uint8_t> own;
  const uint8_t* p = decompress(codec, data, static_cast<size_t>(h.compressed_page_size),
                                static_cast<size_t>(h.uncompressed_page_size), own);
  const size_t n = static_cast<size_t>(h.uncompressed_page_size);
  if (p != own.data()) own.assign(p, p + n);  // the dictionary outlives the mapping's page view
  out.bytes = std::move(own);
  const int64_t count = h.dictionary_page.num_values;
  // Every PLAIN value takes at least its 4-byte length: bounds the count before reserving.
  if (static_cast<uint64_t>(count) > n / 4)
    fail(concat("dictionary page claims ", count, " values in ", n, " bytes"));
  out.values.clear();
  out.values.reserve(static_cast<size_t>(count));
  Dictionary none;
  const uint8_t* b = out.bytes.data();
  ValueReader r(kPlain, b, b + n, none, count);
  for (int64_t i = 0; i < count; ++i) out.values.push_back(r.next(i));
  out.present = true;
}

int64_t decode_data_page(const PageHeader& h, const uint8_t* data, int32_t codec, bool optional,
                         const Dictionary& dict, PageScratch& scratch, int64_t first_row,
                         int64_t max_values, const ValueFn& fn) {
  const bool v2 = h.type == kDataPageV2;
  if (v2 ? !h.has_data_page_v2 : !h.has_data_page)
    fail(v2 ? "DATA_PAGE_V2 without a data_page_header_v2" : "DATA_PAGE without a data_page_header");
  const int64_t count = v2 ? h.data_page_v2.num_values : h.data_page.num_values;
  const int32_t encoding = v2 ? h.data_page_v2.encoding : h.data_page.encoding;
  if (count > max_values)
    fail(concat("page holds ", count, " values but only ", max_values, " remain in the column chunk"));
  const size_t stored = static_cast<size_t>(h.compressed_page_size);
  const size_t full = static_cast<size_t>(h.uncompressed_page_size);

  // Definition levels (max level 1, so bit width 1) and the values section of the page.
  const uint8_t* levels = nullptr;
  size_t levels_n = 0;
  const uint8_t* values = nullptr;
  size_t values_n = 0;
  if (v2) {
    // V2 keeps the levels uncompressed in front of the (maybe) compressed values.
    const auto& d = h.data_page_v2;
    const uint64_t lv = static_cast<uint64_t>(d.definition_levels_byte_length) +
                        static_cast<uint64_t>(d.repetition_levels_byte_length);
    if (lv > stored || lv > full)
      fail(concat("level bytes (", lv, ") exceed the page size (", stored, " stored, ", full, " uncompressed)"));
    if (d.num_rows != d.num_values)
      fail(concat("DATA_PAGE_V2 has ", d.num_rows, " rows but ", d.num_values, " values (a flat column has one per row)"));
    levels = data + d.repetition_levels_byte_length;  // a flat column has no repetition levels
    levels_n = static_cast<size_t>(d.definition_levels_byte_length);
    const bool compressed = d.is_compressed && codec != kUncompressed;
    values = decompress(compressed ? codec : kUncompressed, data + lv, stored - lv, full - lv, scratch.values);
    values_n = full - lv;
  } else {
    const uint8_t* p = decompress(codec, data, stored, full, scratch.values);
    values = p;
    values_n = full;
    if (optional) {
      if (h.data_page.definition_level_encoding != kRle)
        fail(concat("definition level encoding ", encoding_name(h.data_page.definition_level_encoding),
                    " is not supported (expected RLE)"));
      if (full < 4) fail("page too small for its definition levels' length");
      levels_n = load_le32(p);
      if (levels_n > full - 4)
        fail(concat("definition levels of ", levels_n, " bytes run past the page (", full, " bytes)"));
      levels = p + 4;
      values = p + 4 + levels_n;
      values_n = full - 4 - levels_n;
    }
  }

  RleDecoder defs(levels, levels + levels_n, 1, "definition levels");
  ValueReader reader(encoding, values, values + values_n, dict, count);
  int64_t nulls = 0, non_null = 0;
  for (int64_t i = 0; i < count; ++i) {
    uint32_t level = 1;
    if (optional && !defs.next(level))
      fail(concat("definition levels end after ", i, " of the page's ", count, " values"));
    if (level == 0) {
      ++nulls;
      fn(first_row + i, std::string_view(), true);
    } else {
      ++non_null;
      fn(first_row + i, reader.next(i), false);
    }
  }
  if (reader.declared() >= 0 && reader.declared() != non_null)
    fail(concat("DELTA_LENGTH_BYTE_ARRAY holds ", reader.declared(), " lengths for ", non_null, " non-null values"));
  if (v2 && nulls != h.data_page_v2.num_nulls)
    fail(concat("DATA_PAGE_V2 says ", h.data_page_v2.num_nulls, " nulls, its definition levels have ", nulls));
  return count;
}

}  // namespace ft::parquet
