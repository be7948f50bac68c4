// Safetensors: round trip of every dtype, the writer's layout (padded header, order), and every
// validation error naming the file and the tensor or problem.
#include "train/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli/cli_util.h"
#include "core/error.h"
#include "core/half.h"

namespace ft {
namespace {

// A file in this process's folder (made once, removed when the process exits: cli_util.h).
std::string temp_path(const std::string& name) {
  static const std::string d = ::ft::testing::temp_dir("safetensors");
  return d + "/" + name;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A file from a header text and a buffer, byte for byte as given (for the error cases).
std::string raw_file(const std::string& name, const std::string& header, const std::string& buffer,
                     int64_t length_field = -1) {
  const std::string path = temp_path(name);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const uint64_t n = length_field >= 0 ? static_cast<uint64_t>(length_field) : header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << buffer;
  return path;
}

// The UserError message of opening `path` ("" when it opens).
std::string open_error(const std::string& path) {
  try {
    SafetensorsReader r(path);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

template <class T>
SafetensorsOut tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                      const std::vector<T>& v) {
  return SafetensorsOut{name, dtype, std::move(shape),
                        [&v](char* dst) { std::memcpy(dst, v.data(), v.size() * sizeof(T)); }};
}

TEST(Safetensors, RoundTripEveryDtype) {
  const std::vector<float> f32 = {1.5f, -2.25f, 3e-8f, 1e30f, 0.0f, -0.0f};
  const std::vector<double> f64 = {1.0 / 3.0, -7.5};
  std::vector<uint16_t> f16, bf16;
  for (float x : {0.5f, -1.25f, 65504.0f, 6.1e-5f}) f16.push_back(float_to_fp16(x));
  for (float x : {0.5f, -1.25f, 3.0e38f}) bf16.push_back(float_to_bf16(x));
  const std::vector<int32_t> i32 = {-1, 2, 2147483647};
  const std::vector<int64_t> i64 = {-9000000000LL};
  const std::vector<uint8_t> u8 = {0, 7, 255, 1, 2};
  const std::vector<int8_t> i8 = {-128, 127};
  const std::vector<uint8_t> boolean = {1, 0, 1};
  const std::vector<uint16_t> u16 = {65535};
  const std::vector<float> empty;
  const std::vector<SafetensorsOut> out = {
      tensor("w.f32", "F32", {2, 3}, f32),      tensor("w.f64", "F64", {2}, f64),
      tensor("w.f16", "F16", {4}, f16),         tensor("w.bf16", "BF16", {1, 3}, bf16),
      tensor("a.i32", "I32", {3}, i32),         tensor("a.i64", "I64", {1, 1}, i64),
      tensor("a.u8", "U8", {5}, u8),            tensor("a.i8", "I8", {2}, i8),
      tensor("a.bool", "BOOL", {3}, boolean),   tensor("a.u16", "U16", {}, u16),
      tensor("z.empty", "F32", {0, 4}, empty),
  };
  const std::string path = temp_path("round_trip.safetensors");
  write_safetensors(path, out, {{"format", "pt"}, {"who", "fittrain"}});
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  // The header is padded with spaces to a multiple of 8 and the data follows it.
  const std::string bytes = slurp(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));

  SafetensorsReader r(path);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.metadata().at("who"), "fittrain");
  ASSERT_EQ(r.tensors().size(), out.size());
  for (size_t i = 1; i < r.tensors().size(); ++i) EXPECT_LT(r.tensors()[i - 1].name, r.tensors()[i].name);
  auto same = [&](const std::string& name, const auto& v, const std::string& dtype, std::vector<int64_t> shape) {
    const SafetensorsInfo* t = r.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, dtype);
    EXPECT_EQ(t->shape, shape);
    // Aligned to the element size (larger elements first in the buffer).
    EXPECT_EQ(t->begin % safetensors_dtype_size(dtype), 0u) << name;
    const std::vector<char> got = r.read_bytes(name);
    ASSERT_EQ(got.size(), v.size() * sizeof(v[0])) << name;
    EXPECT_EQ(std::memcmp(got.data(), v.data(), got.size()), 0) << name;
  };
  same("w.f32", f32, "F32", {2, 3});
  same("w.f64", f64, "F64", {2});
  same("w.f16", f16, "F16", {4});
  same("w.bf16", bf16, "BF16", {1, 3});
  same("a.i32", i32, "I32", {3});
  same("a.i64", i64, "I64", {1, 1});
  same("a.u8", u8, "U8", {5});
  same("a.i8", i8, "I8", {2});
  same("a.bool", boolean, "BOOL", {3});
  same("a.u16", u16, "U16", {});
  same("z.empty", empty, "F32", {0, 4});
  EXPECT_EQ(r.find("a.i64")->begin, 0u);  // 8-byte elements first, then by name
  EXPECT_EQ(r.find("w.f64")->begin, 8u);
  // Conversions to fp32.
  EXPECT_EQ(r.read_f32("w.f32"), f32);
  EXPECT_EQ(r.read_f32("w.f64"), (std::vector<float>{static_cast<float>(1.0 / 3.0), -7.5f}));
  EXPECT_EQ(r.read_f32("w.f16"), (std::vector<float>{0.5f, -1.25f, 65504.0f, fp16_to_float(f16[3])}));
  EXPECT_EQ(r.read_f32("w.bf16"), (std::vector<float>{0.5f, -1.25f, bf16_to_float(bf16[2])}));
  try {
    r.read_f32("a.i32");
    ADD_FAILURE() << "I32 read as weights";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'a.i32' has dtype I32"), std::string::npos) << e.what();
  }

