// Hugging Face interchange for the GPT-2 family: fittrain's parameters <-> a folder that
// transformers' GPT2LMHeadModel.from_pretrained loads (model.safetensors + config.json).
//
// Names and layouts (HF's GPT-2 uses Conv1D, whose weight is [in, out]: the transpose of
// fittrain's Linear-style [out, in] matrices, models/gpt2_backbone.cpp add_params):
//   transformer.wte.weight [V, C]     wte [Vp, C], its first V rows (the padded rows are zero)
//   transformer.wpe.weight [T, C]     wpe
//   transformer.h.{l}.ln_1.weight/bias [C]           ln1w/ln1b, layer l
//   transformer.h.{l}.attn.c_attn.weight [C, 3C]     qkvw [3C, C] transposed
//   transformer.h.{l}.attn.c_attn.bias [3C]          qkvb
//   transformer.h.{l}.attn.c_proj.weight [C, C]      attprojw transposed
//   transformer.h.{l}.attn.c_proj.bias [C]           attprojb
//   transformer.h.{l}.ln_2.weight/bias [C]           ln2w/ln2b
//   transformer.h.{l}.mlp.c_fc.weight [C, 4C]        fcw [4C, C] transposed
//   transformer.h.{l}.mlp.c_fc.bias [4C]             fcb
//   transformer.h.{l}.mlp.c_proj.weight [4C, C]      fcprojw [C, 4C] transposed
//   transformer.h.{l}.mlp.c_proj.bias [C]            fcprojb
//   transformer.ln_f.weight/bias [C]                 lnfw/lnfb
// lm_head.weight is tied to wte: export omits it (as save_pretrained does); import accepts it
// when it equals wte. Import also accepts files without the "transformer." prefix (the older
// released GPT-2 files) and ignores the attention-mask buffers (attn.bias, attn.masked_bias).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/gpt2_config.h"
#include "models/model.h"
#include "train/config.h"

namespace ft {

inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfConfigFile = "config.json";

// What fittrain takes from DIR/config.json: the shape (seq_len = n_positions). UserError
// naming the file for another model type, a missing key, or a setting fittrain's GPT-2 does
// not compute (activation, layernorm epsilon, n_inner, attention scaling, untied head).
GPT2Config read_hf_gpt2_config(const std::string& dir);

// The model configuration of a run with --init-from DIR (train, plan, test): config.json's
// shape; a model flag that disagrees is a UserError naming the flag and both values, except
// --seq-len below n_positions (fine-tuning on shorter windows: wpe's first rows are taken).
nlohmann::json init_from_model_config(const RunConfig& rc);

// DIR/model.safetensors into the model's flat fp32 layout, tensor by tensor: put(offset, data,
// count) receives elements [offset, offset + count) of the layout for each tensor in turn
// (ModelRuntime::load_params_range; what no tensor covers, the padded vocabulary rows, is
// left alone). UserError naming the file and the tensor for a missing, misshapen, non-float
// or unexpected tensor, before that tensor is put. `model` must be of family gpt2. Host
// memory: one tensor at a time, transposed beside itself (hf_import_host_bytes).
using HfParamSink = std::function<void(int64_t offset, const float* data, int64_t count)>;
void load_hf_params(const std::string& dir, const Model& model, const HfParamSink& put);
// The same into host fp32 memory of model.num_params() (padded vocabulary rows zero).
void load_hf_params(const std::string& dir, const Model& model, float* host);
// The host bytes load_hf_params holds at once for DIR's model: its largest tensor, twice when
// transposed (the host plan's "Hugging Face tensors (--init-from)").
size_t hf_import_host_bytes(const std::string& dir);

// `fittrain export --format hf`: the checkpoint's fp32 weights (master weights when present)
// into out_dir/model.safetensors and out_dir/config.json (and the SentencePiece model as
// out_dir/tokenizer.model when the checkpoint records one). Host only; no device needed. A
// folder that already holds model.safetensors or config.json is refused unless `overwrite`
// (--overwrite); a replaced one loses its config first and gets the new one last, and an
// earlier tokenizer.model goes when this checkpoint records none.
struct HfExportSummary {
  std::string weights, config, tokenizer;  // files written (tokenizer: "" when none)
  int64_t tensors = 0, step = 0;
  int eos_token_id = 0;
};
HfExportSummary export_hf(const std::string& checkpoint, const std::string& out_dir,
                          const std::string& tokenizer_override = "", bool overwrite = false);

// The CLI command: resolves --checkpoint (auto: newest in --results-dir), checks --format.
int run_export(const RunConfig& rc);

// The HF tensors of a GPT-2 configuration and where each lives in fittrain's layout (for
// tests and the two directions above).
struct HfTensorMap {
  std::string name;            // without the "transformer." prefix for backbone tensors
  std::string entry;           // fittrain ParamTable entry
  int layer = -1;              // per-layer entries: the layer
  bool transpose = false;      // Conv1D weight: HF [in, out] = fittrain [out, in] transposed
  std::vector<int64_t> shape;  // HF shape
};
std::vector<HfTensorMap> hf_gpt2_tensors(const GPT2Config& c);

}  // namespace ft
