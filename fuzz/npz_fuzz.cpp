// libFuzzer target: numpy's formats on arbitrary bytes — the input parsed as an .npy array,
// as a zip archive (.npz / .pth) with every member read and parsed as an .npy, and, when it is
// an archive with a usable 'ys' member, as the one sample file of an EIT split opened by
// EitDataset (vector mode) and read. A malformed input must be refused with ft::UserError;
// anything else (a crash, a sanitizer report, another exception, an allocation past
// -rss_limit_mb) is a bug.

#include <cstdint>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "data/eit_dataset.h"
#include "data/npy.h"
#include "data/zip_archive.h"
#include "fuzz_util.h"

namespace {

float checksum(const std::vector<float>& v) {
  float s = 0;
  for (float x : v) s += x;
  return s;
}

// The input as train/00000.npz of a folder of its own, with mean/std of ones: the dataset's
// member and shape checks and the conversions run on it.
void as_eit_sample(const uint8_t* data, size_t size, int64_t measurements) {
  namespace fs = std::filesystem;
  static const std::string dir = ft::fuzz::scratch_path("eit");  // removed at exit
  fs::create_directories(dir + "/train");
  std::FILE* f = std::fopen((dir + "/train/00000.npz").c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  const std::vector<float> ones(static_cast<size_t>(measurements), 1.f);
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(ones.data()), ones.size() * 4);
  ft::write_zip(dir + "/mean.pth", std::vector<ft::ZipEntry>{{"mean/data/0", bytes}});
  ft::write_zip(dir + "/std.pth", std::vector<ft::ZipEntry>{{"std/data/0", bytes}});
  ft::EitOptions opt;
  opt.cond_mode = ft::EitCondMode::kVector;
  opt.voltages_field = true;
  const ft::EitDataset ds(dir, opt);
  std::vector<std::vector<float>> fields;
  std::vector<void*> dst;
  for (const auto& spec : ds.fields()) fields.emplace_back(static_cast<size_t>(spec.per_sample));
  for (auto& v : fields) dst.push_back(v.data());
  ds.read(0, dst);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  float sum = 0;
  try {
    sum += checksum(ft::parse_npy(bytes, "fuzz.npy").data);
  } catch (const ft::UserError&) {
  }
  int64_t measurements = 0;
  try {
    const ft::ZipArchive z(bytes, "fuzz.npz");
    for (const ft::ZipMember& m : z.members()) {
      try {
        const std::vector<uint8_t> member = z.read(m);
        const ft::NpyArray a = ft::parse_npy(member, "fuzz.npz: member '" + m.name + "'");
        sum += checksum(a.data);
        if (m.name == "ys.npy") measurements = static_cast<int64_t>(a.data.size());
      } catch (const ft::UserError&) {
      }
    }
  } catch (const ft::UserError&) {
  }
  if (measurements > 0 && measurements <= (1 << 16)) {
    try {
      as_eit_sample(data, size, measurements);
    } catch (const ft::UserError&) {
    }
  }
  if (sum == 12345.678f) std::abort();  // keeps the reads
  return 0;
}
