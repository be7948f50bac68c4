// `--tensorboard DIR`: the run's scalars as a TensorBoard event file, written without
// TensorFlow or a protobuf library.
//
// The file is what TensorBoard's own writers produce: TFRecord framing (uint64 little-endian
// length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the data) around
// serialized `tensorflow.Event` protobufs, hand-encoded here. The first record is an Event
// with file_version "brain.Event:2", which TensorBoard reads to know the format.
//
// One Event per call of scalars(): every value of one logged row (a step's train/ and
// memory/ values, an evaluation's val/ values) shares that row's step and wall time, so a
// row is one record instead of eight. TensorBoard shows the same plots either way.
//
// Values are protobuf `simple_value`, a float: TensorBoard's scalar plots read that field.
// Large counts (bytes) are therefore rounded to float's 24-bit mantissa.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace ft {

// The checksum TFRecord stores: CRC-32C rotated right by 15 bits plus a constant, so a CRC
// computed over data that itself holds CRCs does not come out trivially.
uint32_t tfrecord_masked_crc(const void* data, size_t bytes);

// The serialized Event protobufs (exposed for tests).
std::string encode_file_version_event(double wall_time, const std::string& version);
std::string encode_scalars_event(const std::vector<std::pair<std::string, double>>& values, int64_t step,
                                 double wall_time);
// One TFRecord around `data`.
std::string tfrecord_frame(const std::string& data);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it named like TensorBoard's own,
  // events.out.tfevents.<unix seconds>.<hostname>.<pid>.<N>, with N the first number whose
  // file does not exist yet (a re-planned run in the same second gets a second file instead
  // of truncating the first). Errors name --tensorboard and the path.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void scalar(const std::string& tag, double value, int64_t step, double wall_time);
  // Several values of one step as one Event.
  void scalars(const std::vector<std::pair<std::string, double>>& values, int64_t step, double wall_time);
  // To the OS (no fsync): a crash of fittrain loses nothing written before.
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  FILE* f_ = nullptr;
};

}  // namespace ft
