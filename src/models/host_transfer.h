// Host <-> device transfers every model makes outside its ops: host f32 values into a device
// tensor of the activation dtype (timestep coefficients, conditions, noisy images), a device
// tensor back as f32 (predictions), and the per-sample losses of a pass summed on the host.
// One copy each, shared by the models; the host staging is the caller's, sized at bind.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/half.h"

namespace ft {

// dst[0, n) = src (rounded to dst's dtype on the host when it is bf16/f16, through staging:
// the caller sizes it at bind, so a step allocates nothing).
inline void upload_floats(Backend& be, Tensor dst, const float* src, int64_t n, std::vector<uint16_t>& staging) {
  FT_CHECK(dst.numel() >= n, "upload of ", n, " values into ", dst.shape_str());
  if (dst.dtype == DType::f32) {
    be.copy_to_device(dst.data, src, static_cast<size_t>(n) * 4);
    return;
  }
  if (staging.size() < static_cast<size_t>(n)) staging.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) staging[static_cast<size_t>(i)] = float_to_half_bits(dst.dtype, src[i]);
  be.copy_to_device(dst.data, staging.data(), static_cast<size_t>(n) * 2);
}

// out[0, numel) = the device tensor src as f32 (bf16/f16 widened on the host, through staging).
inline void download_floats(Backend& be, float* out, Tensor src, std::vector<uint16_t>& staging) {
  const int64_t n = src.numel();
  if (src.dtype == DType::f32) {
    be.copy_to_host(out, src.data, src.bytes());
    return;
  }
  if (staging.size() < static_cast<size_t>(n)) staging.resize(static_cast<size_t>(n));
  be.copy_to_host(staging.data(), src.data, src.bytes());
  for (int64_t i = 0; i < n; ++i) out[i] = half_bits_to_float(src.dtype, staging[static_cast<size_t>(i)]);
}

// The per-sample losses of a pass, summed on the host without stopping it mid-step: a model
// calls start() right after its loss op (the copy is queued behind it, into staging the device
// copies into while the host goes on), queues its whole backward, then sum() waits for that
// copy only. Reading them at once instead idled the GPU while the host summed them and queued
// the backward's first product: 0.2-0.3 ms of every GPT-2 124M micro-batch on an H100 (device
// trace, docs/PERFORMANCE.md). Evaluation, which has no backward, calls read().
class LossReadback {
 public:
  // Staging for up to max_floats losses (at bind, so no step allocates).
  void bind(Backend& be, int64_t max_floats) {
    buf_ = be.make_host_readback(static_cast<size_t>(max_floats) * sizeof(float));
    n_ = -1;
  }
  // Queues the copy of `losses` (f32, on the device). A read-back left pending by an error
  // mid-step is simply replaced (same stream, in order).
  void start(Tensor losses) {
    FT_CHECK(buf_ && losses.dtype == DType::f32 && losses.bytes() <= buf_->bytes(), "LossReadback::start: ",
             losses.shape_str(), buf_ ? "" : " (not bound)");
    buf_->start(losses.data, losses.bytes());
    n_ = losses.numel();
  }
  // The sum of the losses start() was given: waits for their copy.
  double sum() {
    FT_CHECK(n_ >= 0, "LossReadback::sum without start");
    buf_->wait();
    const auto* v = static_cast<const float*>(buf_->data());
    double s = 0;
    for (int64_t i = 0; i < n_; ++i) s += v[i];
    n_ = -1;
    return s;
  }
  double read(Tensor losses) {
    start(losses);
    return sum();
  }

 private:
  std::unique_ptr<HostReadback> buf_;
  int64_t n_ = -1;  // the pending read-back's count (-1: none)
};

// A training micro-batch's large inputs (CDEIT's images and condition maps, 2 MiB each at batch
// 32) uploaded on a stream of their own. Queued on the compute stream they waited behind the
// previous step's update: about 82 us at every CDEIT step's start on an H200 (session 26
// trace); on their own stream they run beside it. The runtime owns one (ModelBinding::uploads).
// Their destination must be the model's alone for the whole step (declared live in every
// phase): the copies wait only for the last read of the previous micro-batch's inputs
// (inputs_read), not for the rest of what the compute stream still runs. The stream is made
// at the first copy, so a model that never uploads this way costs nothing.
class InputUploads {
 public:
  explicit InputUploads(Backend& be) : be_(be) {}
  InputUploads(const InputUploads&) = delete;
  InputUploads& operator=(const InputUploads&) = delete;
  ~InputUploads() {
    if (!stream_.native) return;
    try {  // nothing may still read the host bytes or run on the stream when it goes
      be_.synchronize_stream(stream_);
      be_.destroy_event(read_);
      be_.destroy_event(landed_);
      be_.destroy_stream(stream_);
    } catch (const std::exception&) {  // a failing device was reported where it failed
    }
  }
  // Call after queuing the last read of this micro-batch's uploaded inputs on the compute
  // stream: the next micro-batch's copies wait for it.
  void inputs_read() {
    if (!stream_.native) return;
    be_.record_event(read_, be_.compute_stream());
    recorded_ = true;
  }
  // dst[0, bytes) = src: on the upload stream when src lies in an upload source (its owner
  // fences reuse behind the compute stream, which finish() makes wait for the copy), else
  // copy_to_device (on the compute stream: also where the device has no streams).
  void copy(void* dst, const void* src, size_t bytes) {
    if (!stream_.native) {
      if (!be_.compute_stream().native) {  // a device without streams (the CPU)
        be_.copy_to_device(dst, src, bytes);
        return;
      }
      stream_ = be_.create_stream(StreamPriority::normal);
      read_ = be_.create_event();
      landed_ = be_.create_event();
    }
    if (!waited_ && recorded_) be_.stream_wait_event(stream_, read_);
    waited_ = true;
    if (be_.copy_to_device_on(stream_, dst, src, bytes)) queued_ = true;
    else be_.copy_to_device(dst, src, bytes);
  }
  // The compute stream's later work waits for the copies since the last finish().
  void finish() {
    if (queued_) {
      be_.record_event(landed_, stream_);
      be_.stream_wait_event(be_.compute_stream(), landed_);
    }
    queued_ = waited_ = false;
  }

 private:
  Backend& be_;
  StreamHandle stream_;
  EventHandle read_, landed_;
  bool recorded_ = false;  // inputs_read has recorded read_
  bool waited_ = false;    // the upload stream waits for read_ (once a micro-batch)
  bool queued_ = false;    // a copy went on the upload stream since the last finish()
};

}  // namespace ft
