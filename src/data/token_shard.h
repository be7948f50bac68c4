// Token shards: read-only memory maps of pre-tokenized data.
//
// Two on-disk formats share one 256 x int32 header (1024 bytes):
//   llm.c   : header[0]=20240520, header[1]=1, header[2]=token count, then uint16 tokens.
//   fittrain: header[0]=20261126, header[1]=2, header[2]=token count, then uint32 tokens,
//             for vocabularies larger than 65536.
// The count is an int32 in both (llm.c compatibility), so a shard holds < 2^31 tokens.
// A shard is mapped, never copied: host memory stays at the page cache's discretion.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ft {

inline constexpr int32_t kShardMagicU16 = 20240520;  // llm.c
inline constexpr int32_t kShardVersionU16 = 1;
inline constexpr int32_t kShardMagicU32 = 20261126;  // fittrain
inline constexpr int32_t kShardVersionU32 = 2;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);
static_assert(kShardMagicU16 != kShardMagicU32, "shard formats need distinct magics");

// What identifies a shard file's contents for the scan cache (data/shard_scan.h): taken
// by fstat when the shard is opened.
struct ShardFileId {
  uint64_t dev = 0, ino = 0, bytes = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
};

class TokenShard {
 public:
  // Maps `path` and validates header and size; throws UserError naming the path otherwise.
  // Only a regular file is opened: a FIFO, device, socket or folder is refused by stat(2)
  // before open(2) (which would block on a FIFO), and the open is O_NONBLOCK besides.
  explicit TokenShard(const std::string& path);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;

  const std::string& path() const { return path_; }
  size_t size() const { return count_; }          // number of tokens
  int token_bytes() const { return token_bytes_; }  // 2 (llm.c) or 4 (fittrain)

  const ShardFileId& file_id() const { return id_; }

  // The largest token (0 for an empty shard): one pass over the map, vectorised and split
  // over the OpenMP threads.
  uint32_t max_token() const;
  // Position of the first token >= `limit`, or size() when there is none.
  size_t first_token_at_least(uint32_t limit) const;

  uint32_t token(size_t i) const {
    return token_bytes_ == 2 ? reinterpret_cast<const uint16_t*>(tokens_)[i]
                             : reinterpret_cast<const uint32_t*>(tokens_)[i];
  }

 private:
  void release() noexcept;

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  size_t count_ = 0;
  int token_bytes_ = 2;
  ShardFileId id_;
};

// "a FIFO", "a folder", "a character device", ... for a st_mode that is not a regular file.
std::string file_kind(unsigned mode);

// Writes `tokens` as a shard: the llm.c uint16 format when every token is < 65536, the
// fittrain uint32 format otherwise. Atomic: writes `path.tmp`, fsyncs, renames, fsyncs the
// folder, so a reader never sees a half-written shard.
void write_shard(const std::string& path, std::span<const uint32_t> tokens);

}  // namespace ft
