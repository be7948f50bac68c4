// Decoder of the Thrift compact protocol, as far as Parquet's footer (FileMetaData) and page
// headers need it. Written against the protocol's specification: every read is checked
// against the end of the buffer, the nesting of skipped structs is capped (a corrupt footer
// could otherwise recurse until the stack runs out) and list sizes are bounded by the bytes
// left (each element takes at least one), so a lying size cannot make us allocate.
#include <string>

#include "core/error.h"
#include "data/parquet_format.h"

namespace ft::parquet {
namespace {

// Compact protocol type codes (field headers and list element types).
enum TType : int {
  kStop = 0, kBoolTrue = 1, kBoolFalse = 2, kByte = 3, kI16 = 4, kI32 = 5, kI64 = 6,
  kDouble = 7, kBinary = 8, kList = 9, kSet = 10, kMap = 11, kStruct = 12
};

// Parquet's structs nest four deep at most (FileMetaData > RowGroup > ColumnChunk >
// ColumnMetaData > Statistics); unknown ones we skip get a generous margin.
constexpr int kMaxDepth = 32;

const char* ttype_name(int t) {
  switch (t) {
    case kBoolTrue: case kBoolFalse: return "bool";
    case kByte: return "i8";
    case kI16: return "i16";
    case kI32: return "i32";
    case kI64: return "i64";
    case kDouble: return "double";
    case kBinary: return "binary";
    case kList: return "list";
    case kSet: return "set";
    case kMap: return "map";
    case kStruct: return "struct";
    default: return "unknown";
  }
}

struct Field {
  int16_t id = 0;
  int type = kStop;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n, const char* what) : p_(p), begin_(p), end_(p + n), what_(what) {}

  size_t consumed() const { return static_cast<size_t>(p_ - begin_); }

  [[noreturn]] void fail(const std::string& msg) const {
    throw FormatError(detail::concat(what_, ": ", msg, " (Thrift byte ", consumed(), ")"));
  }

  uint8_t byte() {
    if (p_ >= end_) fail("truncated");
    return *p_++;
  }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t b = byte();
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
  }

  int64_t zigzag() {
    const uint64_t v = varint();
    return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
  }

  int32_t i32_value() {
    const int64_t v = zigzag();
    if (v < INT32_MIN || v > INT32_MAX) fail(detail::concat("i32 value ", v, " out of range"));
    return static_cast<int32_t>(v);
  }

