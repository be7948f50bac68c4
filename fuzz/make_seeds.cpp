// Writes the seed inputs of fuzz/corpus/ (run by scripts/fuzz.sh --seeds): a valid shard in
// each format, a valid checkpoint with two small sections, and the tiny preset's model
// configuration, and small Parquet files of each layout the reader supports (written by the
// tests' Parquet writer). The fuzzers mutate these; crashes they find are added next to them.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../tests/data/parquet_test_writer.h"
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
  std::printf("seeds written under %s\n", dir.c_str());
  return 0;
}
