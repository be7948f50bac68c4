// BatchSampler: Feistel permutation with cycle-walking; see sampler.h.
#include "data/sampler.h"

#include "core/batch.h"
#include "core/error.h"

namespace ft {
namespace {

constexpr int kRounds = 6;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Round function: a strong 64-bit mix of (half, key).
uint64_t round_fn(uint64_t x, uint64_t key) {
  uint64_t s = x ^ key;
  return splitmix64(s);
}

uint64_t mask_bits(int b) { return b >= 64 ? ~0ull : ((1ull << b) - 1); }

}  // namespace

BatchSampler::BatchSampler(uint64_t num_samples, uint64_t global_batch, int rank, int world,
                           uint64_t seed, bool shuffle, const std::string& data_name)
    : n_(num_samples), global_batch_(global_batch), rank_(rank), world_(world), seed_(seed),
      shuffle_(shuffle) {
  FT_USER_CHECK(world >= 1, "world size ", world, " must be at least 1");
  FT_USER_CHECK(rank >= 0 && rank < world, "rank ", rank, " is outside world size ", world);
  FT_USER_CHECK(global_batch >= 1, "--global-batch-size: global batch must be at least 1");
  FT_USER_CHECK(global_batch >= static_cast<uint64_t>(world), "--global-batch-size: global batch ", global_batch,
                " is smaller than the ", world, " ranks: each needs at least one sample a step");
  FT_USER_CHECK(global_batch <= num_samples, "global batch ", global_batch,
                " is larger than the ", num_samples, " samples in ", data_name);
  local_batch_ = rank_share(global_batch, world, rank);
  first_in_batch_ = rank_first(global_batch, world, rank);
  bits_ = 0;
  while (bits_ < 64 && (1ull << bits_) < n_) ++bits_;
}

uint64_t BatchSampler::permute(uint64_t i, uint64_t epoch) const {
  FT_CHECK(i < n_, "position ", i, " out of range (", n_, " samples)");
  if (!shuffle_ || bits_ == 0) return i;
  // Round keys from (seed, epoch).
  uint64_t state = seed_ ^ (0xD1B54A32D192ED03ull * (epoch + 1));
  uint64_t keys[kRounds];
  for (auto& k : keys) k = splitmix64(state);
  // Unbalanced Feistel on bits_ bits: left = high lb bits, right = low rb bits. Each round
  // xors one half with a function of the other, which is invertible whatever the widths.
  const int lb = bits_ / 2, rb = bits_ - lb;
  const uint64_t lmask = mask_bits(lb), rmask = mask_bits(rb);
  uint64_t x = i;
  do {  // cycle-walk: x < N on entry, the permutation's cycle returns below N in time
    uint64_t l = (x >> rb) & lmask, r = x & rmask;
    for (int k = 0; k < kRounds; ++k) {
      if (k % 2 == 0)
        l ^= round_fn(r, keys[k]) & lmask;
      else
        r ^= round_fn(l, keys[k]) & rmask;
    }
    x = (l << rb) | r;
  } while (x >= n_);
  return x;
}

uint64_t BatchSampler::steps_for_epochs(uint64_t epochs) const {
  FT_USER_CHECK(epochs <= (~0ull - global_batch_) / n_, "--epochs ", epochs,
                " is too many: the run's sample count would overflow");
  const uint64_t end = epochs * n_;
  const uint64_t done = cursor_.epoch >= epochs ? end : cursor_.epoch * n_ + cursor_.sample_in_epoch;
  return done < end ? (end - done + global_batch_ - 1) / global_batch_ : 0;
}

void BatchSampler::next_batch(std::span<uint64_t> out, std::span<uint64_t> epochs_out) {
  FT_CHECK(out.size() == local_batch_, "next_batch wants ", local_batch_, " slots, got ",
           out.size());
  FT_CHECK(epochs_out.empty() || epochs_out.size() == local_batch_, "next_batch wants ", local_batch_,
           " epoch slots, got ", epochs_out.size());
  // This rank's first position, counted from the start of the cursor's epoch; G <= N, so a
  // global batch reaches at most into the next epoch, but the division keeps it general.
  const uint64_t first = cursor_.sample_in_epoch + first_in_batch_;
  for (uint64_t j = 0; j < local_batch_; ++j) {
    const uint64_t p = first + j, epoch = cursor_.epoch + p / n_;
    out[j] = permute(p % n_, epoch);
    if (!epochs_out.empty()) epochs_out[j] = epoch;
  }
  cursor_.sample_in_epoch += global_batch_;
  cursor_.epoch += cursor_.sample_in_epoch / n_;
  cursor_.sample_in_epoch %= n_;
}

void BatchSampler::set_cursor(DataCursor c) {
  FT_USER_CHECK(c.sample_in_epoch < n_, "data cursor at sample ", c.sample_in_epoch, " of epoch ", c.epoch,
                " is past the ", n_, " samples of this data; did the data set change?");
  cursor_ = c;
}

}  // namespace ft
