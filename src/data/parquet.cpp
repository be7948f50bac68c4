// The Parquet reader's file level: mapping, magic and footer, the schema, and the walk over a
// column chunk's pages. See parquet.h for what is supported.
#include "data/parquet.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "core/error.h"
#include "data/parquet_format.h"
#include "data/token_shard.h"

namespace ft {

using namespace parquet;
using detail::concat;

namespace {

constexpr size_t kMagicBytes = 4;
// "PAR1" at the start, then at the end after the footer and its 4-byte length.
constexpr size_t kMinFileBytes = 2 * kMagicBytes + 4;

struct Column {
  std::string name;
  size_t leaf = 0;  // index of its chunk in each row group (leaves in schema order)
  int32_t type = -1;
  bool optional = false;
};

}  // namespace

struct ParquetFile::Impl {
  std::string path;
  const uint8_t* map = nullptr;
  size_t size = 0;
  size_t footer_start = 0;  // first byte of the FileMetaData: column data lies before it
  FileMetaData meta;
  std::vector<Column> columns;
  std::set<std::string> nested;  // top-level names of nested or repeated columns
  size_t leaves = 0;
  std::vector<int64_t> first_row;  // of each row group

  ~Impl() {
    if (map != nullptr) ::munmap(const_cast<uint8_t*>(map), size);
  }

  void open();
  void read_schema();
  [[noreturn]] void fail(const std::string& msg) const { throw UserError(concat(path, ": ", msg)); }
};

void ParquetFile::Impl::open() {
  // stat first: open(2) of a FIFO for reading blocks until a writer comes.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(concat("is ", file_kind(st.st_mode), ", not a Parquet file (expected a regular file)"));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FT_USER_CHECK(fd >= 0, path, ": cannot open Parquet file: ", std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("cannot stat, or not a regular file");
  }
  size = static_cast<size_t>(st.st_size);
  if (size < kMinFileBytes) {
    ::close(fd);
    fail(concat("too small for a Parquet file (", size, " bytes; the magic and footer alone take ",
                kMinFileBytes, ")"));
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (m == MAP_FAILED) fail(concat("cannot mmap Parquet file: ", std::strerror(err)));
  map = static_cast<const uint8_t*>(m);

  if (std::memcmp(map, "PAR1", 4) != 0) fail("not a Parquet file (no 'PAR1' magic at the start)");
  const uint8_t* tail = map + size - kMagicBytes;
  if (std::memcmp(tail, "PARE", 4) == 0) fail("encrypted Parquet files are not supported");
  if (std::memcmp(tail, "PAR1", 4) != 0)
    fail("no 'PAR1' magic at the end of the file (truncated, or still being written?)");
  const uint8_t* len = tail - 4;
  const uint64_t footer =
      uint64_t{len[0]} | uint64_t{len[1]} << 8 | uint64_t{len[2]} << 16 | uint64_t{len[3]} << 24;
  if (footer > size - kMinFileBytes)
    fail(concat("footer length ", footer, " points before the start of the data (the file has ", size,
                " bytes)"));
  footer_start = size - kMagicBytes - 4 - static_cast<size_t>(footer);
  try {
    meta = decode_file_metadata(map + footer_start, static_cast<size_t>(footer));
  } catch (const FormatError& e) {
    fail(e.what());
  }
  read_schema();

  int64_t total = 0;
  for (size_t g = 0; g < meta.row_groups.size(); ++g) {
    const RowGroup& rg = meta.row_groups[g];
    if (rg.columns.size() != leaves)
      fail(concat("row group ", g, " has ", rg.columns.size(), " column chunks, the schema has ", leaves,
                  " columns"));
    first_row.push_back(total);
    if (rg.num_rows > INT64_MAX - total) fail("row counts of the row groups overflow");
    total += rg.num_rows;
  }
  if (total != meta.num_rows)
    fail(concat("the row groups hold ", total, " rows, the footer says ", meta.num_rows));
  if (meta.row_groups.size() > static_cast<size_t>(INT32_MAX)) fail("too many row groups");
}

void ParquetFile::Impl::read_schema() {
  // schema is the tree flattened depth first: the root, then each child with its subtree.
  const auto& s = meta.schema;
  if (s[0].num_children < 0) fail("negative num_children in the schema root");
  size_t i = 1;
  for (int32_t c = 0; c < s[0].num_children; ++c) {
    if (i >= s.size()) fail(concat("schema lists ", s.size(), " elements, fewer than its root's children"));
    const SchemaElement& e = s[i];
    if (e.num_children < 0) fail(concat("negative num_children in schema element '", e.name, "'"));
    if (e.num_children > 0 || e.repetition == kRepeated) {
      nested.insert(e.name);
      // Count the subtree's leaves without recursing (a corrupt schema could nest deeply).
      int64_t pending = 1;
      while (pending > 0) {
        if (i >= s.size()) fail(concat("schema ends inside the group '", e.name, "'"));
        if (s[i].num_children < 0) fail(concat("negative num_children in schema element '", s[i].name, "'"));
        pending += s[i].num_children - 1;
        if (s[i].num_children == 0) ++leaves;
        ++i;
      }
      continue;
    }
    if (e.type < 0) fail(concat("schema leaf '", e.name, "' has no physical type"));
    for (const Column& other : columns)
      if (other.name == e.name) fail(concat("two columns are named '", e.name, "'"));
    columns.push_back({e.name, leaves, e.type, e.repetition == kOptional});
    ++leaves;
    ++i;
  }
  if (i != s.size()) fail(concat("schema has ", s.size() - i, " elements outside its root"));
}

ParquetFile::ParquetFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->open();
}

