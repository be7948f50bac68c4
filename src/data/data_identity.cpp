#include "data/data_identity.h"

#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include "core/crc32c.h"
#include "core/tensor.h"

namespace ft {

namespace {

// Probe i of k over n samples: evenly spread, the first and the last among them.
uint64_t probe_index(uint64_t i, uint64_t k, uint64_t n) {
  if (k <= 1) return 0;
  return static_cast<uint64_t>(static_cast<unsigned __int128>(i) * (n - 1) / (k - 1));
}

struct Line {
  std::string label, key, value;
};

std::vector<Line> read_lines(const std::string& text) {
  std::vector<Line> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find('\t'), b = a == std::string::npos ? a : line.find('\t', a + 1);
    if (b == std::string::npos) continue;  // not an identity line (never written)
    out.push_back({line.substr(0, a), line.substr(a + 1, b - a - 1), line.substr(b + 1)});
  }
  return out;
}

}  // namespace

std::string data_identity(const SampleSource& source, const std::string& label) {
  const uint64_t n = source.num_samples();
  const std::vector<FieldSpec> fields = source.fields();
  std::string out = label + "\tsamples\t" + std::to_string(n) + "\n";
  std::string layout;
  for (const FieldSpec& f : fields)
    layout += (layout.empty() ? "" : ", ") + f.name + " " + dtype_name(f.dtype) + " x" + std::to_string(f.per_sample);
  out += label + "\tfields\t" + layout + "\n";
  std::vector<std::vector<uint8_t>> buffers(fields.size());
  std::vector<void*> dst(fields.size());
  for (size_t f = 0; f < fields.size(); ++f) {
    buffers[f].resize(fields[f].sample_bytes());
    dst[f] = buffers[f].data();
  }
  const uint64_t probes = n < kDataProbes ? n : kDataProbes;
  for (uint64_t i = 0; i < probes; ++i) {
    const uint64_t idx = probe_index(i, probes, n);
    source.read(idx, dst);
    uint32_t crc = 0;
    for (const std::vector<uint8_t>& b : buffers) crc = crc32c(b.data(), b.size(), crc);
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", crc);
    out += label + "\tsample " + std::to_string(idx) + "\t" + hex + "\n";
  }
  return out;
}

std::string first_data_difference(const std::string& here, const std::string& rank0) {
  if (here == rank0) return "";
  const std::vector<Line> mine = read_lines(here), theirs = read_lines(rank0);
  std::map<std::string, std::map<std::string, std::string>> rank0_values;  // label -> key -> value
  for (const Line& l : theirs) rank0_values[l.label][l.key] = l.value;
  std::map<std::string, bool> my_labels;
  for (const Line& l : mine) {
    my_labels[l.label] = true;
    const auto data = rank0_values.find(l.label);
    if (data == rank0_values.end())
      return l.label + " holds " + (l.key == "samples" ? l.value + " samples" : "data") + " (rank 0: no such data)";
    const auto it = data->second.find(l.key);
    if (l.key == "samples" && it != data->second.end() && it->second != l.value)
      return l.label + " holds " + l.value + " samples (rank 0: " + it->second + ")";
    if (l.key == "fields" && it != data->second.end() && it->second != l.value)
      return l.label + "'s samples are " + l.value + " (rank 0: " + it->second + ")";
    if (it == data->second.end() || it->second != l.value)
      return l.label + ": " + l.key + "'s bytes differ from rank 0's (CRC-32C " + l.value +
             (it == data->second.end() ? "; rank 0 read no such sample)" : ", rank 0: " + it->second + ")");
  }
  for (const Line& l : theirs)
    if (!my_labels.count(l.label))
      return l.label + " holds no data (rank 0: " + (l.key == "samples" ? l.value + " samples" : "some") + ")";
  return "";  // the same lines in another order: never written so
}

}  // namespace ft
