// Internals of the Parquet reader (data/parquet.h): the parts of the Parquet format it
// understands, decoded from the Thrift compact protocol (parquet_thrift.cpp), and the page
// decoders (parquet_pages.cpp). Not a public API: only parquet*.cpp and the tests include it.
//
// Every decoder here throws FormatError with a message that says what is wrong but not where;
// ParquetFile catches it and rethrows a UserError naming the file, row group, column and page.
// A separate type keeps that wrapping from touching exceptions thrown by the user's callback.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ft::parquet {

struct FormatError : std::runtime_error {
  explicit FormatError(const std::string& msg) : std::runtime_error(msg) {}
};

// Enum values of parquet.thrift (the on-disk numbers).
enum Type : int32_t { kBoolean = 0, kInt32 = 1, kInt64 = 2, kInt96 = 3, kFloat = 4, kDouble = 5,
                      kByteArray = 6, kFixedLenByteArray = 7 };
enum Repetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };
enum Codec : int32_t { kUncompressed = 0, kSnappy = 1, kGzip = 2, kLzo = 3, kBrotli = 4,
                       kLz4 = 5, kZstd = 6, kLz4Raw = 7 };
enum Encoding : int32_t { kPlain = 0, kPlainDictionary = 2, kRle = 3, kBitPacked = 4,
                          kDeltaBinaryPacked = 5, kDeltaLengthByteArray = 6, kDeltaByteArray = 7,
                          kRleDictionary = 8, kByteStreamSplit = 9 };
enum PageType : int32_t { kDataPage = 0, kIndexPage = 1, kDictionaryPage = 2, kDataPageV2 = 3 };

std::string type_name(int32_t type);
std::string codec_name(int32_t codec);
std::string encoding_name(int32_t encoding);

// Only the fields the reader uses; the decoder skips the rest (statistics, indexes, ...).
// -1 marks a field the file did not set.
struct SchemaElement {
  int32_t type = -1;
  int32_t repetition = -1;
  std::string name;
  int32_t num_children = 0;
};

struct ColumnMetaData {
  int32_t type = -1;
  std::vector<std::string> path_in_schema;
  int32_t codec = -1;
  int64_t num_values = -1;
  int64_t total_compressed_size = -1;
  int64_t data_page_offset = -1;
  int64_t dictionary_page_offset = -1;
};

struct ColumnChunk {
  bool has_file_path = false;  // the chunk lives in another file: not supported
  bool has_meta_data = false;
  ColumnMetaData meta;
};

struct RowGroup {
  std::vector<ColumnChunk> columns;
  int64_t num_rows = -1;
};

struct FileMetaData {
  std::vector<SchemaElement> schema;
  int64_t num_rows = -1;
  std::vector<RowGroup> row_groups;
};

struct DataPageHeader {
  int32_t num_values = -1;
  int32_t encoding = -1;
  int32_t definition_level_encoding = -1;
};

struct DictionaryPageHeader {
  int32_t num_values = -1;
  int32_t encoding = -1;
};

struct DataPageHeaderV2 {
  int32_t num_values = -1;
  int32_t num_nulls = -1;
  int32_t num_rows = -1;
  int32_t encoding = -1;
  int32_t definition_levels_byte_length = -1;
  int32_t repetition_levels_byte_length = -1;
  bool is_compressed = true;  // the format's default
};

struct PageHeader {
  int32_t type = -1;
  int32_t uncompressed_page_size = -1;
  int32_t compressed_page_size = -1;
  bool has_crc = false;
  uint32_t crc = 0;  // CRC-32 (zlib's polynomial) of the page bytes as stored
  bool has_data_page = false, has_dictionary_page = false, has_data_page_v2 = false;
  DataPageHeader data_page;
  DictionaryPageHeader dictionary_page;
  DataPageHeaderV2 data_page_v2;
};

// Decoders of the Thrift compact protocol (parquet_thrift.cpp). They read only [p, p + n).
FileMetaData decode_file_metadata(const uint8_t* p, size_t n);
// Sets *consumed to the header's length in bytes.
PageHeader decode_page_header(const uint8_t* p, size_t n, size_t* consumed);

// ---- pages (parquet_pages.cpp) ---------------------------------------------------------------

// Pages larger than this are refused before any allocation: pyarrow's pages are ~1 MiB, and a
// corrupt size field must not make the reader allocate gigabytes.
constexpr int64_t kMaxPageBytes = int64_t{1} << 30;

// The values of a dictionary page, viewing its own decompressed bytes.
struct Dictionary {
  std::vector<uint8_t> bytes;
  std::vector<std::string_view> values;
  bool present = false;
};

using ValueFn = std::function<void(int64_t, std::string_view, bool)>;

// Reusable buffers of one column chunk's pages (one decompressed page at a time).
struct PageScratch {
  std::vector<uint8_t> values;
};

void decode_dictionary_page(const PageHeader& h, const uint8_t* data, int32_t codec, Dictionary& out);

// Decodes one DATA_PAGE or DATA_PAGE_V2 of a flat BYTE_ARRAY column and calls fn for each of
// its values in order, with row indexes first_row, first_row + 1, ... Returns the number of
// values (rows) of the page.
int64_t decode_data_page(const PageHeader& h, const uint8_t* data, int32_t codec, bool optional,
                         const Dictionary& dict, PageScratch& scratch, int64_t first_row,
                         int64_t max_values, const ValueFn& fn);

// CRC-32 of the page bytes, as the page header's crc field holds it.
uint32_t page_crc(const uint8_t* data, size_t n);

}  // namespace ft::parquet