ParquetFile::~ParquetFile() = default;
ParquetFile::ParquetFile(ParquetFile&&) noexcept = default;
ParquetFile& ParquetFile::operator=(ParquetFile&&) noexcept = default;

const std::string& ParquetFile::path() const { return impl_->path; }
int64_t ParquetFile::num_rows() const { return impl_->meta.num_rows; }
int ParquetFile::num_row_groups() const { return static_cast<int>(impl_->meta.row_groups.size()); }

int64_t ParquetFile::row_group_num_rows(int row_group) const {
  FT_USER_CHECK(row_group >= 0 && row_group < num_row_groups(), impl_->path, ": row group ", row_group,
                " out of range (the file has ", num_row_groups(), ")");
  return impl_->meta.row_groups[static_cast<size_t>(row_group)].num_rows;
}

std::vector<std::string> ParquetFile::column_names() const {
  std::vector<std::string> names;
  for (const Column& c : impl_->columns) names.push_back(c.name);
  return names;
}

void ParquetFile::read_string_column(int row_group, const std::string& column,
                                     const std::function<void(int64_t, std::string_view, bool)>& fn) const {
  const Impl& f = *impl_;
  FT_USER_CHECK(row_group >= 0 && row_group < num_row_groups(), f.path, ": row group ", row_group,
                " out of range (the file has ", num_row_groups(), ")");
  const Column* col = nullptr;
  for (const Column& c : f.columns)
    if (c.name == column) col = &c;
  if (col == nullptr) {
    if (f.nested.count(column)) f.fail(concat("nested columns are not supported: ", column));
    std::string names;
    for (const Column& c : f.columns) names += (names.empty() ? "" : ", ") + c.name;
    f.fail(concat("no column '", column, "' (columns: ", names.empty() ? "none" : names, ")"));
  }
  const std::string where = concat("row group ", row_group, ", column '", column, "'");
  if (col->type != kByteArray)
    f.fail(concat(where, ": physical type ", type_name(col->type),
                  " cannot be read as strings (only BYTE_ARRAY columns can)"));
  const RowGroup& rg = f.meta.row_groups[static_cast<size_t>(row_group)];
  const ColumnChunk& chunk = rg.columns[col->leaf];
  if (chunk.has_file_path) f.fail(concat(where, ": column chunks stored in other files are not supported"));
  if (!chunk.has_meta_data) f.fail(concat(where, ": the column chunk has no ColumnMetaData"));
  const ColumnMetaData& m = chunk.meta;
  if (m.type != col->type)
    f.fail(concat(where, ": the chunk's type ", type_name(m.type), " differs from the schema's ",
                  type_name(col->type)));
  if (m.path_in_schema.size() != 1 || m.path_in_schema[0] != column)
    f.fail(concat(where, ": the chunk's path_in_schema does not name the column"));
  if (m.num_values != rg.num_rows)
    f.fail(concat(where, ": the chunk holds ", m.num_values, " values for ", rg.num_rows, " rows"));

  // The chunk starts at its dictionary page when it has one (some writers leave the
  // dictionary offset 0 to mean none; the data page offset then holds the first page).
  uint64_t start = static_cast<uint64_t>(m.data_page_offset);
  if (m.dictionary_page_offset > 0 && static_cast<uint64_t>(m.dictionary_page_offset) < start)
    start = static_cast<uint64_t>(m.dictionary_page_offset);
  const uint64_t end = start + static_cast<uint64_t>(m.total_compressed_size);
  if (start < kMagicBytes || end < start || end > f.footer_start)
    f.fail(concat(where, ": column chunk [", start, ", ", end, ") lies outside the data section [4, ",
                  f.footer_start, ")"));

  Dictionary dict;
  PageScratch scratch;
  int64_t done = 0;
  uint64_t pos = start;
  for (int page = 0; done < m.num_values; ++page) {
    const uint64_t page_pos = pos;
    try {
      if (pos >= end)
        throw FormatError(concat("the column chunk ends after ", done, " of its ", m.num_values, " values"));
      size_t header_bytes = 0;
      const PageHeader h = decode_page_header(f.map + pos, static_cast<size_t>(end - pos), &header_bytes);
      pos += header_bytes;
      if (static_cast<uint64_t>(h.compressed_page_size) > end - pos)
        throw FormatError(concat("page of ", h.compressed_page_size, " bytes runs past the column chunk's end"));
      const uint8_t* data = f.map + pos;
      pos += static_cast<uint64_t>(h.compressed_page_size);
      if (h.has_crc && page_crc(data, static_cast<size_t>(h.compressed_page_size)) != h.crc)
        throw FormatError("page CRC mismatch (the page's bytes are corrupt)");
      switch (h.type) {
        case kDictionaryPage:
          if (dict.present || done > 0) throw FormatError("a dictionary page after the chunk's first page");
          decode_dictionary_page(h, data, m.codec, dict);
          break;
        case kDataPage:
        case kDataPageV2:
          done += decode_data_page(h, data, m.codec, col->optional, dict, scratch, f.first_row[row_group] + done,
                                   m.num_values - done, fn);
          break;
        case kIndexPage: break;  // nothing of the values' in it
        default: throw FormatError(concat("unknown page type ", h.type));
      }
    } catch (const FormatError& e) {
      f.fail(concat(where, ", page ", page, " at byte ", page_pos, ": ", e.what()));
    }
  }
}

}  // namespace ft
