// Diffusion evaluation end to end on the CPU (32x32 EIT set, dit-tiny): training evaluations
// print DDIM image metrics beside the TR baseline's (and the xs_gn baseline's when the files
// have it), the EMA of the weights follows its closed
// form step by step, survives the checkpoint and continues bit for bit on resume, `fittrain
// test` evaluates the EMA weights, `fittrain sample` writes PNGs and a .npy, and `plan` shows
// the EMA buffer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/cli_util.h"
#include "data/npz_rewrite.h"

namespace ft {
namespace {
using namespace ft::testing;

const std::string& eit_set() {
  static const std::string dir = [] {
    const std::string d = temp_dir("ddim_e2e") + "/eit32";
    const CmdResult r =
        run_fittrain("prepare --synthetic eit --out " + d + " --train 64 --valid 16 --test 16 --image-size 32", 120);
    EXPECT_EQ(r.status, 0) << r.output;
    return d;
  }();
  return dir;
}

std::string ckpt(const std::string& results, int step) {
  char name[64];
  std::snprintf(name, sizeof name, "/checkpoints/ckpt_step_%08d.ftc", step);
  return results + name;
}

// Every step averages (--ema-every 1) with a constant decay 0.9 (--ema-power 0) after
// ema_pytorch's two copies (steps 1 and 2); a constant learning rate so that a run cut at
// step 3 and resumed takes the same steps as one that is not.
std::string train_args(const std::string& results, int steps) {
  return "train --task diffusion --model dit-tiny --device cpu --data-path " + eit_set() +
         " --global-batch-size 8 --max-steps " + std::to_string(steps) +
         " --eval-every 3 --eval-batches 1 --eval-images 4 --ckpt-every 1 --keep-checkpoints 0 --ema-decay 0.9"
         " --ema-every 1 --ema-warmup 0 --ema-power 0 --lr 1e-3 --warmup-steps 0 --min-lr-ratio 1 --log-every 3"
         " --results-dir " + results;
}

TEST(DiffusionEval, MetricsEmaCheckpointsResumeTestAndSample) {
  const std::string a = temp_dir("ddim_e2e_a");
  CmdResult r = run_fittrain(train_args(a, 6), 120);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* m : {"| rmse ", "| psnr ", "| ssim ", "| tr_rmse ", "| tr_psnr ", "| tr_ssim "})
    EXPECT_NE(r.output.find(m), std::string::npos) << m << "\n" << r.output;
  EXPECT_NE(r.output.find("optimizer (Adam m, v; EMA of weights)"), std::string::npos) << r.output;

  // The EMA against its closed form, from each step's weights (fp32 params on the CPU).
  std::vector<float> want;
  for (int k = 1; k <= 6; ++k) {
    const std::vector<float> w = checkpoint_floats(ckpt(a, k), "params");
    if (k <= 2) want = w;  // ema_pytorch's copies (call 0, and epoch 0 of the ramp)
    else
      for (size_t i = 0; i < w.size(); ++i) want[i] = want[i] - (want[i] - w[i]) * (1.f - 0.9f);
    const std::vector<float> ema = checkpoint_floats(ckpt(a, k), "ema");
    ASSERT_EQ(ema.size(), want.size());
    for (size_t i = 0; i < ema.size(); i += 31) ASSERT_NEAR(ema[i], want[i], 1e-6) << "step " << k << " element " << i;
  }
  // The EMA differs from the weights after a few averages.
  EXPECT_NE(checkpoint_floats(ckpt(a, 6), "ema"), checkpoint_floats(ckpt(a, 6), "params"));

  // Cut at step 3 and resumed: the same EMA (and weights) at step 6, bit for bit.
  const std::string b = temp_dir("ddim_e2e_b");
  r = run_fittrain(train_args(b, 3), 120);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_fittrain(train_args(b, 6) + " --resume auto", 120);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed    from"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("the checkpoint had none"), std::string::npos) << r.output;
  EXPECT_EQ(checkpoint_floats(ckpt(b, 6), "ema"), checkpoint_floats(ckpt(a, 6), "ema"));
  EXPECT_EQ(checkpoint_floats(ckpt(b, 6), "params"), checkpoint_floats(ckpt(a, 6), "params"));

