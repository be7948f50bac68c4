// TensorBoard event files: TFRecord framing and the few protobuf fields of tensorflow.Event
// that scalars need (tensorflow/core/util/event.proto, tensorflow/core/framework/summary.proto):
//
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
#include "train/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/host_name.h"

namespace ft {

namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

// Little-endian regardless of the host: protobuf's fixed fields and TFRecord's framing are.
template <class UInt>
void put_le(std::string& out, UInt v) {
  for (size_t i = 0; i < sizeof(UInt); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_le(out, bits);
}

void put_float(std::string& out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_le(out, bits);
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// wall_time and step, the head of every Event. A negative step is a 10-byte varint of its
// two's complement, as protobuf encodes int64.
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  if (step != 0) {  // proto3: a zero field may be left out
    put_key(e, 2, kVarint);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

}  // namespace

uint32_t tfrecord_masked_crc(const void* data, size_t bytes) {
  const uint32_t crc = crc32c(data, bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string encode_file_version_event(double wall_time, const std::string& version) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, version);
  return e;
}

std::string encode_scalars_event(const std::vector<std::pair<std::string, double>>& values, int64_t step,
                                 double wall_time) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, 1, tag);
    put_float(v, 2, static_cast<float>(value));
    put_bytes(summary, 1, v);
  }
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

std::string tfrecord_frame(const std::string& data) {
  std::string r;
  r.reserve(data.size() + 16);
  put_le(r, static_cast<uint64_t>(data.size()));
  put_le(r, tfrecord_masked_crc(r.data(), 8));
  r += data;
  put_le(r, tfrecord_masked_crc(data.data(), data.size()));
  return r;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  FT_USER_CHECK(!ec && std::filesystem::is_directory(dir), "--tensorboard: cannot create the folder ", dir,
                ec ? " (" + ec.message() + ")" : std::string(" (a file of that name is in the way)"));
  const std::string stem = (std::filesystem::path(dir) / "events.out.tfevents.").string() +
                           std::to_string(static_cast<long long>(std::time(nullptr))) + "." + host_name() + "." +
                           std::to_string(static_cast<long long>(getpid())) + ".";
  // "x": fails when the file exists, so two writers of one process never share a file.
  for (int n = 0; n < 1000 && !f_; ++n) {
    path_ = stem + std::to_string(n);
    f_ = std::fopen(path_.c_str(), "wbx");
    if (!f_ && errno != EEXIST) break;
  }
  FT_USER_CHECK(f_ != nullptr, "--tensorboard: cannot create the event file ", path_, " (", std::strerror(errno), ")");
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  write_record(encode_file_version_event(now, "brain.Event:2"));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  scalars({{tag, value}}, step, wall_time);
}

void TensorBoardWriter::scalars(const std::vector<std::pair<std::string, double>>& values, int64_t step,
                                double wall_time) {
  if (values.empty()) return;
  write_record(encode_scalars_event(values, step, wall_time));
}

void TensorBoardWriter::flush() {
  FT_USER_CHECK(std::fflush(f_) == 0, "--tensorboard: cannot write ", path_, " (", std::strerror(errno), ")");
}

void TensorBoardWriter::write_record(const std::string& data) {
  const std::string r = tfrecord_frame(data);
  FT_USER_CHECK(std::fwrite(r.data(), 1, r.size(), f_) == r.size(), "--tensorboard: cannot write ", path_, " (",
                std::strerror(errno), ")");
}

}  // namespace ft
