// The .npy reader/writer (suite Npy) and the zip reader/writer (suite Zip): round trips,
// Fortran order, float64 and big-endian conversion, DEFLATE and zip64 members, and the error
// of every malformed input naming the file and the field.
#include "data/npy.h"

#include <gtest/gtest.h>

#include <bit>
#include <filesystem>

#include "data/zip_archive.h"
#include "test_util.h"
#include "zip_test_util.h"

namespace ft {
namespace {

using test::byte_span;
using test::expect_user_error;
using test::make_zip;
using test::npy_raw;
using test::TempDir;

std::vector<float> iota(size_t n, float scale = 1.f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * scale - 3.f;
  return v;
}

TEST(Npy, RoundTripCOrder) {
  TempDir dir;
  const std::vector<int64_t> shape = {2, 3, 4};
  const auto data = iota(24, 0.5f);
  write_npy(dir.file("a.npy"), shape, data);
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.npy.tmp")));
  const NpyArray a = load_npy(dir.file("a.npy"));
  EXPECT_EQ(a.shape, shape);
  EXPECT_EQ(a.data, data);
  const NpyHeader h = parse_npy_header(byte_span(npy_bytes(shape, data)), "x");
  EXPECT_EQ(h.data_offset % 64, 0u);  // numpy's alignment
  EXPECT_EQ(h.descr, "<f4");
  EXPECT_FALSE(h.fortran_order);
}

TEST(Npy, FortranOrderByHand) {
  // The 2 x 3 array [[0 1 2] [3 4 5]] stored column by column: 0 3 1 4 2 5.
  const std::vector<float> stored = {0, 3, 1, 4, 2, 5};
  const auto bytes = npy_raw("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", byte_span(stored));
  const NpyArray a = parse_npy(bytes, "f.npy");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.data, (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

TEST(Npy, FortranAndCGiveTheSameArray) {
  const std::vector<int64_t> shape = {3, 4, 5};
  const auto data = iota(60);
  const auto c = npy_bytes(shape, data, false), f = npy_bytes(shape, data, true);
  EXPECT_NE(c, f);
  EXPECT_TRUE(parse_npy_header(f, "f").fortran_order);
  EXPECT_EQ(parse_npy(f, "f").data, data);
  EXPECT_EQ(parse_npy(c, "c").data, data);
  // Element (1, 2, 3) sits at Fortran position 1 + 3 * (2 + 4 * 3) = 43.
  float v;
  std::memcpy(&v, f.data() + parse_npy_header(f, "f").data_offset + 43 * 4, 4);
  EXPECT_EQ(v, data[1 * 20 + 2 * 5 + 3]);
}

TEST(Npy, Float64AndBigEndianConvert) {
  const std::vector<double> d = {1.5, -2.25, 1e-3, 3.0e10};
  const NpyArray a = parse_npy(npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", byte_span(d)), "d");
  ASSERT_EQ(a.data.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(a.data[i], static_cast<float>(d[i]));
  // '>f4', Fortran order, version 2.0 header.
  std::vector<uint32_t> be;
  for (float x : {1.f, 3.f, 2.f, 4.f}) be.push_back(__builtin_bswap32(std::bit_cast<uint32_t>(x)));
  const NpyArray b = parse_npy(npy_raw("{'descr': '>f4', 'fortran_order': True, 'shape': (2, 2), }", byte_span(be), 2), "b");
  EXPECT_EQ(b.data, (std::vector<float>{1, 2, 3, 4}));
  // Float64 through one sub-array of the first axis, as NpyArrayDataset reads it.
  const std::vector<double> m = {0, 1, 2, 3, 4, 5};  // 3 x 2, C order
  const auto bytes = npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }", byte_span(m));
  const NpyHeader h = parse_npy_header(bytes, "m");
  float row[2];
  npy_copy_c_order(h, bytes.data() + h.data_offset, 2, row);
  EXPECT_EQ(row[0], 4.f);
  EXPECT_EQ(row[1], 5.f);
}

TEST(Npy, HeaderErrorsNameFileAndKey) {
  const std::vector<float> four(4, 1.f);
  auto parse = [&](const std::string& dict) { parse_npy(npy_raw(dict, byte_span(four)), "arr.npy"); };
  expect_user_error([&] { parse("{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }"); },
                    {"arr.npy", "'descr'", "'<i4'", "not supported"});
  expect_user_error([&] { parse("{'descr': '<f4', 'fortran_order': False, }"); }, {"arr.npy", "'shape' is missing"});
  expect_user_error([&] { parse("{'descr': '<f4', 'shape': (4,), }"); }, {"arr.npy", "'fortran_order' is missing"});
  expect_user_error([&] { parse("{'descr': '<f4', 'fortran_order': 0, 'shape': (4,), }"); },
                    {"arr.npy", "'fortran_order'", "True or False"});
  expect_user_error([&] { parse("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}"); },
                    {"arr.npy", "unexpected key 'x'"});
  expect_user_error([&] { parse("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,), }"); },
                    {"arr.npy", "'descr' appears twice"});
  expect_user_error([&] { parse("{'descr': '<f4', 'fortran_order': False, 'shape': (4, -1), }"); },
                    {"arr.npy", "'shape'"});
  expect_user_error([&] { parse("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }"); },
                    {"arr.npy", "16 bytes", "(5,)", "needs 20", "truncated"});
  expect_user_error([&] { parse("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"); },
                    {"arr.npy", "trailing bytes"});
  expect_user_error([&] { parse("{'descr': '<f4', 'fortran_order': False, 'shape': (4,)"); }, {"arr.npy", "expected"});
  expect_user_error([&] { parse_npy(byte_span(four), "arr.npy"); }, {"arr.npy", "not an .npy array"});
  auto v9 = npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", byte_span(four));
  v9[6] = 9;
  expect_user_error([&] { parse_npy(v9, "arr.npy"); }, {"arr.npy", "version 9.0"});
  v9[6] = 1;
  v9[8] = 0xff;  // header length past the end
  expect_user_error([&] { parse_npy(v9, "arr.npy"); }, {"arr.npy", "header truncated"});
  TempDir dir;
  expect_user_error([&] { load_npy(dir.file("none.npy")); }, {dir.file("none.npy"), "cannot open"});
}

TEST(Zip, RoundTripAndSuffix) {
  TempDir dir;
  const std::string a = "hello", b(1000, 'x');
  const std::vector<uint8_t> av(a.begin(), a.end()), bv(b.begin(), b.end());
  const ZipEntry owned[] = {{"arc/version", av}, {"arc/data/0", bv}};
  write_zip(dir.file("z.zip"), owned);
  EXPECT_FALSE(std::filesystem::exists(dir.file("z.zip.tmp")));
  const ZipArchive z = ZipArchive::open(dir.file("z.zip"));
  ASSERT_EQ(z.members().size(), 2u);
  EXPECT_EQ(z.read(*z.find("arc/version")), av);
  EXPECT_EQ(z.find_suffix("data/0")->name, "arc/data/0");
  EXPECT_EQ(z.read(*z.find_suffix("data/0")), bv);
  EXPECT_EQ(z.find("nope"), nullptr);
  EXPECT_EQ(z.find_suffix("data/1"), nullptr);
}

TEST(Zip, DeflateZip64AndComment) {
  std::vector<uint8_t> big(50000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>((i * 7) % 13);
  const auto bytes = make_zip({{"a.npy", big, true, false}, {"b.npy", big, false, true}, {"c.npy", big, true, true}},
                              "an archive comment");
  const ZipArchive z(bytes, "mem.npz");
  ASSERT_EQ(z.members().size(), 3u);
  EXPECT_EQ(z.members()[0].method, kZipDeflate);
  EXPECT_LT(z.members()[0].compressed_size, big.size() / 4);
  for (const ZipMember& m : z.members()) EXPECT_EQ(z.read(m), big) << m.name;
  EXPECT_EQ(z.members()[2].size, big.size());  // from the zip64 extra field
  // zip64 end-of-central-directory record and locator; then the locator missing.
  const auto z64 = make_zip({{"a.npy", big, true, true}, {"b", {1, 2, 3}, false, true}}, "", true);
  const ZipArchive y(z64, "z64.npz");
  ASSERT_EQ(y.members().size(), 2u);
  EXPECT_EQ(y.read(*y.find("a.npy")), big);
  EXPECT_EQ(y.read(*y.find("b")), (std::vector<uint8_t>{1, 2, 3}));
  auto no_locator = z64;
  no_locator[no_locator.size() - 22 - 20] ^= 0xff;
  expect_user_error([&] { ZipArchive(no_locator, "z64.npz"); }, {"z64.npz", "zip64 locator"});
  const auto empty = make_zip({{"e", {}, true, false}});
  const ZipArchive e(empty, "e");
  EXPECT_TRUE(e.read(e.members()[0]).empty());
}

TEST(Zip, ErrorsNameArchiveAndMember) {
  std::vector<uint8_t> data(300, 5);
  const auto good = make_zip({{"xs.npy", data, false, false}});
  {
    auto bad = good;
    bad[40] ^= 1;  // inside the member's data
    const ZipArchive z(bad, "s.npz");
    expect_user_error([&] { z.read(z.members()[0]); }, {"s.npz", "member 'xs.npy'", "CRC-32 mismatch"});
  }
  {
    auto d = make_zip({{"ys.npy", data, true, false}});
    d[37] ^= 0xff;  // inside the DEFLATE stream
    const ZipArchive z(d, "d.npz");
    expect_user_error([&] { z.read(z.members()[0]); }, {"d.npz", "member 'ys.npy'"});
  }
  expect_user_error([&] { ZipArchive(std::span(good).first(good.size() - 5), "t.npz"); },
                    {"t.npz", "end-of-central-directory"});
  expect_user_error([&] { ZipArchive(std::span(good).first(10), "t.npz"); }, {"t.npz", "too small"});
  expect_user_error([&] { ZipArchive(std::span(good).last(good.size() - 4), "t.npz"); }, {"t.npz"});
  {
    auto enc = good;
    enc[good.size() - 22 - 46 - 6 + 8] |= 1;  // central directory flags: encrypted
    expect_user_error([&] { ZipArchive(enc, "e.npz"); }, {"e.npz", "member 'xs.npy'", "encrypted"});
  }
  {
    auto m = good;
    m[good.size() - 22 - 46 - 6 + 10] = 12;  // bzip2
    expect_user_error([&] { ZipArchive(m, "m.npz"); }, {"m.npz", "member 'xs.npy'", "method 12"});
  }
  {
    auto m = good;
    m[good.size() - 22 - 46 - 6 + 42] = 7;  // local header offset
    expect_user_error([&] { ZipArchive(m, "o.npz"); }, {"o.npz", "member 'xs.npy'", "no local header"});
  }
  const auto twice = make_zip({{"a", data, false, false}, {"a", data, false, false}});
  expect_user_error([&] { ZipArchive(twice, "w.npz"); }, {"w.npz", "member 'a' appears twice"});
  TempDir dir;
  expect_user_error([&] { ZipArchive::open(dir.str(), "npz sample"); }, {dir.str(), "a folder", "npz sample"});
}

}  // namespace
}  // namespace ft
