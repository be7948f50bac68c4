// A reader of TensorBoard event files for tests: every TFRecord's two CRCs checked, every
// Event decoded (wall_time, step, file_version, summary simple values). Written from the
// format's description, not from the writer's code, so the tests check one against the other.
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/crc32c.h"

namespace ft::testing {

struct TbEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;  // the summary's (tag, simple_value)
};

inline uint32_t tb_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

class TbParser {
 public:
  TbParser(const std::string& bytes, size_t begin, size_t end) : b_(bytes), pos_(begin), end_(end) {}
  bool done() const { return pos_ >= end_; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const auto byte = static_cast<uint8_t>(b_[pos_++]);
      v |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return v;
    }
    throw std::runtime_error("varint longer than 10 bytes");
  }
  uint64_t fixed(size_t n) {
    need(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(b_[pos_ + i])) << (8 * i);
    pos_ += n;
    return v;
  }
  // A length-delimited field's extent [begin, end), skipped over.
  std::pair<size_t, size_t> span() {
    const uint64_t n = varint();
    need(n);
    const size_t begin = pos_;
    pos_ += n;
    return {begin, pos_};
  }
  void skip(uint32_t wire_type) {
    if (wire_type == 0) varint();
    else if (wire_type == 1) fixed(8);
    else if (wire_type == 2) span();
    else if (wire_type == 5) fixed(4);
    else throw std::runtime_error("unknown wire type " + std::to_string(wire_type));
  }

 private:
  void need(uint64_t n) const {
    if (n > end_ - pos_) throw std::runtime_error("protobuf field runs past its message");
  }
  const std::string& b_;
  size_t pos_, end_;
};

inline TbEvent tb_decode_event(const std::string& b, size_t begin, size_t end) {
  TbEvent e;
  TbParser p(b, begin, end);
  while (!p.done()) {
    const uint64_t key = p.varint();
    const auto field = static_cast<uint32_t>(key >> 3), wire = static_cast<uint32_t>(key & 7);
    if (field == 1 && wire == 1) {
      const uint64_t bits = p.fixed(8);
      std::memcpy(&e.wall_time, &bits, 8);
    } else if (field == 2 && wire == 0) {
      e.step = static_cast<int64_t>(p.varint());
    } else if (field == 3 && wire == 2) {
      auto [s0, s1] = p.span();
      e.file_version = b.substr(s0, s1 - s0);
    } else if (field == 5 && wire == 2) {
      auto [s0, s1] = p.span();
      TbParser summary(b, s0, s1);
      while (!summary.done()) {
        const uint64_t k = summary.varint();
        if (k != ((1 << 3) | 2)) {
          summary.skip(static_cast<uint32_t>(k & 7));
          continue;
        }
        auto [v0, v1] = summary.span();
        TbParser value(b, v0, v1);
        std::string tag;
        float simple = 0;
        while (!value.done()) {
          const uint64_t vk = value.varint();
          if (vk == ((1 << 3) | 2)) {
            auto [t0, t1] = value.span();
            tag = b.substr(t0, t1 - t0);
          } else if (vk == ((2 << 3) | 5)) {
            const auto bits = static_cast<uint32_t>(value.fixed(4));
            std::memcpy(&simple, &bits, 4);
          } else {
            value.skip(static_cast<uint32_t>(vk & 7));
          }
        }
        e.values.emplace_back(tag, simple);
      }
    } else {
      p.skip(wire);
    }
  }
  return e;
}

// Every Event of an event file's bytes; throws std::runtime_error naming the record whose
// length or data CRC does not match, or that is cut short.
inline std::vector<TbEvent> tb_read_events(const std::string& bytes) {
  std::vector<TbEvent> events;
  size_t pos = 0;
  auto le = [&](size_t at, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
    return v;
  };
  while (pos < bytes.size()) {
    const std::string rec = "record " + std::to_string(events.size()) + " at byte " + std::to_string(pos);
    if (bytes.size() - pos < 12) throw std::runtime_error(rec + ": header cut short");
    const uint64_t len = le(pos, 8);
    if (tb_mask(crc32c(bytes.data() + pos, 8)) != le(pos + 8, 4)) throw std::runtime_error(rec + ": length CRC mismatch");
    if (len > bytes.size() - pos - 12 || bytes.size() - pos - 12 - len < 4) throw std::runtime_error(rec + ": data cut short");
    const size_t data = pos + 12;
    if (tb_mask(crc32c(bytes.data() + data, len)) != le(data + len, 4)) throw std::runtime_error(rec + ": data CRC mismatch");
    events.push_back(tb_decode_event(bytes, data, data + len));
    pos = data + len + 4;
  }
  return events;
}

}  // namespace ft::testing
