// MovieLens rating files: parsing (ML-1M `ratings.dat` and the CSV of ml-latest-small / ml-25m)
// and a synthetic generator of the same shape, so demos and tests need no download.
//
// Formats:
//   .dat  `UserID::MovieID::Rating::Timestamp`, no header (ML-1M, ML-10M).
//   .csv  a header naming the columns, then `userId,movieId,rating,timestamp` rows (the
//         columns are found by name, so their order may differ; `rating` may be absent).
// Ids must be non-negative integers below 2^32, the timestamp an integer, the rating (when
// present) a number. Blank lines are skipped; CRLF line ends are accepted. A malformed line is
// a UserError naming file:line and what is wrong.
//
// The reader streams: it holds one 1 MiB buffer and hands each rating to a callback, so the
// only memory that grows with the file is what the caller keeps (read_ratings keeps a
// RawInteraction, 16 bytes, per line: 25 M lines of ml-25m are 400 MB). Ratings are
// implicit feedback here (SASRec's protocol): the value is checked, not kept.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace ft {

enum class RatingsFormat : uint32_t { kAuto = 0, kDat = 1, kCsv = 2 };

// "auto" / "dat" / "csv"; UserError otherwise.
RatingsFormat parse_ratings_format(const std::string& s);
// kAuto resolved from the extension (.dat or .csv, any case); UserError naming the file when
// the extension is neither.
RatingsFormat resolve_ratings_format(const std::string& path, RatingsFormat f);

// One rating line, ids as in the file. 16 bytes: the whole per-line cost of a loaded file.
struct RawInteraction {
  uint32_t user = 0;
  uint32_t item = 0;
  int64_t time = 0;
};
static_assert(sizeof(RawInteraction) == 16);

// Calls fn for every rating of the file in file order; returns the number of lines read
// (blank and header lines included). UserError naming the file when it cannot be opened or
// read, naming file:line for a malformed line.
uint64_t for_each_rating(const std::string& path, RatingsFormat format,
                         const std::function<void(const RawInteraction&)>& fn);

// Appends every rating of the file to out, reserving room for the file's line count first so
// that the vector never holds more than 16 bytes per line.
uint64_t read_ratings(const std::string& path, RatingsFormat format, std::vector<RawInteraction>& out);

// ---- synthetic data ----
//
// Users with latent tastes over K = 8 factors (each user a Gaussian mixture weight vector,
// each item a factor vector), item popularity skewed like Zipf (exponent `zipf`, items ranked
// in a seeded random order), and a Markov component: with probability `markov` the next item
// is one of the previous item's `successors` fixed successors (unless already rated), so a
// sequence model can beat both popularity and a bag-of-items user model. Each user rates an
// item at most once. Lengths follow a log-normal around mean_len (at least min_len, at most
// half the items), adjusted so that the total is exactly round(users * mean_len). Times grow
// strictly within a user (ML-1M's era, 2000-2003); the lines of a user are written in a seeded
// shuffled order so that readers must sort by time, as with the real file.
struct SyntheticSpec {
  uint32_t users = 6040;
  uint32_t items = 3706;
  double mean_len = 1000209.0 / 6040.0;  // ML-1M: 1,000,209 ratings
  uint32_t min_len = 5;
  uint64_t seed = 0;
  double zipf = 1.4;       // popularity exponent (ML-1M preset: top 10% of items hold ~36%)
  double affinity = 2.0;   // weight of the user-item factor score in the softmax
  double markov = 0.5;     // probability of following the previous item's successors
  uint32_t successors = 4;
};

// The ML-1M-shaped preset: 6040 users, 3706 items, 1,000,209 ratings.
SyntheticSpec movielens_1m_spec(uint64_t seed = 0);

// The ratings in file order (users 1..U, items 1..N as raw ids; the lines of each user
// shuffled). Identical for identical specs on every machine. FT_CHECKs a spec that cannot be
// met (min_len > items / 2, zero users or items).
std::vector<RawInteraction> synthetic_movielens(const SyntheticSpec& spec);
std::vector<RawInteraction> synthetic_movielens(uint32_t users, uint32_t items, double mean_len, uint64_t seed);

// Writes the synthetic ratings as a `ratings.dat` file (atomically: path.tmp, fsync, rename),
// so the parser path is exercised. Returns the number of ratings written.
uint64_t write_synthetic_ratings(const std::string& path, const SyntheticSpec& spec);

// Atomic file write shared by the .rec writer: the pieces in order to path.tmp, fsync, rename,
// fsync of the folder. UserError naming the file on failure; the .tmp is removed.
struct ByteRange {
  const void* data = nullptr;
  size_t bytes = 0;
};
void write_file_atomic(const std::string& path, std::span<const ByteRange> pieces);

}  // namespace ft
