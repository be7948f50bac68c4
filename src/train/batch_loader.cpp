#include "train/batch_loader.h"

#include "core/error.h"

namespace ft {

BatchLoader::BatchLoader(const TokenDataset& data, int64_t max_batch, bool background)
    : data_(data), max_batch_(max_batch), T_(data.seq_len()), background_(background) {
  for (int i = 0; i < 2; ++i) {
    tokens_[i].resize(static_cast<size_t>(max_batch * T_));
    targets_[i].resize(static_cast<size_t>(max_batch * T_));
  }
}

BatchLoader::~BatchLoader() {
  if (pending_.valid()) pending_.wait();
}

void BatchLoader::load(int buf, std::vector<uint64_t> samples) {
  for (size_t i = 0; i < samples.size(); ++i)
    data_.read_sample(samples[i], tokens_[buf].data() + i * T_, targets_[buf].data() + i * T_);
  sizes_[buf] = static_cast<int64_t>(samples.size());
}

void BatchLoader::request(std::span<const uint64_t> samples) {
  FT_CHECK(static_cast<int64_t>(samples.size()) <= max_batch_, "batch of ", samples.size());
  FT_CHECK(!pending_.valid(), "request() twice without get()");
  std::vector<uint64_t> copy(samples.begin(), samples.end());
  const int buf = next_;
  if (background_)
    pending_ = std::async(std::launch::async, [this, buf, c = std::move(copy)]() mutable { load(buf, std::move(c)); });
  else
    load(buf, std::move(copy));
}

BatchLoader::Batch BatchLoader::get() {
  if (pending_.valid()) pending_.get();  // rethrows a bad-data error from the worker
  const int buf = next_;
  next_ ^= 1;
  return Batch{tokens_[buf].data(), targets_[buf].data(), sizes_[buf]};
}

}  // namespace ft
