// `fittrain train --task diffusion --model cdeit-tiny` on the CPU: CDEIT takes its condition
// as an image channel, which EIT folders only give at 128x128 (the 16x16 voltage grid
// upsampled x8), so this 32x32 run reads IMAGES.npy,CONDS.npy written here: disc phantoms
// and, as the condition map, each image average-pooled to 4x4 and upsampled back (a blurred
// measurement). The validation loss (fixed timesteps and noise) falls and the arena is the plan.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "core/rng.h"

namespace ft {
namespace {
using namespace ft::testing;

void write_npy(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& data) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += std::to_string(shape[i]) + (shape.size() == 1 ? ",)" : i + 1 < shape.size() ? ", " : ")");
  dict += ", }";
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::ofstream f(path, std::ios::binary);
  const char magic[] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  f.write(magic, 8);
  const uint16_t len = static_cast<uint16_t>(dict.size());
  f.write(reinterpret_cast<const char*>(&len), 2);
  f.write(dict.data(), static_cast<std::streamsize>(dict.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
}

// n phantoms of 32x32 in [-1, 1] (background -0.5, one or two discs) and their condition maps.
std::string write_set(const std::string& dir, const std::string& name, int64_t n, uint64_t seed) {
  const int64_t S = 32, P = 8;  // pooled to 4x4 cells of 8x8 pixels
  std::vector<float> img(static_cast<size_t>(n * S * S), -0.5f), cond(img.size());
  Rng rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    float* im = img.data() + i * S * S;
    const int discs = 1 + static_cast<int>(rng.next_u64() % 2);
    for (int d = 0; d < discs; ++d) {
      const double cx = 6 + 20 * rng.uniform(), cy = 6 + 20 * rng.uniform(), r = 3 + 5 * rng.uniform();
      const float v = rng.uniform() < 0.5 ? 1.0f : -1.0f;
      for (int64_t y = 0; y < S; ++y)
        for (int64_t x = 0; x < S; ++x)
          if ((x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r) im[y * S + x] = v;
    }
    float* c = cond.data() + i * S * S;
    for (int64_t by = 0; by < S / P; ++by)
      for (int64_t bx = 0; bx < S / P; ++bx) {
        double m = 0;
        for (int64_t y = 0; y < P; ++y)
          for (int64_t x = 0; x < P; ++x) m += im[(by * P + y) * S + bx * P + x];
        for (int64_t y = 0; y < P; ++y)
          for (int64_t x = 0; x < P; ++x) c[(by * P + y) * S + bx * P + x] = static_cast<float>(m / (P * P));
      }
  }
  const std::string ip = dir + "/" + name + "_images.npy", cp = dir + "/" + name + "_conds.npy";
  write_npy(ip, {n, S, S}, img);
  write_npy(cp, {n, S * S}, cond);
  return ip + "," + cp;
}

std::vector<nlohmann::json> records(const std::string& path) {
  std::vector<nlohmann::json> r;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) r.push_back(nlohmann::json::parse(line));
  return r;
}

TEST(CdeitE2E, TrainTheValidationLossFalls) {
  const std::string dir = temp_dir("cdeit_e2e");
  const std::string train = write_set(dir, "train", 64, 1), valid = write_set(dir, "valid", 16, 2);
  const std::string out = dir + "/run", metrics = out + "/m.jsonl";
  const CmdResult r = run_fittrain("train --task diffusion --model cdeit-tiny --device cpu --data-path " + train +
                                       " --val-data-path " + valid +
                                       " --global-batch-size 16 --max-steps 30 --lr 2e-3 --warmup-steps 5 --log-every 5"
                                       " --eval-every 1 --eval-batches 0 --ckpt-every 0 --results-dir " + out +
                                       " --metrics-file " + metrics,
                                   900);
  ASSERT_EQ(r.status, 0) << r.output;
  double first = -1, last = -1;
  for (const nlohmann::json& j : records(metrics)) {
    if (j.contains("val_loss")) {
      if (first < 0) first = j["val_loss"].get<double>();
      last = j["val_loss"].get<double>();
    }
    if (j.contains("mem_peak_bytes")) EXPECT_EQ(j["mem_peak_bytes"], j["mem_planned_bytes"]);
  }
  ASSERT_GT(first, 0) << r.output;
  EXPECT_LT(last, 0.85 * first) << "first " << first << " last " << last << "\n" << r.output;
}

TEST(CdeitE2E, BadInputNamesTheFlag) {
  const std::string dir = temp_dir("cdeit_e2e_bad");
  const std::string res = " --max-steps 1 --device cpu --results-dir " + dir + "/r";
  expect_error("train --task diffusion --model cdeit-tiny --image-size 30" + res, {"must halve evenly"});
  expect_error("train --model cdeit-tiny --n-layer 3" + res, {"--n-layer does not apply to model family cdeit"});
  expect_error("train --model cdeit-tiny --cond vector" + res, {"--cond applies to the diffusion model"});
}

}  // namespace
}  // namespace ft