  std::string binary() {
    const uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) fail(detail::concat("string of ", n, " bytes runs past the end"));
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }

  // The next field header of the current struct, or type kStop at its end. last_id is the
  // previous field's id in this struct (ids are delta-encoded).
  Field field(int16_t& last_id) {
    const uint8_t b = byte();
    Field f;
    f.type = b & 0x0f;
    if (f.type == kStop) return f;
    if (f.type > kStruct) fail(detail::concat("unknown field type ", f.type));
    const int delta = b >> 4;
    if (delta != 0) {
      f.id = static_cast<int16_t>(last_id + delta);
    } else {
      const int64_t id = zigzag();
      if (id < INT16_MIN || id > INT16_MAX) fail(detail::concat("field id ", id, " out of range"));
      f.id = static_cast<int16_t>(id);
    }
    last_id = f.id;
    return f;
  }

  // A list (or set) header: element type and count, the count bounded by the bytes left.
  std::pair<int, size_t> list_header() {
    const uint8_t b = byte();
    const int elem = b & 0x0f;
    uint64_t n = b >> 4;
    if (n == 15) n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) fail(detail::concat("list of ", n, " elements is longer than the bytes left"));
    if (n > 0 && (elem == kStop || elem > kStruct)) fail(detail::concat("unknown list element type ", elem));
    return {elem, static_cast<size_t>(n)};
  }

  void skip(int type, int depth) {
    if (depth > kMaxDepth) fail("structs nested too deep");
    switch (type) {
      case kBoolTrue: case kBoolFalse: return;  // the value is in the field header
      case kByte: byte(); return;
      case kI16: case kI32: case kI64: varint(); return;
      case kDouble:
        if (end_ - p_ < 8) fail("truncated");
        p_ += 8;
        return;
      case kBinary: {
        const uint64_t n = varint();
        if (n > static_cast<uint64_t>(end_ - p_)) fail("string runs past the end");
        p_ += n;
        return;
      }
      case kList: case kSet: {
        auto [elem, n] = list_header();
        for (size_t i = 0; i < n; ++i) skip_element(elem, depth + 1);
        return;
      }
      case kMap: {
        const uint64_t n = varint();
        if (n == 0) return;
        if (n > static_cast<uint64_t>(end_ - p_)) fail("map longer than the bytes left");
        const uint8_t kv = byte();
        for (uint64_t i = 0; i < n; ++i) {
          skip_element(kv >> 4, depth + 1);
          skip_element(kv & 0x0f, depth + 1);
        }
        return;
      }
      case kStruct: {
        int16_t last = 0;
        for (Field f = field(last); f.type != kStop; f = field(last)) skip(f.type, depth + 1);
        return;
      }
      default: fail(detail::concat("cannot skip a field of type ", type));
    }
  }

  // Elements of a list are written without a field header; a bool takes one byte there.
  void skip_element(int type, int depth) {
    if (type == kBoolTrue || type == kBoolFalse) {
      byte();
      return;
    }
    if (type == kStop || type > kStruct) fail(detail::concat("unknown element type ", type));
    skip(type, depth);
  }

  void expect(const Field& f, int type, const char* strct, const char* name) {
    const bool ok = f.type == type || (type == kBoolTrue && f.type == kBoolFalse);
    if (!ok)
      fail(detail::concat(strct, ".", name, " (field ", f.id, ") has Thrift type ", ttype_name(f.type),
                          ", expected ", ttype_name(type)));
  }
  int32_t i32(const Field& f, const char* s, const char* n) { expect(f, kI32, s, n); return i32_value(); }
  int64_t i64(const Field& f, const char* s, const char* n) { expect(f, kI64, s, n); return zigzag(); }
  bool boolean(const Field& f, const char* s, const char* n) { expect(f, kBoolTrue, s, n); return f.type == kBoolTrue; }
  std::string str(const Field& f, const char* s, const char* n) { expect(f, kBinary, s, n); return binary(); }
  size_t list(const Field& f, int elem, const char* s, const char* n) {
    expect(f, kList, s, n);
    auto [t, count] = list_header();
    if (count > 0 && t != elem)
      fail(detail::concat(s, ".", n, " is a list of ", ttype_name(t), ", expected ", ttype_name(elem)));
    return count;
  }
  void struct_(const Field& f, const char* s, const char* n) { expect(f, kStruct, s, n); }

 private:
  const uint8_t* p_;
  const uint8_t* begin_;
  const uint8_t* end_;
  const char* what_;
};

// Each decoder reads one struct's fields up to its stop byte, keeping the fields it knows
// and skipping the rest, then checks that the fields it needs were present.
void require(Reader& r, bool present, const char* strct, const char* name) {
  if (!present) r.fail(detail::concat(strct, ".", name, " is missing"));
}

SchemaElement schema_element(Reader& r) {
  SchemaElement e;
  bool has_name = false;
  int16_t last = 0;
  for (Field f = r.field(last); f.type != kStop; f = r.field(last)) {
    switch (f.id) {
      case 1: e.type = r.i32(f, "SchemaElement", "type"); break;
      case 3: e.repetition = r.i32(f, "SchemaElement", "repetition_type"); break;
      case 4: e.name = r.str(f, "SchemaElement", "name"); has_name = true; break;
      case 5: e.num_children = r.i32(f, "SchemaElement", "num_children"); break;
      default: r.skip(f.type, 2);
    }
  }
  require(r, has_name, "SchemaElement", "name");
  return e;
}

