// Interactions: every user's time-ordered item history with dense ids, the leave-one-out
// split, and the prepared binary file (`*.rec`) that training maps instead of re-parsing.
//
// Dense ids: users 0..U-1 and items 1..N, each in ascending order of the raw ids, so the same
// ratings give the same ids whatever the line order; item 0 is reserved for padding. Only the
// users kept (at least min_interactions ratings) and their items get ids.
// History order: by timestamp, ties in input order (a stable sort: ML-1M has many ratings in
// the same second, and their file order is the only order there is).
// Split (SASRec's leave-one-out): a user's last item is the test item, the second-to-last the
// validation item, the rest is train. Users with fewer than 3 ratings cannot be split and are
// dropped (counted in the report).
// Popularity: ratings per item in the train parts only, so the popularity baseline never sees
// a held-out item.
//
// `*.rec` (little-endian, version 1):
//   header, 64 bytes: magic "FTREC\0\0\0", u32 version, u32 header bytes (64), u32 users,
//     u32 items (N), u64 interactions, u64 dropped users, u64 dropped interactions,
//     u32 min_interactions, u32 reserved (0), u32 CRC-32C of the tables, u32 CRC-32C of the
//     header's first 60 bytes;
//   tables, each padded with zeros to a multiple of 8 bytes:
//     offsets (users+1) x u64, items (interactions) x u32, user ids users x u32 (raw id of
//     each dense user), item ids (N+1) x u32 (raw id of each dense item, 0 for padding),
//     popularity (N+1) x u32 (train ratings per item, 0 for padding).
// The reader maps the file and checks everything before use: size, magic, version, both CRCs,
// offsets monotone from 0 to interactions with every user >= max(3, min_interactions), items
// in 1..N, popularity equal to a recount. Any failure is a UserError naming the file.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/movielens.h"

namespace ft {

inline constexpr char kRecMagic[8] = {'F', 'T', 'R', 'E', 'C', '\0', '\0', '\0'};
inline constexpr uint32_t kRecVersion = 1;
inline constexpr size_t kRecHeaderBytes = 64;
inline constexpr uint32_t kMinSplitInteractions = 3;

struct InteractionsReport {
  uint64_t raw_interactions = 0;   // ratings read
  uint64_t raw_users = 0;          // distinct users read
  uint64_t dropped_users = 0;      // fewer than min_interactions ratings
  uint64_t dropped_interactions = 0;
};

// A read-only view of interactions in CSR form; owned by Interactions or by a mapped RecFile.
class InteractionsView {
 public:
  InteractionsView() = default;
  InteractionsView(std::span<const uint64_t> offsets, std::span<const uint32_t> items,
                   std::span<const uint32_t> user_ids, std::span<const uint32_t> item_ids,
                   std::span<const uint32_t> popularity)
      : offsets_(offsets), items_(items), user_ids_(user_ids), item_ids_(item_ids), popularity_(popularity) {}

  uint32_t num_users() const { return static_cast<uint32_t>(user_ids_.size()); }
  uint32_t num_items() const { return static_cast<uint32_t>(item_ids_.empty() ? 0 : item_ids_.size() - 1); }
  uint64_t num_interactions() const { return items_.size(); }

  // The user's whole history, time-ordered (dense items 1..N).
  std::span<const uint32_t> history(uint32_t u) const {
    return items_.subspan(offsets_[u], offsets_[u + 1] - offsets_[u]);
  }
  // Leave-one-out: all but the last two / the second-to-last / the last.
  std::span<const uint32_t> train(uint32_t u) const {
    auto h = history(u);
    return h.first(h.size() - 2);
  }
  uint32_t valid_item(uint32_t u) const { return history(u)[history(u).size() - 2]; }
  uint32_t test_item(uint32_t u) const { return history(u).back(); }

  uint32_t raw_user(uint32_t u) const { return user_ids_[u]; }
  uint32_t raw_item(uint32_t item) const { return item_ids_[item]; }
  // Train ratings of a dense item (0 for the padding item).
  uint32_t popularity(uint32_t item) const { return popularity_[item]; }

  std::span<const uint64_t> offsets() const { return offsets_; }
  std::span<const uint32_t> items() const { return items_; }
  std::span<const uint32_t> user_ids() const { return user_ids_; }
  std::span<const uint32_t> item_ids() const { return item_ids_; }
  std::span<const uint32_t> popularity() const { return popularity_; }

 private:
  std::span<const uint64_t> offsets_;
  std::span<const uint32_t> items_, user_ids_, item_ids_, popularity_;
};

// Owning interactions, built from raw ratings.
struct Interactions {
  std::vector<uint64_t> offsets{0};
  std::vector<uint32_t> items, user_ids, item_ids{0}, popularity{0};
  InteractionsReport report;
  uint32_t min_interactions = kMinSplitInteractions;

  InteractionsView view() const { return {offsets, items, user_ids, item_ids, popularity}; }
};

// Builds the CSR from raw ratings (consumed: its memory is reused and then released). Users
// with fewer than max(3, min_interactions) ratings are dropped. Peak memory: the raw ratings
// (16 bytes each) plus the CSR being built (4 bytes each) plus a hash map entry per distinct
// id. The time sort is in place (std::sort on a key of the time and the input position) when
// all times lie within 2^32 seconds of each other; otherwise a std::stable_sort, which may borrow
// a buffer as large as the ratings.
Interactions build_interactions(std::vector<RawInteraction>&& raw, uint32_t min_interactions = kMinSplitInteractions);

// Parses a ratings file (movielens.h) and builds its interactions.
Interactions load_ratings(const std::string& path, RatingsFormat format = RatingsFormat::kAuto,
                          uint32_t min_interactions = kMinSplitInteractions);

// Writes a `*.rec` file atomically (path.tmp, fsync, rename, fsync of the folder).
void write_rec(const std::string& path, const Interactions& x);

// A mapped, validated `*.rec` file. UserError naming the file when it is missing, not a
// regular file, truncated, has trailing bytes, or fails any check listed above.
class RecFile {
 public:
  explicit RecFile(const std::string& path);
  ~RecFile();
  RecFile(const RecFile&) = delete;
  RecFile& operator=(const RecFile&) = delete;

  const std::string& path() const { return path_; }
  const InteractionsView& view() const { return view_; }
  const InteractionsReport& report() const { return report_; }
  uint32_t min_interactions() const { return min_interactions_; }

 private:
  void validate(uint64_t bytes);
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  InteractionsView view_;
  InteractionsReport report_;
  uint32_t min_interactions_ = kMinSplitInteractions;
};

}  // namespace ft
