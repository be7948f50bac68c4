// Checkpoint file format (.ftc), version 1: one file holds a JSON metadata blob and any number
// of named binary sections, each with its own CRC-32C, so a reader can prove every byte
// before anything touches the model.
//
// Layout (all integers little-endian; offsets are from the start of the file):
//
//   offset 0   header, 32 bytes
//     [0,8)    magic   "FTCKPT\0\1"
//     [8,12)   uint32  version (1). Magic and version keep this place in every future version,
//                      so an old reader can always say "too new" instead of "corrupt".
//     [12,16)  uint32  num_sections
//     [16,24)  uint64  meta_bytes
//     [24,28)  uint32  meta_crc    CRC-32C of the metadata bytes
//     [28,32)  uint32  header_crc  CRC-32C of header bytes [0,28)
//   offset 32  metadata: meta_bytes of compact JSON (step, world size, config, data cursor,
//              RNG, whatever the caller puts), then zero padding to a multiple of 8
//   table      num_sections entries of 104 bytes each:
//     [0,64)   name, NUL-padded (a 64-character name has no NUL)
//     [64,80)  dtype tag, NUL-terminated (at most 15 characters, e.g. "f32", "bf16", "u8")
//     [80,88)  uint64  payload bytes
//     [88,96)  uint64  payload offset (a multiple of 8, at or after the end of the table)
//     [96,100) uint32  payload CRC-32C
//     [100,104) uint32 entry CRC-32C of entry bytes [0,100)
//   payloads   in table order, each starting at its 8-byte aligned offset, zero padding
//              between them; the file ends exactly at the end of the last payload (or the
//              table when there are no sections). Padding is zero and shorter than 8 bytes;
//              the reader checks that too, so no byte of a valid file goes unchecked.
//
// Writing is atomic: path.tmp is written, fsynced, renamed over path and the directory is
// fsynced. A failure at any point before the rename leaves an existing `path` untouched and
// removes the tmp. Reading validates everything except payload CRCs in open(); each payload
// CRC is checked when it is read (or all at once by verify_all()). Every problem with the
// file is a UserError naming the file (and the section, where there is one).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft {

inline constexpr uint32_t kCheckpointVersion = 1;

// Where a streamed section passes its bytes: in order, in blocks of any size; a block need
// stay valid only during its call.
using CheckpointSink = std::function<void(const void* data, size_t bytes)>;

struct CheckpointSection {
  std::string name;   // unique, 1..64 characters
  const void* data;   // `bytes` bytes; may be null when bytes == 0 or when `stream` is set
  size_t bytes;
  std::string dtype;  // tag for the reader, at most 15 characters ("f32", "bf16", "u8", ...)
  // When set, called once, when this section's payload is written, to pass exactly its
  // `bytes` bytes to the sink: so a payload staged from a device (or gathered from other
  // ranks) passes through one small host block, never a copy of the whole section.
  std::function<void(const CheckpointSink& sink)> stream = {};
};

// Writes the checkpoint atomically (see above). Payloads are streamed from the caller's
// memory (or from `stream`, section by section in table order) with their CRC computed on the
// way; nothing is copied whole. Throws UserError naming the file on any I/O failure (an
// exception from `stream` also ends the write, leaving no file); invalid sections (bad name,
// duplicate, a stream that passes other than `bytes` bytes) are a bug in the caller and
// throw InternalError.
void write_checkpoint(const std::string& path, const nlohmann::json& meta,
                      std::span<const CheckpointSection> sections);

class CheckpointReader {
 public:
  struct Entry {
    std::string name;
    std::string dtype;
    uint64_t bytes = 0;
    uint64_t offset = 0;
    uint32_t crc = 0;
  };

  CheckpointReader() = default;
  explicit CheckpointReader(const std::string& path) { open(path); }
  ~CheckpointReader();
  CheckpointReader(CheckpointReader&& o) noexcept;
  CheckpointReader& operator=(CheckpointReader&& o) noexcept;
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  // Opens and validates magic, version, header CRC, metadata CRC and JSON, every table entry
  // (CRC, name, bounds, alignment, overlap) and the file size. Throws UserError otherwise.
  void open(const std::string& path);
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }

  const nlohmann::json& meta() const { return meta_; }
  const std::vector<Entry>& sections() const { return entries_; }
  bool has(const std::string& name) const;
  // Throws UserError when the section is missing.
  size_t section_bytes(const std::string& name) const;
  const std::string& section_dtype(const std::string& name) const;

  // Reads the whole section into dst; `bytes` must equal section_bytes(name) (else
  // UserError: the caller's model does not match the checkpoint). Verifies the CRC; on a
  // mismatch throws UserError naming file and section, and dst holds the corrupt bytes.
  void read(const std::string& name, void* dst, size_t bytes) const;
  // Reads the section in order through one buffer of a few MiB, handing each block to
  // consume(offset in the section, data, size), then verifies the CRC (a mismatch throws
  // UserError naming file and section, after every block was consumed). `bytes` as for read().
  // For a reader that keeps part of a section (a ZeRO-1 rank's pieces) without a whole copy.
  using BlockFn = std::function<void(uint64_t offset, const uint8_t* data, size_t n)>;
  void read_blocks(const std::string& name, size_t bytes, const BlockFn& consume) const;

  // Checks every payload CRC by streaming through a small fixed buffer.
  void verify_all() const;

 private:
  const Entry& entry(const std::string& name) const;
  void close();
  // read() and read_blocks(): the section (`bytes`, else UserError) kChunk at a time, into
  // `whole` at each block's offset or, without it, into one reused buffer; each block to
  // consume (when given); then the CRC.
  void stream(const std::string& name, size_t bytes, uint8_t* whole, const BlockFn& consume) const;

  int fd_ = -1;
  std::string path_;
  uint32_t version_ = 0;
  nlohmann::json meta_;
  std::vector<Entry> entries_;
};

namespace testing {
// Failure injection for tests: when >= 0, write_checkpoint fails (as if the disk were full)
// once this many bytes have been written to the tmp file. -1 (default) disables it. Tests
// need this because root ignores read-only directories. Not thread-safe; tests only.
extern int64_t fail_checkpoint_write_after_bytes;
}  // namespace testing

}  // namespace ft
