// The Parquet reader (data/parquet.h) against files of tests/data/parquet_test_writer.h: every
// page layout, encoding and codec read back exactly; and corrupt files (truncated, flipped
// bytes, targeted page corruptions) refused with a UserError, never a crash.
#include "data/parquet.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "data/parquet_test_writer.h"
#include "test_util.h"

namespace ft {
namespace {

using test::expect_user_error;
using test::TempDir;
using test::pq::Page;
using test::pq::TestColumn;
using test::pq::Values;
using test::pq::WriteOptions;
using test::pq::write_parquet;
using Rows = std::vector<std::optional<std::string>>;

// Prompts with repeats (so dictionaries help), UTF-8, empty strings and nulls (when allowed).
Rows make_rows(size_t n, bool nulls, uint32_t seed) {
  static const char* const words[] = {"你好，世界", "", "prompt", "a longer response with spaces", "ß∂ƒ©˙∆", "x"};
  std::mt19937 rng(seed);
  Rows r;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t k = rng() % 10;
    if (nulls && (k == 0 || (i >= 40 && i < 60))) {  // also a run of nulls (an RLE run)
      r.push_back(std::nullopt);
    } else if (k < 7) {
      r.push_back(std::string(words[k % 6]));
    } else {
      r.push_back("row " + std::to_string(i) + " 文本");
    }
  }
  return r;
}

// Reads every row group of one column, checking the row indexes come in order.
Rows read_all(const ParquetFile& f, const std::string& column) {
  Rows out;
  for (int g = 0; g < f.num_row_groups(); ++g)
    f.read_string_column(g, column, [&](int64_t row, std::string_view v, bool is_null) {
      EXPECT_EQ(row, static_cast<int64_t>(out.size()));
      out.push_back(is_null ? std::nullopt : std::optional<std::string>(std::string(v)));
    });
  return out;
}

const char* codec_label(int c) {
  return c == 0 ? "uncompressed" : c == 1 ? "snappy" : c == 2 ? "gzip" : "zstd";
}

TEST(Parquet, RoundTripEveryLayoutEncodingAndCodec) {
  TempDir dir;
  const std::string path = dir.file("t.parquet");
  for (int codec : {0, 1, 2, 6})
    for (Values v : {Values::kPlain, Values::kDictionary, Values::kDictionaryThenPlain, Values::kDeltaLength})
      for (bool v2 : {false, true})
        for (bool optional : {false, true}) {
          SCOPED_TRACE(testing::Message() << codec_label(codec) << " values " << static_cast<int>(v) << " v2 " << v2
                                          << " optional " << optional);
          WriteOptions o;
          o.codec = codec;
          o.values = v;
          o.v2 = v2;
          o.optional = optional;
          o.rows_per_page = 97;
          o.rows_per_group = 300;
          o.crc = codec == 0;
          const Rows prompt = make_rows(700, optional, 1), response = make_rows(700, optional, 2);
          test::write_bytes(path, write_parquet({{"prompt", prompt}, {"response", response}}, o));
          ParquetFile f(path);
          EXPECT_EQ(f.num_rows(), 700);
          EXPECT_EQ(f.num_row_groups(), 3);
          EXPECT_EQ(f.column_names(), (std::vector<std::string>{"prompt", "response"}));
          EXPECT_EQ(read_all(f, "prompt"), prompt);
          EXPECT_EQ(read_all(f, "response"), response);
        }
}

TEST(Parquet, DictionaryFallsBackToPlainMidChunk) {
  TempDir dir;
  WriteOptions o;
  o.values = Values::kDictionaryThenPlain;
  o.rows_per_page = 50;
  o.dictionary_data_pages = 3;
  o.optional = true;
  o.plain_dictionary = true;  // also the v1-era PLAIN_DICTIONARY label
  const Rows rows = make_rows(400, true, 3);
  test::write_bytes(dir.file("f.parquet"), write_parquet({{"text", rows}}, o));
  ParquetFile f(dir.file("f.parquet"));
  EXPECT_EQ(read_all(f, "text"), rows);
}

TEST(Parquet, LongStringsOverOneMiB) {
  TempDir dir;
  std::string big(1536 * 1024, 'a');
  for (size_t i = 0; i < big.size(); i += 7) big[i] = static_cast<char>('a' + i % 26);
  const Rows rows = {big, std::string("短"), std::string(), big + "尾"};
  for (int codec : {0, 1, 2, 6})
    for (Values v : {Values::kPlain, Values::kDeltaLength, Values::kDictionary}) {
      SCOPED_TRACE(codec_label(codec));
      WriteOptions o;
      o.codec = codec;
      o.values = v;
      o.rows_per_page = 2;
      test::write_bytes(dir.file("l.parquet"), write_parquet({{"s", rows}}, o));
      EXPECT_EQ(read_all(ParquetFile(dir.file("l.parquet")), "s"), rows);
    }
}

TEST(Parquet, AllNullPagesAndEmptyFile) {
  TempDir dir;
  for (Values v : {Values::kPlain, Values::kDictionary, Values::kDeltaLength})
    for (bool v2 : {false, true}) {
      WriteOptions o;
      o.values = v;
      o.v2 = v2;
      o.optional = true;
      o.rows_per_page = 10;
      Rows rows(35, std::nullopt);
      rows[22] = "only one";
      test::write_bytes(dir.file("n.parquet"), write_parquet({{"s", rows}}, o));
      EXPECT_EQ(read_all(ParquetFile(dir.file("n.parquet")), "s"), rows);
    }
  test::write_bytes(dir.file("e.parquet"), write_parquet({{"s", {}}}, WriteOptions{}));
  ParquetFile e(dir.file("e.parquet"));
  EXPECT_EQ(e.num_rows(), 0);
  EXPECT_TRUE(read_all(e, "s").empty());
}

TEST(Parquet, RowIndexesCountAcrossRowGroups) {
  TempDir dir;
  WriteOptions o;
  o.rows_per_group = 64;
  o.rows_per_page = 16;
  const Rows rows = make_rows(200, false, 4);
  test::write_bytes(dir.file("g.parquet"), write_parquet({{"a", rows}}, o));
  ParquetFile f(dir.file("g.parquet"));
  ASSERT_EQ(f.num_row_groups(), 4);
  EXPECT_EQ(f.row_group_num_rows(3), 8);
  std::vector<int64_t> idx;
  f.read_string_column(2, "a", [&](int64_t row, std::string_view v, bool) {
    EXPECT_EQ(std::optional<std::string>(std::string(v)), rows[static_cast<size_t>(row)]);
    idx.push_back(row);
  });
  ASSERT_EQ(idx.size(), 64u);
  EXPECT_EQ(idx.front(), 128);
  EXPECT_EQ(idx.back(), 191);
}

TEST(Parquet, RefusesWhatItDoesNotSupport) {
  TempDir dir;
  const std::string p = dir.file("u.parquet");
  const Rows rows = make_rows(20, false, 5);
  WriteOptions nested;
  nested.nested_extra = true;
  test::write_bytes(p, write_parquet({{"prompt", rows}}, nested));
  {
    ParquetFile f(p);
    EXPECT_EQ(f.column_names(), std::vector<std::string>{"prompt"});
    EXPECT_EQ(read_all(f, "prompt"), rows);  // the flat column beside a nested one still reads
    expect_user_error([&] { f.read_string_column(0, "meta", [](int64_t, std::string_view, bool) {}); },
                      {p, "nested columns are not supported: meta"});
    expect_user_error([&] { f.read_string_column(0, "nope", [](int64_t, std::string_view, bool) {}); },
                      {p, "no column 'nope'", "prompt"});
    expect_user_error([&] { f.read_string_column(1, "prompt", [](int64_t, std::string_view, bool) {}); },
                      {p, "row group 1 out of range"});
  }
  WriteOptions int64;
  int64.physical_type = 2;
  test::write_bytes(p, write_parquet({{"n", rows}}, int64));
  expect_user_error([&] { read_all(ParquetFile(p), "n"); }, {p, "INT64", "BYTE_ARRAY"});
  for (int codec : {3, 4, 5, 7}) {
    WriteOptions o;
    o.codec = codec;
    test::write_bytes(p, write_parquet({{"s", rows}}, o));
    expect_user_error([&] { read_all(ParquetFile(p), "s"); },
                      {p, "row group 0, column 's'", codec == 5 ? "LZ4" : codec == 3 ? "LZO" : codec == 4 ? "BROTLI" : "LZ4_RAW",
                       "not supported"});
  }
  WriteOptions delta_byte_array;
  delta_byte_array.edit_page = [](Page& pg, int) { pg.encoding = 7; };
  test::write_bytes(p, write_parquet({{"s", rows}}, delta_byte_array));
  expect_user_error([&] { read_all(ParquetFile(p), "s"); }, {p, "DELTA_BYTE_ARRAY", "not supported"});
}

// Writes a file with the hook, expects reading it to fail with every needle in the message.
void expect_page_error(const std::function<void(Page&, int)>& edit, WriteOptions o, std::initializer_list<std::string> needles) {
  TempDir dir;
  const std::string p = dir.file("c.parquet");
  o.edit_page = edit;
  test::write_bytes(p, write_parquet({{"s", make_rows(100, o.optional, 6)}}, o));
  std::vector<std::string> all{p, "row group 0, column 's', page"};
  all.insert(all.end(), needles);
  try {
    read_all(ParquetFile(p), "s");
    ADD_FAILURE() << "expected a UserError";
  } catch (const UserError& e) {
    for (const auto& n : all) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << "\nmissing: " << n;
  }
}

TEST(Parquet, TargetedPageCorruptions) {
  WriteOptions dict;
  dict.values = Values::kDictionary;
  // The dictionary page loses its last value: some index points past it.
  expect_page_error([](Page& p, int i) {
    if (p.type != 2) return;
    std::vector<std::string> v;
    const std::string& s = p.values;
    for (size_t k = 0; k + 4 <= s.size();) {
      uint32_t n = static_cast<uint8_t>(s[k]) | static_cast<uint8_t>(s[k + 1]) << 8 | static_cast<uint8_t>(s[k + 2]) << 16;
      v.push_back(s.substr(k + 4, n));
      k += 4 + n;
    }
    v.pop_back();
    p.values = test::pq::detail::plain(v);
    p.num_values = static_cast<int32_t>(v.size());
  }, dict, {"dictionary index", "out of range"});
  WriteOptions opt;
  opt.optional = true;
  opt.v2 = true;
  // Definition levels cut short: fewer levels than values.
  expect_page_error([](Page& p, int) { p.levels.resize(1); }, opt, {"definition levels"});
  // A header's uncompressed size that the data does not have (each codec).
  for (int codec : {0, 1, 2, 6}) {
    WriteOptions o;
    o.codec = codec;
    expect_page_error([](Page& p, int) { p.uncompressed_size_delta = 3; }, o, {"bytes"});
  }
  // A page claiming more values than the chunk has left.
  expect_page_error([](Page& p, int) { p.num_values += 1; }, WriteOptions{}, {"remain in the column chunk"});
  // PLAIN values cut: a length runs past the page.
  expect_page_error([](Page& p, int) { p.values.resize(p.values.size() - 3); }, WriteOptions{}, {"past the end of the page"});
  // Dictionary indices claim a bit-packed run whose bytes are not there.
  expect_page_error([](Page& p, int) {
    if (p.type != 2) p.values = std::string("\x05\xff\x01", 3);
  }, dict, {"dictionary indices"});
  // DELTA_LENGTH_BYTE_ARRAY lengths adding up past the page.
  WriteOptions delta;
  delta.values = Values::kDeltaLength;
  expect_page_error([](Page& p, int) { p.values.resize(p.values.size() - 1); }, delta, {"DELTA_LENGTH_BYTE_ARRAY"});
  // A data page that refers to a dictionary the chunk does not have.
  expect_page_error([](Page& p, int) { if (p.type == 0) p.encoding = 8; }, WriteOptions{}, {"no dictionary page"});
  // V2 null count disagreeing with the definition levels.
  expect_page_error([](Page& p, int) { p.num_nulls += 1; }, opt, {"nulls"});
}

// Replaces the file by unlinking it first: ext4 flushes a file truncated and rewritten in
// place (auto_da_alloc), which made thousands of rewrites take seconds.
void rewrite(const std::string& path, const std::string& bytes) {
  std::filesystem::remove(path);
  test::write_bytes(path, bytes);
}

// Opens and reads every column; a UserError is fine, anything else fails the test.
bool reads_or_refuses(const std::string& path, const std::string& what) {
  try {
    ParquetFile f(path);
    for (const auto& c : f.column_names())
      for (int g = 0; g < f.num_row_groups(); ++g) f.read_string_column(g, c, [](int64_t, std::string_view, bool) {});
    return true;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << what << ": " << e.what();
    return false;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": not a UserError: " << e.what();
    return false;
  }
}

std::vector<std::pair<std::string, WriteOptions>> corruption_files() {
  std::vector<std::pair<std::string, WriteOptions>> v;
  auto add = [&](const char* name, Values values, bool v2, bool optional, int codec, bool crc) {
    WriteOptions o;
    o.values = values;
    o.v2 = v2;
    o.optional = optional;
    o.codec = codec;
    o.crc = crc;
    o.rows_per_page = 9;
    o.rows_per_group = 20;
    v.push_back({name, o});
  };
  add("plain v1 optional", Values::kPlain, false, true, 0, false);
  add("dict v2 optional", Values::kDictionary, true, true, 0, false);
  add("dict then plain", Values::kDictionaryThenPlain, false, false, 0, false);
  add("delta v2 optional", Values::kDeltaLength, true, true, 0, false);
  add("snappy dict", Values::kDictionary, false, true, 1, false);
  add("zstd delta", Values::kDeltaLength, false, false, 6, false);
  add("gzip plain v2", Values::kPlain, true, true, 2, false);
  add("plain crc", Values::kPlain, false, true, 0, true);
  return v;
}

TEST(Parquet, TruncatedFilesAreRefused) {
  TempDir dir;
  const std::string p = dir.file("t.parquet");
  for (const auto& [name, o] : corruption_files()) {
    const std::string good = write_parquet({{"prompt", make_rows(45, o.optional, 7)}, {"r", make_rows(45, o.optional, 8)}}, o);
    std::vector<size_t> sizes;
    for (size_t k = 0; k < 16; ++k) sizes.push_back(good.size() * k / 16);
    for (size_t k = 1; k <= 8; ++k) sizes.push_back(good.size() - k);
    for (size_t n : sizes) {
      rewrite(p, good.substr(0, n));
      EXPECT_FALSE(reads_or_refuses(p, std::string(name) + " truncated to " + std::to_string(n)));
    }
  }
}

TEST(Parquet, WrongMagicAndFooterLength) {
  TempDir dir;
  const std::string p = dir.file("m.parquet");
  const std::string good = write_parquet({{"s", make_rows(30, false, 9)}}, WriteOptions{});
  std::string bad = good;
  bad[0] = 'X';
  test::write_bytes(p, bad);
  expect_user_error([&] { ParquetFile f(p); }, {p, "no 'PAR1' magic at the start"});
  bad = good;
  bad[bad.size() - 1] = 'X';
  test::write_bytes(p, bad);
  expect_user_error([&] { ParquetFile f(p); }, {p, "no 'PAR1' magic at the end"});
  bad = good;
  bad[bad.size() - 5] = '\x7f';  // the length's top byte
  test::write_bytes(p, bad);
  expect_user_error([&] { ParquetFile f(p); }, {p, "footer length"});
  bad = good;
  bad.replace(bad.size() - 4, 4, "PARE");
  test::write_bytes(p, bad);
  expect_user_error([&] { ParquetFile f(p); }, {p, "encrypted"});
  test::write_bytes(p, "PAR1");
  expect_user_error([&] { ParquetFile f(p); }, {p, "too small"});
  expect_user_error([&] { ParquetFile f(dir.str()); }, {dir.str(), "a folder"});
  expect_user_error([&] { ParquetFile f(dir.file("missing.parquet")); }, {"missing.parquet", "cannot open"});
  // A footer whose field has the wrong Thrift type: FileMetaData.schema (a list) as a string.
  bad = good;
  const size_t footer_len = static_cast<uint8_t>(good[good.size() - 8]) | static_cast<uint8_t>(good[good.size() - 7]) << 8;
  const size_t footer = good.size() - 8 - footer_len;
  ASSERT_EQ(static_cast<uint8_t>(bad[footer + 2]), 0x19);  // after version = 1: field 2, a list
  bad[footer + 2] = 0x18;                                  // ... now said to be binary
  test::write_bytes(p, bad);
  expect_user_error([&] { ParquetFile f(p); }, {p, "footer", "FileMetaData.schema", "binary"});
}

TEST(Parquet, CrcCatchesFlippedDataBytes) {
  TempDir dir;
  const std::string p = dir.file("c.parquet");
  WriteOptions o;
  o.crc = true;
  o.rows_per_page = 1000;
  const std::string good = write_parquet({{"s", make_rows(30, false, 10)}}, o);
  // The last bytes of the single page are string data; a flip there changes no structure.
  const size_t footer_len = static_cast<uint8_t>(good[good.size() - 8]) | static_cast<uint8_t>(good[good.size() - 7]) << 8;
  std::string bad = good;
  bad[good.size() - 8 - footer_len - 2] ^= 0x20;
  test::write_bytes(p, bad);
  expect_user_error([&] { read_all(ParquetFile(p), "s"); }, {p, "page 0", "CRC"});
}

// Every byte of each file flipped (two ways), one at a time: refused or read, never a crash.
TEST(Parquet, EveryFlippedByteReadsOrIsRefused) {
  TempDir dir;
  const std::string p = dir.file("f.parquet");
  for (const auto& [name, o] : corruption_files()) {
    const std::string good = write_parquet({{"prompt", make_rows(25, o.optional, 11)}}, o);
    int refused = 0, total = 0;
    for (size_t i = 0; i < good.size(); ++i)
      for (int mask : {0x01, 0xff}) {
        std::string bad = good;
        bad[i] = static_cast<char>(bad[i] ^ mask);
        rewrite(p, bad);
        refused += !reads_or_refuses(p, std::string(name) + " byte " + std::to_string(i));
        ++total;
      }
    EXPECT_GT(refused, 0) << name;
    std::printf("[ info ] %s: %d of %d flips refused\n", name.c_str(), refused, total);
  }
}

// Files written by pyarrow (scripts/make_parquet_fixtures.py, run where pyarrow is) against
// the values it recorded; skipped until the fixtures are there.
TEST(Parquet, PyarrowFixtures) {
  const std::filesystem::path dir = std::filesystem::path(FITTRAIN_SOURCE_DIR) / "tests/fixtures/parquet";
  if (!std::filesystem::exists(dir / "expected.json")) GTEST_SKIP() << "no " << dir << "/expected.json";
  const auto all = nlohmann::json::parse(test::read_bytes((dir / "expected.json").string()));
  // {"files": {name: {..., "columns": {column: {"ref": key}}}}, "values": {key: [values]}}
  const auto& expected = all.at("files");
  ASSERT_FALSE(expected.empty());
  for (const auto& [name, e] : expected.items()) {
    SCOPED_TRACE(name);
    ParquetFile f((dir / name).string());
    EXPECT_EQ(f.num_rows(), e["num_rows"].get<int64_t>());
    EXPECT_EQ(f.num_row_groups(), e["num_row_groups"].get<int>());
    std::vector<std::string> names;
    for (const auto& [column, ref] : e["columns"].items()) {
      names.push_back(column);
      const auto& values = all.at("values").at(ref.at("ref").get<std::string>());
      const Rows got = read_all(f, column);
      ASSERT_EQ(got.size(), values.size()) << column;
      for (size_t i = 0; i < got.size(); ++i) {
        const auto want = values[i].is_null() ? std::nullopt : std::optional<std::string>(values[i].get<std::string>());
        ASSERT_EQ(got[i], want) << column << " row " << i;
      }
    }
    auto listed = f.column_names();
    std::sort(listed.begin(), listed.end());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(listed, names);
  }
}

}  // namespace
}  // namespace ft