ColumnMetaData column_meta(Reader& r) {
  ColumnMetaData m;
  int16_t last = 0;
  for (Field f = r.field(last); f.type != kStop; f = r.field(last)) {
    switch (f.id) {
      case 1: m.type = r.i32(f, "ColumnMetaData", "type"); break;
      case 3: {
        const size_t n = r.list(f, kBinary, "ColumnMetaData", "path_in_schema");
        for (size_t i = 0; i < n; ++i) m.path_in_schema.push_back(r.binary());
        break;
      }
      case 4: m.codec = r.i32(f, "ColumnMetaData", "codec"); break;
      case 5: m.num_values = r.i64(f, "ColumnMetaData", "num_values"); break;
      case 7: m.total_compressed_size = r.i64(f, "ColumnMetaData", "total_compressed_size"); break;
      case 9: m.data_page_offset = r.i64(f, "ColumnMetaData", "data_page_offset"); break;
      case 11: m.dictionary_page_offset = r.i64(f, "ColumnMetaData", "dictionary_page_offset"); break;
      default: r.skip(f.type, 4);
    }
  }
  require(r, m.type >= 0, "ColumnMetaData", "type");
  require(r, m.codec >= 0, "ColumnMetaData", "codec");
  require(r, m.num_values >= 0, "ColumnMetaData", "num_values");
  require(r, m.total_compressed_size >= 0, "ColumnMetaData", "total_compressed_size");
  require(r, m.data_page_offset >= 0, "ColumnMetaData", "data_page_offset");
  return m;
}

ColumnChunk column_chunk(Reader& r) {
  ColumnChunk c;
  int16_t last = 0;
  for (Field f = r.field(last); f.type != kStop; f = r.field(last)) {
    switch (f.id) {
      case 1: r.str(f, "ColumnChunk", "file_path"); c.has_file_path = true; break;
      case 3:
        r.struct_(f, "ColumnChunk", "meta_data");
        c.meta = column_meta(r);
        c.has_meta_data = true;
        break;
      default: r.skip(f.type, 3);
    }
  }
  return c;
}

RowGroup row_group(Reader& r) {
  RowGroup g;
  bool has_columns = false;
  int16_t last = 0;
  for (Field f = r.field(last); f.type != kStop; f = r.field(last)) {
    switch (f.id) {
      case 1: {
        const size_t n = r.list(f, kStruct, "RowGroup", "columns");
        g.columns.reserve(n);
        for (size_t i = 0; i < n; ++i) g.columns.push_back(column_chunk(r));
        has_columns = true;
        break;
      }
      case 3: g.num_rows = r.i64(f, "RowGroup", "num_rows"); break;
      default: r.skip(f.type, 2);
    }
  }
  require(r, has_columns, "RowGroup", "columns");
  require(r, g.num_rows >= 0, "RowGroup", "num_rows");
  return g;
}

}  // namespace

FileMetaData decode_file_metadata(const uint8_t* p, size_t n) {
  Reader r(p, n, "footer (FileMetaData)");
  FileMetaData m;
  bool has_schema = false, has_row_groups = false;
  int16_t last = 0;
  for (Field f = r.field(last); f.type != kStop; f = r.field(last)) {
    switch (f.id) {
      case 2: {
        const size_t count = r.list(f, kStruct, "FileMetaData", "schema");
        m.schema.reserve(count);
        for (size_t i = 0; i < count; ++i) m.schema.push_back(schema_element(r));
        has_schema = true;
        break;
      }
      case 3: m.num_rows = r.i64(f, "FileMetaData", "num_rows"); break;
      case 4: {
        const size_t count = r.list(f, kStruct, "FileMetaData", "row_groups");
        m.row_groups.reserve(count);
        for (size_t i = 0; i < count; ++i) m.row_groups.push_back(row_group(r));
        has_row_groups = true;
        break;
      }
      default: r.skip(f.type, 1);
    }
  }
  require(r, has_schema && !m.schema.empty(), "FileMetaData", "schema");
  require(r, m.num_rows >= 0, "FileMetaData", "num_rows");
  require(r, has_row_groups, "FileMetaData", "row_groups");
  return m;
}