  // Rewriting replaces the file (atomically: no tmp left behind).
  write_safetensors(path, std::vector<SafetensorsOut>{tensor("only", "F32", {1}, f32)}, {});
  SafetensorsReader again(path);
  EXPECT_EQ(again.tensors().size(), 1u);
  EXPECT_TRUE(again.metadata().empty());
}

struct BadCase {
  const char* name;
  std::string header, buffer;
  int64_t length_field;
  std::vector<std::string> words;  // besides the file's path
};

TEST(Safetensors, EveryBadFileIsRefusedNamingFileAndProblem) {
  const std::string f4(16, '\0');
  const std::vector<BadCase> cases = {
      {"header_length_past_eof", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "xxxx", 100000,
       {"header length 100000", "past the end"}},
      {"bad_json", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", "xxxx", -1, {"not valid JSON"}},
      {"not_object", R"([1,2])", "", -1, {"not a JSON object"}},
      {"unknown_dtype", R"({"w":{"dtype":"F13","shape":[4],"data_offsets":[0,16]}})", f4, -1,
       {"'w'", "unknown dtype 'F13'"}},
      {"shape_offset_mismatch", R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", f4, -1,
       {"'w'", "[2, 3]", "needs 24 bytes", "hold 16"}},
      {"offsets_reversed", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", f4, -1,
       {"'w'", "end before they begin"}},
      {"offset_past_buffer", R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", f4, -1,
       {"'w'", "past its 16 bytes"}},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       f4, -1, {"'b'", "overlaps tensor 'a'"}},
      {"gap",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       f4, -1, {"gap of 4 bytes before tensor 'b'"}},
      {"trailing_bytes", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f4, -1,
       {"8 bytes after the last tensor 'a'", "belong to no tensor"}},
      {"bad_shape", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "xxxx", -1,
       {"'a'", "bad dimension -1"}},
      {"no_offsets", R"({"a":{"dtype":"F32","shape":[1]}})", "xxxx", -1, {"'a'", "data_offsets"}},
      {"bad_metadata", R"({"__metadata__":{"k":1}})", "", -1, {"__metadata__ 'k' is not a string"}},
  };
  for (const BadCase& c : cases) {
    const std::string path = raw_file(std::string(c.name) + ".safetensors", c.header, c.buffer, c.length_field);
    const std::string msg = open_error(path);
    EXPECT_NE(msg.find(path), std::string::npos) << c.name << ": " << msg;
    for (const std::string& w : c.words) EXPECT_NE(msg.find(w), std::string::npos) << c.name << ": " << msg;
  }
  // Shorter than the 8-byte length itself.
  const std::string tiny = temp_path("truncated_header.safetensors");
  std::ofstream(tiny, std::ios::binary) << "abc";
  const std::string msg = open_error(tiny);
  EXPECT_NE(msg.find(tiny), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  // A valid file cut short inside its data: the last tensor runs past the end.
  const std::vector<float> v(8, 1.0f);
  const std::string whole = temp_path("cut.safetensors");
  write_safetensors(whole, std::vector<SafetensorsOut>{tensor("a", "F32", {8}, v)}, {});
  std::filesystem::resize_file(whole, std::filesystem::file_size(whole) - 4);
  const std::string cut = open_error(whole);
  EXPECT_NE(cut.find("'a'"), std::string::npos) << cut;
  EXPECT_NE(cut.find(whole), std::string::npos) << cut;
}

}  // namespace
}  // namespace ft