  // test: the EMA weights, with the image metrics on test/
  r = run_fittrain("test --device cpu --eval-images 4 --results-dir " + a + " --data-path " + eit_set(), 120);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* m : {"(step 6, EMA weights) on test split (test/)", "| psnr ", "| ssim ", "| tr_psnr "})
    EXPECT_NE(r.output.find(m), std::string::npos) << m << "\n" << r.output;
  EXPECT_EQ(r.output.find("gn_psnr"), std::string::npos) << r.output;  // the synthetic set has no xs_gn

  // CDEIT's files also carry xs_gn (Gauss-Newton): a copy of the set whose test files hold TR
  // again as xs_gn reports gn_* metrics, equal to tr_*.
  const std::string gn_set = temp_dir("ddim_e2e_gn") + "/eit32";
  std::filesystem::copy(eit_set(), gn_set, std::filesystem::copy_options::recursive);
  for (const auto& f : std::filesystem::directory_iterator(gn_set + "/test"))
    test::rewrite_npz(f.path().string(), f.path().string(), {"xs.npy", "ys.npy", "TR.npy"},
                      {{"xs_gn.npy", "TR.npy"}});
  r = run_fittrain("test --device cpu --eval-images 4 --results-dir " + a + " --data-path " + gn_set, 120);
  ASSERT_EQ(r.status, 0) << r.output;
  auto metric = [&](const std::string& name) {
    const size_t at = r.output.find("| " + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(r.output.substr(at + name.size() + 3));
  };
  for (const char* m : {"rmse", "psnr", "ssim"}) {
    ASSERT_GE(metric(std::string("gn_") + m), 0.0) << m << "\n" << r.output;
    EXPECT_EQ(metric(std::string("gn_") + m), metric(std::string("tr_") + m)) << m << "\n" << r.output;
  }

  // sample: PNGs and one .npy [N, H, W]
  const std::string out = temp_dir("ddim_e2e_samples");
  r = run_fittrain("sample --device cpu --num-images 3 --results-dir " + a + " --data-path " + eit_set() +
                       " --out " + out,
                   120);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("3 reconstructions of the test split (test/)"), std::string::npos) << r.output;
  for (int i = 0; i < 3; ++i)
    for (const char* kind : {"recon", "compare"}) {
      char name[64];
      std::snprintf(name, sizeof name, "/%s_%05d.png", kind, i);
      std::ifstream f(out + name, std::ios::binary);
      ASSERT_TRUE(f) << out + name;
      std::string sig(8, '\0');
      f.read(sig.data(), 8);
      EXPECT_EQ(sig, std::string("\x89PNG\r\n\x1a\n", 8)) << name;
    }
  EXPECT_FALSE(std::filesystem::exists(out + "/recon_00003.png"));
  std::ifstream npy(out + "/reconstructions.npy", std::ios::binary);
  ASSERT_TRUE(npy);
  std::string head(128, '\0');
  npy.read(head.data(), 128);
  EXPECT_EQ(head.substr(0, 6), "\x93NUMPY");
  EXPECT_NE(head.find("'shape': (3, 32, 32)"), std::string::npos) << head;
  EXPECT_NE(head.find("'descr': '<f4'"), std::string::npos) << head;
  EXPECT_EQ(std::filesystem::file_size(out + "/reconstructions.npy") % 64, 0u);  // header padded, 3*32*32*4 data
}

TEST(DiffusionEval, PlanShowsTheEmaAndFlagsAreChecked) {
  CmdResult r = run_fittrain("plan --task diffusion --model dit-tiny --device cpu --json", 60);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\"ema\":true"), std::string::npos) << r.output;
  r = run_fittrain("plan --task diffusion --model dit-tiny --device cpu --json --ema-decay 0", 60);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\"ema\":false"), std::string::npos) << r.output;
  r = run_fittrain("plan --model tiny --device cpu --json", 60);  // other tasks: off unless asked
  EXPECT_NE(r.output.find("\"ema\":false"), std::string::npos) << r.output;
  const std::string res = " --device cpu --results-dir " + temp_dir("ddim_e2e_bad");
  expect_error("plan --model dit-tiny --ema-decay 1" + res, {"--ema-decay must be in [0, 1)"});
  expect_error("plan --model dit-tiny --ema-every 0" + res, {"--ema-every must be >= 1"});
  expect_error("plan --model dit-tiny --eta 2" + res, {"--eta must be in [0, 1]"});
  expect_error("plan --model dit-tiny --sample-steps 0" + res, {"--sample-steps must be in [1, 1000]"});
  expect_error("sample --num-images 0" + res, {"--num-images must be >= 1"});
}

}  // namespace
}  // namespace ft
