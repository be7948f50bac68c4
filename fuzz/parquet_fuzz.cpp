// libFuzzer target: the Parquet reader on arbitrary bytes. A malformed file must be refused
// with ft::UserError; anything else (a crash, a sanitizer report, another exception) is a
// bug. A file that opens is read to the end: every string column of every row group.
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "data/parquet.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ft::fuzz::write_input("parquet", data, size);
  try {
    ft::ParquetFile file(path);
    uint64_t sum = 0;
    for (const std::string& column : file.column_names())
      for (int g = 0; g < file.num_row_groups(); ++g)
        file.read_string_column(g, column, [&](int64_t row, std::string_view v, bool is_null) {
          sum += static_cast<uint64_t>(row) + v.size() + (v.empty() ? 0 : static_cast<uint8_t>(v.back())) + is_null;
        });
    if (sum == 0xffffffffffffffffull) std::abort();  // keeps the reads
  } catch (const ft::UserError&) {
  }
  return 0;
}
