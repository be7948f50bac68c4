#include "train/batch_loader.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace ft {

BatchLoader::BatchLoader(const TokenDataset& data, int64_t max_batch, bool background)
    : data_(data), max_batch_(max_batch), T_(data.seq_len()), background_(background) {
  for (int i = 0; i < 2; ++i) {
    tokens_[i].resize(static_cast<size_t>(max_batch * T_));
    targets_[i].resize(static_cast<size_t>(max_batch * T_));
    samples_[i].resize(static_cast<size_t>(max_batch));
  }
  if (background_) worker_ = std::thread([this] { worker_loop(); });
}

BatchLoader::~BatchLoader() {
  if (!background_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void BatchLoader::load(int buf) {
  const int64_t n = sizes_[buf];
  for (int64_t i = 0; i < n; ++i)
    data_.read_sample(samples_[buf][i], tokens_[buf].data() + i * T_, targets_[buf].data() + i * T_);
}

void BatchLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return quit_ || job_ >= 0; });
    if (quit_) return;
    const int buf = job_;
    lock.unlock();
    std::exception_ptr err;
    try {
      load(buf);
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    error_ = err;
    job_ = -1;
    done_ = true;
    cv_.notify_all();
  }
}

void BatchLoader::request(std::span<const uint64_t> samples) {
  FT_CHECK(static_cast<int64_t>(samples.size()) <= max_batch_, "batch of ", samples.size());
  FT_CHECK(!busy_, "request() twice without get()");
  const int buf = next_;
  std::copy(samples.begin(), samples.end(), samples_[buf].begin());
  sizes_[buf] = static_cast<int64_t>(samples.size());
  busy_ = true;
  if (!background_) {
    load(buf);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = false;
    job_ = buf;
  }
  cv_.notify_all();
}

BatchLoader::Batch BatchLoader::get() {
  FT_CHECK(busy_, "get() without request()");
  busy_ = false;
  if (background_) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  const int buf = next_;
  next_ ^= 1;
  return Batch{tokens_[buf].data(), targets_[buf].data(), sizes_[buf]};
}

}  // namespace ft