PageHeader decode_page_header(const uint8_t* p, size_t n, size_t* consumed) {
  Reader r(p, n, "page header");
  PageHeader h;
  int16_t last = 0;
  for (Field f = r.field(last); f.type != kStop; f = r.field(last)) {
    switch (f.id) {
      case 1: h.type = r.i32(f, "PageHeader", "type"); break;
      case 2: h.uncompressed_page_size = r.i32(f, "PageHeader", "uncompressed_page_size"); break;
      case 3: h.compressed_page_size = r.i32(f, "PageHeader", "compressed_page_size"); break;
      case 4:
        h.crc = static_cast<uint32_t>(r.i32(f, "PageHeader", "crc"));
        h.has_crc = true;
        break;
      case 5: {
        r.struct_(f, "PageHeader", "data_page_header");
        h.has_data_page = true;
        int16_t l2 = 0;
        for (Field g = r.field(l2); g.type != kStop; g = r.field(l2)) {
          switch (g.id) {
            case 1: h.data_page.num_values = r.i32(g, "DataPageHeader", "num_values"); break;
            case 2: h.data_page.encoding = r.i32(g, "DataPageHeader", "encoding"); break;
            case 3: h.data_page.definition_level_encoding = r.i32(g, "DataPageHeader", "definition_level_encoding"); break;
            default: r.skip(g.type, 2);
          }
        }
        require(r, h.data_page.num_values >= 0, "DataPageHeader", "num_values");
        require(r, h.data_page.encoding >= 0, "DataPageHeader", "encoding");
        break;
      }
      case 7: {
        r.struct_(f, "PageHeader", "dictionary_page_header");
        h.has_dictionary_page = true;
        int16_t l2 = 0;
        for (Field g = r.field(l2); g.type != kStop; g = r.field(l2)) {
          switch (g.id) {
            case 1: h.dictionary_page.num_values = r.i32(g, "DictionaryPageHeader", "num_values"); break;
            case 2: h.dictionary_page.encoding = r.i32(g, "DictionaryPageHeader", "encoding"); break;
            default: r.skip(g.type, 2);
          }
        }
        require(r, h.dictionary_page.num_values >= 0, "DictionaryPageHeader", "num_values");
        break;
      }
      case 8: {
        r.struct_(f, "PageHeader", "data_page_header_v2");
        h.has_data_page_v2 = true;
        auto& v = h.data_page_v2;
        int16_t l2 = 0;
        for (Field g = r.field(l2); g.type != kStop; g = r.field(l2)) {
          switch (g.id) {
            case 1: v.num_values = r.i32(g, "DataPageHeaderV2", "num_values"); break;
            case 2: v.num_nulls = r.i32(g, "DataPageHeaderV2", "num_nulls"); break;
            case 3: v.num_rows = r.i32(g, "DataPageHeaderV2", "num_rows"); break;
            case 4: v.encoding = r.i32(g, "DataPageHeaderV2", "encoding"); break;
            case 5: v.definition_levels_byte_length = r.i32(g, "DataPageHeaderV2", "definition_levels_byte_length"); break;
            case 6: v.repetition_levels_byte_length = r.i32(g, "DataPageHeaderV2", "repetition_levels_byte_length"); break;
            case 7: v.is_compressed = r.boolean(g, "DataPageHeaderV2", "is_compressed"); break;
            default: r.skip(g.type, 2);
          }
        }
        require(r, v.num_values >= 0, "DataPageHeaderV2", "num_values");
        require(r, v.num_nulls >= 0, "DataPageHeaderV2", "num_nulls");
        require(r, v.num_rows >= 0, "DataPageHeaderV2", "num_rows");
        require(r, v.encoding >= 0, "DataPageHeaderV2", "encoding");
        require(r, v.definition_levels_byte_length >= 0, "DataPageHeaderV2", "definition_levels_byte_length");
        require(r, v.repetition_levels_byte_length >= 0, "DataPageHeaderV2", "repetition_levels_byte_length");
        break;
      }
      default: r.skip(f.type, 1);
    }
  }
  require(r, h.type >= 0, "PageHeader", "type");
  require(r, h.uncompressed_page_size >= 0, "PageHeader", "uncompressed_page_size");
  require(r, h.compressed_page_size >= 0, "PageHeader", "compressed_page_size");
  *consumed = r.consumed();
  return h;
}

std::string type_name(int32_t t) {
  static const char* const names[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE",
                                      "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  return t >= 0 && t <= 7 ? names[t] : detail::concat("unknown type ", t);
}

std::string codec_name(int32_t c) {
  static const char* const names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  return c >= 0 && c <= 7 ? names[c] : detail::concat("unknown codec ", c);
}

std::string encoding_name(int32_t e) {
  static const char* const names[] = {"PLAIN", "GROUP_VAR_INT", "PLAIN_DICTIONARY", "RLE", "BIT_PACKED",
                                      "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
                                      "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  return e >= 0 && e <= 9 ? names[e] : detail::concat("unknown encoding ", e);
}

}  // namespace ft::parquet
