#include "train/batch_loader.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace ft {

BatchLoader::BatchLoader(const SampleSource& data, int64_t max_batch, bool background, Backend* device)
    : data_(data), fields_(data.fields()), max_batch_(max_batch), background_(background) {
  // one block per buffer with every field, each field 256-byte aligned
  std::vector<size_t> offsets;
  size_t block = 0;
  for (const auto& f : fields_) {
    offsets.push_back(block);
    block += (static_cast<size_t>(max_batch) * f.sample_bytes() + 255) / 256 * 256;
  }
  if (device && block > 0) {
    for (void*& p : pinned_) p = device->alloc_upload_source(block);
    if (!pinned_[0] || !pinned_[1]) {  // both or neither: only fenced buffers are uploaded from directly
      for (void*& p : pinned_) {
        if (p) device->free_upload_source(p);
        p = nullptr;
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    char* base = static_cast<char*>(pinned_[i]);
    if (!base) {
      plain_[i].resize(block);
      base = plain_[i].data();
    }
    for (size_t off : offsets) field_at_[i].push_back(base + off);
    samples_[i].resize(static_cast<size_t>(max_batch));
    epochs_[i].resize(static_cast<size_t>(max_batch));
  }
  if (pinned_[0]) {
    device_ = device;
    for (auto& e : fence_) e = device_->create_event();
  }
  if (background_) worker_ = std::thread([this] { worker_loop(); });
}

BatchLoader::~BatchLoader() {
  if (background_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  if (device_) {
    // queued copies may still read the buffers: wait for the stream before freeing them
    try {
      device_->synchronize_stream(device_->compute_stream());
    } catch (...) {  // a failed device: freeing is all that is left to do
    }
    for (auto& e : fence_) device_->destroy_event(e);
    for (void* p : pinned_) device_->free_upload_source(p);
  }
}

void BatchLoader::load(int buf) {
  // the device's copies of this buffer's last batch must have run before it is rewritten
  if (fenced_[buf]) device_->synchronize_event(fence_[buf]);
  const int64_t n = sizes_[buf];
  std::vector<void*> dst(fields_.size());
  for (int64_t i = 0; i < n; ++i) {
    for (size_t f = 0; f < fields_.size(); ++f)
      dst[f] = field_at_[buf][f] + static_cast<size_t>(i) * fields_[f].sample_bytes();
    data_.read_visit(samples_[buf][i], epochs_[buf][i], dst);
  }
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

void BatchLoader::request(std::span<const uint64_t> samples, std::span<const uint64_t> epochs) {
  FT_CHECK(static_cast<int64_t>(samples.size()) <= max_batch_, "batch of ", samples.size());
  FT_CHECK(epochs.empty() || epochs.size() == samples.size(), "batch of ", samples.size(), " with ", epochs.size(),
           " epochs");
  FT_CHECK(!busy_, "request() twice without get()");
  const int buf = next_;
  if (epochs.empty()) std::fill(epochs_[buf].begin(), epochs_[buf].end(), 0);
  else std::copy(epochs.begin(), epochs.end(), epochs_[buf].begin());
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

Batch BatchLoader::get() {
  FT_CHECK(busy_, "get() without request()");
  busy_ = false;
  if (background_) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  const int buf = next_;
  next_ ^= 1;
  // Everything for the batch returned before has been queued by now (it is used until this
  // call): its buffer may be refilled once the device has run that work.
  if (device_ && last_ >= 0) {
    device_->record_event(fence_[last_], device_->compute_stream());
    fenced_[last_] = true;
  }
  last_ = buf;
  Batch b;
  b.size = sizes_[buf];
  for (size_t f = 0; f < fields_.size(); ++f) b.fields.push_back(BatchField{fields_[f], field_at_[buf][f]});
  return b;
}

}  // namespace ft
