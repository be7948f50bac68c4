// What the ranks of a run compare to know they read one dataset.
//
// Every rank opens its data at the same --data-path, but over several machines that path
// names each machine's own copy, and a copy can be older, cut short or another file. The
// sampler draws every global batch from the sample count (data/sampler.h), so ranks that see
// other counts draw other orders: samples trained twice, others skipped, with nothing said.
// And a copy with the same count but other bytes trains each rank on other data.
//
// The identity is a few lines of text ("<label>\t<key>\t<value>"): the sample count, the
// fields (name, dtype, size) and the CRC-32C of up to kDataProbes samples spread evenly over
// the data, first and last among them. Reading every byte would cost as much as an epoch's
// reading at every start; the probes catch another count, another layout, and copies that
// differ as a whole or at either end, not a change confined to samples between the probes.
#pragma once
#include <cstdint>
#include <string>

#include "data/sample_source.h"

namespace ft {

inline constexpr uint64_t kDataProbes = 64;

// The identity of `source`, its lines labelled `label` (what messages call it: "--data-path
// corpus/"). Reads at most kDataProbes samples. UserError from the source on bad data.
std::string data_identity(const SampleSource& source, const std::string& label);

// "" when the two identities (each the concatenation of data_identity texts) agree; else what
// `here` holds that `rank0` does not, first difference first, as a phrase:
// "--data-path d holds 48 samples (rank 0: 64)", "--data-path d: sample 63's bytes differ
// from rank 0's", "--val-data-path v holds no data (rank 0: 16 samples)".
std::string first_data_difference(const std::string& here, const std::string& rank0);

}  // namespace ft
