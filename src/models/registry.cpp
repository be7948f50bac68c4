#include "models/registry.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "models/cdeit.h"
#include "models/dit.h"
#include "models/gpt2_lm.h"
#include "models/gpt2_rec.h"

namespace ft {

namespace {

nlohmann::json gpt2(int L, int H, int C, int T, int V) { return GPT2Config{L, H, C, T, V}.to_json(); }
// The item count is the data's (train/session.cpp replaces it); ML-1M's 3706 until then.
nlohmann::json gpt2rec(int L, int H, int C, int T) { return GPT2RecConfig{L, H, C, T}.to_json(); }

// DiT for EIT: 64x64 images in 4x4 patches (256 tokens), the 208 voltages as the condition vector.
nlohmann::json dit(int depth, int hidden, int heads, int image = 64) {
  DiTConfig c;
  c.depth = depth;
  c.hidden = hidden;
  c.heads = heads;
  c.patch = 4;
  c.image = image;
  c.in_channels = 1;
  c.cond_channels = 0;
  c.cond_dim = 208;
  return c.to_json();
}

// CDEIT: the condition map as a second input channel, windows in the high-resolution stages
// (models/cdeit_config.h says how these sizes were read from the paper).
nlohmann::json cdeit(int image, int heads, std::vector<int> depths, std::vector<int> widths, std::vector<int> windows) {
  CDEITConfig c;
  c.image = image;
  c.patch = 2;
  c.heads = heads;
  c.depths = std::move(depths);
  c.widths = std::move(widths);
  c.windows = std::move(windows);
  return c.to_json();
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"tiny", "GPT-2 shape, 4 layers, 128 wide, byte vocabulary (0.8 M parameters)", gpt2(4, 4, 128, 128, 257)},
      {"gpt2", "GPT-2 124M", gpt2(12, 12, 768, 1024, 50257)},
      {"gpt2-medium", "GPT-2 350M", gpt2(24, 16, 1024, 1024, 50257)},
      {"gpt2-large", "GPT-2 774M", gpt2(36, 20, 1280, 1024, 50257)},
      {"gpt2-xl", "GPT-2 1.5B", gpt2(48, 25, 1600, 1024, 50257)},
      {"gpt2rec", "GPT-2 recommender over item histories: 2 layers, 2 heads, 64 wide, 200 items of history, BPR",
       gpt2rec(2, 2, 64, 200)},
      {"sasrec", "SASRec's size as a GPT-2 recommender: 2 layers, 1 head, 50 wide, 200 items of history, BPR",
       gpt2rec(2, 1, 50, 200)},
      {"dit-s", "DiT-S/4 for 64x64 EIT images conditioned on the 208 voltages (12 blocks, 384 wide, 6 heads)",
       dit(12, 384, 6)},
      {"dit-b", "DiT-B/4 for 64x64 EIT images conditioned on the 208 voltages (12 blocks, 768 wide, 12 heads)",
       dit(12, 768, 12)},
      {"dit-l", "DiT-L/4 for 64x64 EIT images conditioned on the 208 voltages (24 blocks, 1024 wide, 16 heads)",
       dit(24, 1024, 16)},
      {"dit-tiny", "A small DiT for tests and demos: 2 blocks, 64 wide, 2 heads, 32x32 images in 4x4 patches",
       dit(2, 64, 2, 32)},
      {"cdeit", "CDEIT for 128x128 EIT images with the voltage map as a second channel: patch 2, 4 stages of 2 blocks "
                "(down and up), 512 wide, 8 heads, 16x16 windows in the two high-resolution stages",
       cdeit(128, 8, {2, 2, 2, 2}, {512, 512, 512, 512}, {16, 16, 0, 0})},
      {"cdeit-tiny", "A small CDEIT for tests: 32x32 images in 2x2 patches, 2 stages (2 and 1 blocks), 64 wide, 2 heads, "
                     "4x4 windows in the first stage",
       cdeit(32, 2, {2, 1}, {64, 64}, {4, 0})},
  };
  return presets;
}

std::string model_preset_names() {
  std::string s;
  for (const auto& p : model_presets()) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

nlohmann::json preset_config(const std::string& name) {
  for (const auto& p : model_presets())
    if (p.name == name) return p.config;
  throw UserError("--model: unknown preset '" + name + "' (choose " + model_preset_names() + ")");
}

std::unique_ptr<Model> make_model(const nlohmann::json& config, const std::string& source) {
  FT_USER_CHECK(config.is_object() && config.contains("arch") && config["arch"].is_string(), source,
                ": model configuration lacks its family ('arch')");
  const std::string arch = config["arch"].get<std::string>();
  if (arch == "gpt2") return std::make_unique<GPT2LM>(GPT2Config::from_json(config, source));
  if (arch == "gpt2rec") return std::make_unique<GPT2Rec>(GPT2RecConfig::from_json(config, source));
  if (arch == "dit") return std::make_unique<DiT>(DiTConfig::from_json(config, source));
  if (arch == "cdeit") return std::make_unique<CDEIT>(CDEITConfig::from_json(config, source));
  // the families named by the presets (a family without a preset is one no test covers)
  std::vector<std::string> families;
  std::string known;
  for (const auto& p : model_presets())
    if (const std::string f = p.config["arch"].get<std::string>();
        std::find(families.begin(), families.end(), f) == families.end()) {
      known += families.empty() ? f : ", " + f;
      families.push_back(f);
    }
  throw UserError(source + ": unknown model family '" + arch + "' (this build knows: " + known + ")");
}

}  // namespace ft
