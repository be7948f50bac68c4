// Hugging Face interchange through the binary: a trained small model exported with
// `fittrain export --format hf` comes back through --init-from with bitwise the same fp32
// parameters and the same evaluation loss; --init-from's refusals and its --resume rules.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "cli/cli_util.h"
#include "models/registry.h"
#include "train/checkpoint_dir.h"
#include "train/hf_interchange.h"
#include "train/model_io.h"

namespace ft {
namespace {
using namespace ft::testing;

std::string loss_text(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex(": loss ([0-9.]+)")) ? m[1].str() : "";
}

TEST(HfE2E, ExportThenInitFromIsBitwiseTheSameModel) {
  const std::string dir = temp_dir("hf_e2e");
  const std::string run = dir + "/run", hf = dir + "/hf";
  CmdResult r = run_fittrain(std::string("train ") + kSmallModel + " --results-dir " + run +
                             " --max-steps 20 --lr 3e-3 --warmup-steps 2 --eval-every 0 --eval-batches 2 --log-every 10");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_fittrain("export --format hf --checkpoint auto --results-dir " + run + " --out " + hf);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("(step 20)"), std::string::npos) << r.output;
  ASSERT_TRUE(std::filesystem::exists(hf + "/model.safetensors")) << r.output;
  ASSERT_TRUE(std::filesystem::exists(hf + "/config.json")) << r.output;

  // The import path (train/test --init-from use it) gives the checkpoint's parameters bitwise.
  const std::string ckpt = find_checkpoint("auto", run, true);
  const std::unique_ptr<Model> model = make_model(checkpoint_model_config(ckpt), "test");
  std::vector<float> host(static_cast<size_t>(model->num_params()));
  load_hf_params(hf, *model, host.data());
  const std::vector<float> saved = checkpoint_floats(ckpt, "params");
  ASSERT_EQ(saved.size(), host.size());
  EXPECT_EQ(std::memcmp(saved.data(), host.data(), host.size() * 4), 0);

  // Same evaluation loss from the checkpoint and from the exported folder.
  CmdResult a = run_fittrain("test --results-dir " + run + " --eval-batches 4 --dump-logits " + dir + "/a.npy");
  CmdResult b =
      run_fittrain("test --results-dir " + run + " --eval-batches 4 --init-from " + hf + " --dump-logits " + dir + "/b.npy");
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_FALSE(loss_text(a.output).empty()) << a.output;
  EXPECT_EQ(loss_text(a.output), loss_text(b.output)) << a.output << b.output;
  EXPECT_NE(b.output.find("(Hugging Face weights)"), std::string::npos) << b.output;
  // And the same logits, bitwise: a NumPy .npy of fp32 [b, T, V].
  const std::string la = read_file(dir + "/a.npy"), lb = read_file(dir + "/b.npy");
  EXPECT_EQ(la.substr(0, 6), "\x93NUMPY");
  EXPECT_NE(la.find("'shape': (16, 64, 257)"), std::string::npos) << la.substr(0, 128);
  EXPECT_EQ(la.size(), 128u + 16u * 64u * 257u * 4u);
  EXPECT_TRUE(la == lb);

  // A fresh run from the folder: its shape from config.json, its weights loaded; its first
  // step's loss is the trained model's, below a fresh model's log(257) = 5.55.
  const std::string ft = dir + "/finetune";
  const std::string metrics = dir + "/ft.jsonl";
  r = run_fittrain("train --init-from " + hf + " --global-batch-size 16 --results-dir " + ft +
                   " --max-steps 2 --log-every 1 --eval-every 0 --eval-batches 1 --metrics-file " + metrics);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("init-from  " + hf + "/model.safetensors"), std::string::npos) << r.output;
  const auto losses = step_losses(metrics);
  ASSERT_EQ(losses.count(1), 1u) << r.output;
  EXPECT_LT(losses.at(1), 5.0) << r.output;
  EXPECT_EQ(checkpoint_model_config(find_checkpoint("auto", ft, true)), checkpoint_model_config(ckpt));

  // --resume auto finds that run's checkpoint: it continues, the folder is not loaded again.
  r = run_fittrain("train --init-from " + hf + " --global-batch-size 16 --results-dir " + ft +
                   " --max-steps 3 --eval-every 0 --eval-batches 1 --resume auto");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed    from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not loaded: the run continues from its checkpoint"), std::string::npos) << r.output;

  // Refusals: a model flag against config.json, a named checkpoint besides the folder.
  r = run_fittrain("train --init-from " + hf + " --n-layer 3 --results-dir " + dir + "/x --max-steps 1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--n-layer 3 conflicts with " + hf + "/config.json: n_layer 2"), std::string::npos)
      << r.output;
  r = run_fittrain("train --init-from " + hf + " --resume " + ckpt + " --results-dir " + dir + "/y --max-steps 1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--init-from " + hf + " and --resume " + ckpt + ": give one"), std::string::npos)
      << r.output;
  r = run_fittrain("test --init-from " + hf + " --checkpoint " + ckpt + " --results-dir " + run);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("give one"), std::string::npos) << r.output;
  // export's own flags only; a missing checkpoint is named.
  r = run_fittrain("export --format onnx --results-dir " + run + " --out " + dir + "/o");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--format onnx"), std::string::npos) << r.output;
  r = run_fittrain("export --results-dir " + dir + "/empty --out " + dir + "/o");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("no valid checkpoint"), std::string::npos) << r.output;
  r = run_fittrain("plan --init-from " + hf + " --global-batch-size 16");
  EXPECT_EQ(r.status, 0) << r.output;
}

}  // namespace
}  // namespace ft
