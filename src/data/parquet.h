// A focused Apache Parquet reader: the string (BYTE_ARRAY) columns of a flat schema, the
// shape of prompt/response data sets. Debian packages no Parquet library, so the format's
// needed parts are decoded here (parquet_thrift.cpp: footer and page headers;
// parquet_pages.cpp: codecs and encodings).
//
// Supported: flat schemas (top-level REQUIRED or OPTIONAL leaves), DATA_PAGE and
// DATA_PAGE_V2, PLAIN, PLAIN_DICTIONARY / RLE_DICTIONARY (also a chunk that falls back from
// dictionary to PLAIN pages) and DELTA_LENGTH_BYTE_ARRAY values, codecs UNCOMPRESSED, SNAPPY,
// ZSTD and GZIP, page CRCs when the writer stored them. Not supported (refused with a
// UserError): nested or repeated columns, other physical types, other encodings and codecs,
// encrypted files, column chunks stored in other files.
//
// Every malformed file is a UserError naming the file and, where it applies, the row group,
// column and page; the reader never reads outside the file.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ft {

class ParquetFile {
 public:
  // Maps the file and decodes its footer; checks the magic at both ends, the footer length,
  // the FileMetaData and the schema.
  explicit ParquetFile(const std::string& path);
  ~ParquetFile();
  ParquetFile(ParquetFile&&) noexcept;
  ParquetFile& operator=(ParquetFile&&) noexcept;
  ParquetFile(const ParquetFile&) = delete;
  ParquetFile& operator=(const ParquetFile&) = delete;

  const std::string& path() const;
  int64_t num_rows() const;
  // The flat (top-level leaf) columns in schema order; nested ones are left out.
  std::vector<std::string> column_names() const;
  int num_row_groups() const;
  int64_t row_group_num_rows(int row_group) const;

  // Reads one BYTE_ARRAY column of one row group, calling fn(row index in the file, value,
  // is_null) for each row in order (value is empty for a null). The view is valid only during
  // the call. Memory: one decompressed page plus the chunk's dictionary.
  void read_string_column(int row_group, const std::string& column,
                          const std::function<void(int64_t, std::string_view, bool)>& fn) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ft
