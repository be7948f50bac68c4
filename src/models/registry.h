// The model registry: every model family and every preset, in one place. A preset is a
// family plus a full configuration; `--model NAME` picks one, and flags such as --n-layer
// override keys of it. Checkpoints record the family and configuration, and make_model()
// rebuilds the model from them alone.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"

namespace ft {

struct ModelPreset {
  std::string name;       // --model NAME
  std::string summary;    // for --help and errors
  nlohmann::json config;  // includes "arch": the family
};

const std::vector<ModelPreset>& model_presets();
// "tiny, gpt2, ..." for messages.
std::string model_preset_names();
// The preset's configuration; UserError listing the presets when unknown.
nlohmann::json preset_config(const std::string& name);
// Builds a model from a configuration ("arch" names the family). UserError naming `source`
// for an unknown family or a bad configuration.
std::unique_ptr<Model> make_model(const nlohmann::json& config, const std::string& source);

}  // namespace ft
