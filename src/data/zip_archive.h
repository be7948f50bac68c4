// ZipArchive: a small, strict reader of the zip archives that numpy (`.npz`: np.savez and
// np.savez_compressed) and PyTorch (`.pth`: torch.save) write, plus a minimal writer.
//
// Reading: the end-of-central-directory record is searched backwards from the end (past an
// archive comment of up to 65535 bytes), then the zip64 locator and record when a field is
// saturated, then every central-directory entry. A member's data is found through its local
// header (whose name must equal the central directory's) and is STORED or DEFLATE (raw
// inflate, zlib); sizes come from the central directory (zip64 extra field 0x0001 when they
// are saturated), so data descriptors need no parsing. Every member read is checked against
// its CRC-32. Every offset and size is bounds-checked against the archive before use: the
// reader runs on untrusted bytes (fuzz/npz_fuzz.cpp). Refused: encryption, multi-disk
// archives, methods other than STORED/DEFLATE, duplicate names, a DEFLATE member claiming
// more than 1032x its compressed size (deflate's maximum ratio, so a corrupt size field
// cannot make the reader allocate without bound).
//
// Errors are UserError naming the archive (its path, or the label given) and the member.
//
// Writing: STORED members only, with correct CRCs, no zip64 (members and archive < 4 GiB),
// atomically (path.tmp, fsync, rename). Enough for the tests, the fuzz seeds and the
// synthetic EIT data set (data/eit_dataset.h); Python's zipfile (so np.load) reads what it
// writes.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/mapped_file.h"

namespace ft {

inline constexpr uint16_t kZipStored = 0;
inline constexpr uint16_t kZipDeflate = 8;

struct ZipMember {
  std::string name;
  uint16_t method = kZipStored;
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;                 // uncompressed
  uint64_t local_header_offset = 0;  // from the archive's first byte
};

class ZipArchive {
 public:
  // Over bytes the caller keeps alive; `label` names the archive in errors (e.g. its path).
  ZipArchive(std::span<const uint8_t> bytes, std::string label);
  // Maps the file at `path` (MappedFile) and parses it; `what` names the kind of file in
  // errors about opening it ("npz sample", "normalisation").
  static ZipArchive open(const std::string& path, const char* what = "zip");

  const std::string& label() const { return label_; }
  const std::vector<ZipMember>& members() const { return members_; }
  // The member called `name`, or nullptr.
  const ZipMember* find(std::string_view name) const;
  // The first member (in central-directory order) whose name ends with `suffix`, or nullptr.
  const ZipMember* find_suffix(std::string_view suffix) const;

  // The member's uncompressed bytes, inflated if need be and CRC-checked.
  std::vector<uint8_t> read(const ZipMember& m) const;
  // A STORED member's bytes as a view into the archive (no copy), CRC-checked; a DEFLATE
  // member is inflated into `scratch` and the view points there.
  std::span<const uint8_t> view(const ZipMember& m, std::vector<uint8_t>& scratch) const;

 private:
  void parse();
  std::span<const uint8_t> raw_data(const ZipMember& m) const;  // compressed bytes
  MappedFile file_;  // set by open(); bytes_ points into it then
  std::span<const uint8_t> bytes_;
  std::string label_;
  std::vector<ZipMember> members_;
};

// One member to write: its name and bytes (kept alive by the caller until the call returns).
struct ZipEntry {
  std::string name;
  std::span<const uint8_t> data;
};

// The archive bytes of STORED `entries`, in order. UserError naming `label` when a member or
// the archive reaches 4 GiB or a name is empty or longer than 65535 bytes.
std::vector<uint8_t> zip_bytes(std::span<const ZipEntry> entries, const std::string& label = "zip archive");
// zip_bytes written to `path` atomically (path.tmp, fsync, rename, fsync of the folder).
void write_zip(const std::string& path, std::span<const ZipEntry> entries);

// zlib's CRC-32 over any length (zlib's own call takes a 32-bit length).
uint32_t zip_crc32(std::span<const uint8_t> bytes);

}  // namespace ft
