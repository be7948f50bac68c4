// Writes the seed inputs of fuzz/corpus/ (run by scripts/fuzz.sh --seeds): a valid shard in
// each format, a valid checkpoint with two small sections, and the tiny preset's model
// configuration, small Parquet files of each layout the reader supports (written by the
// tests' Parquet writer), and numpy's formats: a small CDEIT-layout .npz sample and a
// mean.pth as write_eit_folder writes them, an .npz like np.savez_compressed's (DEFLATE,
// zip64 size fields, float64, Fortran order) and a plain Fortran-order .npy. The fuzzers
// mutate these; crashes they find are added next to them.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../tests/data/parquet_test_writer.h"
#include "../tests/data/zip_test_util.h"
#include "data/eit_dataset.h"
#include "data/npy.h"
#include "data/token_shard.h"
#include "models/registry.h"
#include "train/checkpoint.h"

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "fuzz/corpus";
  std::vector<uint32_t> small = {1, 2, 3, 65535, 0, 7}, wide = {1, 70000, 3};
  ft::write_shard(dir + "/token_shard/seed_u16.bin", small);
  ft::write_shard(dir + "/token_shard/seed_u32.bin", wide);
  const float params[4] = {1.f, -2.f, 0.5f, 0.f};
  const unsigned char bytes[3] = {7, 8, 9};
  ft::CheckpointSection sections[2] = {{"params", params, sizeof params, "f32"}, {"extra", bytes, sizeof bytes, "u8"}};
  ft::write_checkpoint(dir + "/checkpoint/seed.ftc", {{"format", "fittrain"}, {"step", 3}}, sections);
  std::ofstream(dir + "/model_config/tiny.json") << ft::preset_config("tiny").dump();
  std::ofstream(dir + "/model_config/gpt2.json") << ft::preset_config("gpt2").dump();
  std::filesystem::create_directories(dir + "/parquet");
  for (const auto& [name, bytes] : ft::test::pq::fuzz_seed_files())
    std::ofstream(dir + "/parquet/" + name, std::ios::binary) << bytes;
  // npz: small sizes (8 x 8 images, 10 voltages) keep the inputs, and so the fuzzer, fast.
  std::filesystem::create_directories(dir + "/npz");
  const std::string eit = std::filesystem::temp_directory_path() / "fittrain_eit_seeds";
  ft::EitWriteSpec spec;
  spec.train = 2;
  spec.image_size = 8;
  spec.measurements = 10;
  ft::write_eit_folder(eit, spec, [](int, int64_t i, ft::EitSampleArrays& a) {
    for (size_t k = 0; k < a.xs.size(); ++k) a.xs[k] = static_cast<float>(k) * 0.5f + static_cast<float>(i);
    for (size_t k = 0; k < a.ys.size(); ++k) a.ys[k] = static_cast<float>(k * (i + 1));
    for (size_t k = 0; k < a.tr.size(); ++k) a.tr[k] = -a.xs[k];
  });
  std::filesystem::copy_file(eit + "/train/00000.npz", dir + "/npz/eit_sample.npz",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(eit + "/mean.pth", dir + "/npz/mean.pth", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::remove_all(eit);
  const std::vector<double> img = {0, 4, 1, 5, 2, 6, 3, 7}, ys = {1.5, -2, 3};
  const auto xs_npy = ft::test::npy_raw("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 4), }", ft::test::byte_span(img));
  const auto ys_npy = ft::test::npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 1), }", ft::test::byte_span(ys));
  ft::test::write_vec(dir + "/npz/compressed.npz",
                      ft::test::make_zip({{"xs.npy", xs_npy, true, true}, {"ys.npy", ys_npy, true, true}}));
  const std::vector<float> arr = {1, 2, 3, 4, 5, 6};
  ft::test::write_vec(dir + "/npz/fortran.npy", ft::npy_bytes(std::vector<int64_t>{2, 3}, arr, true));
  std::printf("seeds written under %s\n", dir.c_str());
  return 0;
}
