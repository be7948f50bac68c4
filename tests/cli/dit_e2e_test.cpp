// `fittrain prepare --synthetic eit` then `fittrain train --task diffusion --model dit-tiny` on
// the CPU: the validation loss (fixed timesteps and noise) falls, the arena is the plan, and
// `fittrain test` evaluates the test split; bad input names the flag.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/cli_util.h"

namespace ft {
namespace {
using namespace ft::testing;

std::vector<nlohmann::json> records(const std::string& path) {
  std::vector<nlohmann::json> r;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) r.push_back(nlohmann::json::parse(line));
  return r;
}

// One small EIT set for the tests of this file (32x32 images, 64 train samples).
const std::string& eit_set() {
  static const std::string dir = [] {
    const std::string d = temp_dir("dit_e2e") + "/eit32";
    const CmdResult r =
        run_fittrain("prepare --synthetic eit --out " + d + " --train 64 --valid 16 --test 16 --image-size 32", 120);
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("64 train, 16 valid, 16 test samples of 32x32 images and 208 voltages"),
              std::string::npos)
        << r.output;
    return d;
  }();
  return dir;
}

TEST(DiffusionE2E, PrepareThenTrainTheValidationLossFalls) {
  const std::string data = eit_set();
  for (const char* split : {"train", "valid", "test"})
    EXPECT_TRUE(std::filesystem::is_regular_file(data + "/" + split + "/00000.npz")) << split;
  EXPECT_TRUE(std::filesystem::is_regular_file(data + "/mean.pth"));
  const std::string out = temp_dir("dit_e2e_train");
  const std::string metrics = out + "/m.jsonl";
  // --eval-images 0: the DDIM image metrics are tests/cli/ddim_e2e_test.cpp's (80 evaluations
  // of them would double this test's time)
  CmdResult r = run_fittrain("train --task diffusion --model dit-tiny --device cpu --data-path " + data +
                                 " --global-batch-size 16 --max-steps 80 --lr 2e-3 --warmup-steps 5 --log-every 5"
                                 " --eval-every 1 --eval-batches 0 --eval-images 0 --ckpt-every 0 --results-dir " + out +
                                 " --metrics-file " + metrics,
                             600);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("(EIT folder, 32x32, voltage vector) (task diffusion): 64 train samples"), std::string::npos)
      << r.output;
  double first = -1, last = -1;
  for (const nlohmann::json& j : records(metrics)) {
    if (j.contains("val_loss")) {
      if (first < 0) first = j["val_loss"].get<double>();
      last = j["val_loss"].get<double>();
    }
    if (j.contains("mem_peak_bytes")) EXPECT_EQ(j["mem_peak_bytes"], j["mem_planned_bytes"]);
  }
  ASSERT_GT(first, 0) << r.output;
  // After one warm-up step the model predicts ~0 (adaLN-Zero): the loss is the images' mean
  // square; 80 steps must do clearly better on the same noisy images.
  EXPECT_LT(last, 0.85 * first) << "first " << first << " last " << last << "\n" << r.output;
  // `fittrain test` on the checkpoint evaluates test/
  r = run_fittrain("test --device cpu --results-dir " + out + " --data-path " + data, 120);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("on test split (test/): loss "), std::string::npos) << r.output;
  // sample reconstructs from the data's conditions: it needs the data
  expect_error("sample --device cpu --results-dir " + out, {"--task diffusion needs --data-path"});
  // token generation's flags do not apply: refused, not ignored
  expect_error("sample --device cpu --results-dir " + out + " --data-path " + data + " --prompt hi",
               {"--prompt: ", "trained for task diffusion", "generates no tokens"});
  expect_error("sample --device cpu --results-dir " + out + " --data-path " + data + " --top-p 0.5", {"--top-p: "});
}

TEST(DiffusionE2E, BadInputNamesTheFlag) {
  const std::string data = eit_set();
  const std::string res = " --max-steps 1 --device cpu --results-dir " + temp_dir("dit_e2e_bad");
  expect_error("train --task diffusion --model dit-tiny" + res, {"--task diffusion needs --data-path"});
  expect_error("train --task diffusion --model dit-tiny --data-path " + data + " --image-size 64" + res,
               {"--data-path " + data, "32x32", "--image-size is 64", "--image-size 32"});
  expect_error("train --task diffusion --model dit-tiny --data-path " + data + " --patch-size 5" + res,
               {"--image-size 32 must be a multiple of --patch-size 5"});
  expect_error("train --task diffusion --model dit-tiny --data-path " + data + " --cond channel" + res,
               {"--data-path", "--cond channel"});
  expect_error("train --task diffusion --model dit-tiny --data-path " + data + "/nothing" + res,
               {"--data-path", "no such folder"});
  expect_error("train --task diffusion --model tiny --data-path " + data + res, {"not a diffusion model"});
  expect_error("train --model dit-tiny --cond pixels" + res, {"--cond must be vector, channel or none"});
  expect_error("train --model tiny --image-size 32" + res, {"--image-size does not apply to model family gpt2"});
  expect_error("prepare --synthetic eit --out " + temp_dir("dit_e2e_p") + " --train 1", {"--train 1"});
  expect_error("prepare --synthetic movielens --out " + temp_dir("dit_e2e_q") + " --valid 3",
               {"applies to --synthetic eit only"});
  expect_error("prepare --synthetic eit --out " + data, {"already holds an EIT set", "--overwrite"});
}

}  // namespace
}  // namespace ft
