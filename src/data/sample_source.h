// SampleSource: a dataset as the engine sees it — a number of samples, each made of named
// fields of fixed size (core/batch.h), readable by index from any thread. The sampler picks
// indices, the batch loader copies samples into host buffers through this interface, and a
// task (train/task.h) decides what the fields are.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/batch.h"

namespace ft {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual uint64_t num_samples() const = 0;
  virtual std::vector<FieldSpec> fields() const = 0;
  // Copies sample `idx` (< num_samples()) into dst[f], one pointer per field in fields()
  // order, each with room for that field's per_sample elements. UserError on bad data.
  virtual void read(uint64_t idx, std::span<void* const> dst) const = 0;
  // The same sample as seen in training epoch `epoch`: a source whose samples carry fresh
  // randomness each time they are visited (the recommender's negatives) draws it from
  // (seed, sample, epoch), so any thread, rank or resumed run reads the same bytes.
  // Default: the sample does not change between epochs.
  virtual void read_visit(uint64_t idx, uint64_t epoch, std::span<void* const> dst) const {
    (void)epoch;
    read(idx, dst);
  }
};

}  // namespace ft
