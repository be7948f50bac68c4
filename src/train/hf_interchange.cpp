// Hugging Face interchange (GPT-2): export of a checkpoint, import for --init-from. The layout
// table is in hf_interchange.h; hf_gpt2_tensors() is its one implementation.
#include "train/hf_interchange.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/half.h"
#include "data/tokenizer.h"
#include "models/registry.h"
#include "train/checkpoint.h"
#include "train/model_io.h"
#include "train/safetensors.h"
#include "train/step_guard.h"

namespace ft {

namespace fs = std::filesystem;

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Where a mapped tensor starts in the flat buffer, and how many elements fittrain holds there.
int64_t flat_offset(const ParamTable& t, const HfTensorMap& m) {
  const ParamEntry& e = t.at(m.entry);
  return m.layer < 0 ? e.offset : e.offset + m.layer * (e.count / e.shape[0]);
}

// src [R, K] row-major -> dst [K, R].
void transpose(const float* src, int64_t R, int64_t K, float* dst) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) dst[k * R + r] = src[r * K + k];
}

GPT2Config gpt2_config_of(const Model& model, const std::string& what) {
  FT_USER_CHECK(model.family() == "gpt2", what, ": model family '", model.family(),
                "' has no Hugging Face mapping (only gpt2 exports and imports)");
  return GPT2Config::from_json(model.config(), what);
}

}  // namespace

std::vector<HfTensorMap> hf_gpt2_tensors(const GPT2Config& c) {
  const int64_t C = c.n_embd;
  std::vector<HfTensorMap> out;
  out.push_back({"wte.weight", "wte", -1, false, {c.vocab_size, C}});
  out.push_back({"wpe.weight", "wpe", -1, false, {c.seq_len, C}});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    out.push_back({h + "ln_1.weight", "ln1w", l, false, {C}});
    out.push_back({h + "ln_1.bias", "ln1b", l, false, {C}});
    out.push_back({h + "attn.c_attn.weight", "qkvw", l, true, {C, 3 * C}});
    out.push_back({h + "attn.c_attn.bias", "qkvb", l, false, {3 * C}});
    out.push_back({h + "attn.c_proj.weight", "attprojw", l, true, {C, C}});
    out.push_back({h + "attn.c_proj.bias", "attprojb", l, false, {C}});
    out.push_back({h + "ln_2.weight", "ln2w", l, false, {C}});
    out.push_back({h + "ln_2.bias", "ln2b", l, false, {C}});
    out.push_back({h + "mlp.c_fc.weight", "fcw", l, true, {C, 4 * C}});
    out.push_back({h + "mlp.c_fc.bias", "fcb", l, false, {4 * C}});
    out.push_back({h + "mlp.c_proj.weight", "fcprojw", l, true, {4 * C, C}});
    out.push_back({h + "mlp.c_proj.bias", "fcprojb", l, false, {C}});
  }
  out.push_back({"ln_f.weight", "lnfw", -1, false, {C}});
  out.push_back({"ln_f.bias", "lnfb", -1, false, {C}});
  return out;
}

// ---- config.json -------------------------------------------------------------------------------

GPT2Config read_hf_gpt2_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / kHfConfigFile).string();
  std::error_code ec;
  FT_USER_CHECK(fs::is_directory(dir, ec), "--init-from ", dir, ": not a folder (give the folder holding ",
                kHfConfigFile, " and ", kHfWeightsFile, ")");
  std::ifstream in(path, std::ios::binary);
  FT_USER_CHECK(in.good(), "--init-from: cannot read ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  FT_USER_CHECK(!j.is_discarded() && j.is_object(), path, ": not a JSON object");
  const std::string type = j.value("model_type", "");
  FT_USER_CHECK(type == "gpt2", path, ": model_type '", type, "'; fittrain imports model_type gpt2 only");
  GPT2Config c;
  const std::pair<const char*, int*> keys[] = {{"n_layer", &c.n_layer}, {"n_head", &c.n_head}, {"n_embd", &c.n_embd},
                                               {"n_positions", &c.seq_len}, {"vocab_size", &c.vocab_size}};
  for (auto [key, field] : keys) {
    FT_USER_CHECK(j.contains(key) && j[key].is_number_integer(), path, ": '", key, "' is missing or not an integer");
    *field = j[key].get<int>();
  }
  // Settings fittrain's GPT-2 computes one way only: another value would load without error
  // and give other logits, so it is refused.
  auto str = [&](const char* k, const char* dflt) { return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : dflt; };
  const std::string act = str("activation_function", "gelu_new");
  FT_USER_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", path, ": activation_function '", act,
                "'; fittrain's GPT-2 uses the tanh GELU (gelu_new)");
  const double eps = j.contains("layer_norm_epsilon") && j["layer_norm_epsilon"].is_number()
                         ? j["layer_norm_epsilon"].get<double>() : 1e-5;
  FT_USER_CHECK(std::fabs(eps - 1e-5) < 1e-12, path, ": layer_norm_epsilon ", eps, "; fittrain's layernorm uses 1e-5");
  FT_USER_CHECK(!j.contains("n_inner") || j["n_inner"].is_null() ||
                    (j["n_inner"].is_number_integer() && j["n_inner"].get<int64_t>() == 4 * int64_t{c.n_embd}),
                path, ": n_inner ", j.value("n_inner", nlohmann::json()).dump(), "; fittrain's MLP is 4 * n_embd wide");
  auto flag = [&](const char* k, bool dflt) { return j.contains(k) && j[k].is_boolean() ? j[k].get<bool>() : dflt; };
  FT_USER_CHECK(flag("scale_attn_weights", true) && !flag("scale_attn_by_inverse_layer_idx", false), path,
                ": attention scaling other than 1/sqrt(head size) (scale_attn_weights, "
                "scale_attn_by_inverse_layer_idx) is not what fittrain computes");
  FT_USER_CHECK(flag("tie_word_embeddings", true), path,
                ": tie_word_embeddings false; fittrain's LM head is tied to the token embedding");
  try {
    c.validate();
  } catch (const UserError& e) {
    throw UserError(path + ": " + e.what());
  }
  return c;
}

nlohmann::json init_from_model_config(const RunConfig& rc) {
  GPT2Config hf = read_hf_gpt2_config(rc.init_from);
  const std::string file = (fs::path(rc.init_from) / kHfConfigFile).string();
  auto agree = [&](int value, int want, const std::string& flag, const char* key) {
    FT_USER_CHECK(value == 0 || value == want, flag, " ", value, " conflicts with ", file, ": ", key, " ", want,
                  " (--init-from takes the model's shape from its config.json; drop ", flag, ")");
  };
  if (rc.model != "tiny") {  // the default preset cannot be told from an explicit --model tiny
    const nlohmann::json p = preset_config(rc.model);
    FT_USER_CHECK(p.value("arch", "gpt2") == "gpt2", "--model ", rc.model, " is not a GPT-2 model; --init-from ",
                  rc.init_from, " holds one");
    const std::string flag = "--model " + rc.model + " (";
    agree(p.value("n_layer", 0), hf.n_layer, flag + "n_layer)", "n_layer");
    agree(p.value("n_head", 0), hf.n_head, flag + "n_head)", "n_head");
    agree(p.value("n_embd", 0), hf.n_embd, flag + "n_embd)", "n_embd");
    agree(p.value("vocab_size", 0), hf.vocab_size, flag + "vocab_size)", "vocab_size");
  }
  agree(rc.n_layer, hf.n_layer, "--n-layer", "n_layer");
  agree(rc.n_head, hf.n_head, "--n-head", "n_head");
  agree(rc.n_embd, hf.n_embd, "--n-embd", "n_embd");
  agree(rc.vocab_size, hf.vocab_size, "--vocab-size", "vocab_size");
  // Shorter windows than the model was trained with are a normal fine-tuning choice (less
  // memory): wpe's first rows are used. Longer ones have no position embeddings to load.
  FT_USER_CHECK(rc.seq_len >= 0 && rc.seq_len <= hf.seq_len, "--seq-len ", rc.seq_len, " conflicts with ", file,
                ": n_positions ", hf.seq_len, " (at most n_positions; shorter takes wpe's first rows)");
  if (rc.seq_len > 0) hf.seq_len = rc.seq_len;
  return hf.to_json();
}

// ---- import --------------------------------------------------------------------------------------

void load_hf_params(const std::string& dir, const Model& model, const HfParamSink& put) {
  const GPT2Config hf = read_hf_gpt2_config(dir);
  const GPT2Config mc = gpt2_config_of(model, "--init-from " + dir);
  FT_USER_CHECK(mc.n_layer == hf.n_layer && mc.n_head == hf.n_head && mc.n_embd == hf.n_embd &&
                    mc.vocab_size == hf.vocab_size && mc.seq_len <= hf.seq_len,
                "--init-from ", dir, ": the model (", mc.describe(), ") is not the one config.json describes (",
                hf.describe(), ")");
  const ParamTable& table = model.param_table();
  const std::string path = (fs::path(dir) / kHfWeightsFile).string();
  SafetensorsReader r(path);
  // save_pretrained of GPT2LMHeadModel writes "transformer.*"; the released GPT-2 files
  // (GPT2Model's) have no prefix.
  const std::string prefix = r.find("transformer.wte.weight") ? "transformer." : r.find("wte.weight") ? "" : "?";
  FT_USER_CHECK(prefix != "?", path, ": no tensor 'transformer.wte.weight' (nor 'wte.weight'): not a GPT-2 model");
  // Every tensor of the file is known before any is put: GPT2LMHeadModel's, a tied lm_head
  // (it must hold wte's values) or the causal-mask buffers older transformers saved.
  const std::vector<HfTensorMap> maps = hf_gpt2_tensors(hf);
  std::set<std::string> expected;
  for (const HfTensorMap& m : maps) expected.insert(prefix + m.name);
  for (const SafetensorsInfo& t : r.tensors()) {
    const std::string& n = t.name;
    if (expected.count(n)) continue;
    if (n == "lm_head.weight") {
      FT_USER_CHECK(r.same_tensor(n, prefix + "wte.weight"), path, ": tensor 'lm_head.weight' differs from '",
                    prefix, "wte.weight'; fittrain's LM head is tied to the token embedding");
      continue;
    }
    const bool mask = n.rfind(prefix + "h.", 0) == 0 &&
                      (n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias"));
    FT_USER_CHECK(mask, path, ": unexpected tensor '", n, "' (not a weight of GPT2LMHeadModel)");
  }
  for (const HfTensorMap& m : maps) {
    const std::string name = prefix + m.name;
    const SafetensorsInfo* info = r.find(name);
    FT_USER_CHECK(info, path, ": missing tensor '", name, "'");
    FT_USER_CHECK(info->shape == m.shape, path, ": tensor '", name, "' has shape ", shape_text(info->shape),
                  ", expected ", shape_text(m.shape), " for ", hf.describe());
    std::vector<float> v = r.read_f32(name);
    for (size_t i = 0; i < v.size(); ++i)
      FT_USER_CHECK(std::isfinite(v[i]), path, ": tensor '", name, "' holds a non-finite value at element ", i);
    const int64_t at = flat_offset(table, m);
    if (m.transpose) {
      std::vector<float> t(v.size());
      transpose(v.data(), m.shape[0], m.shape[1], t.data());  // HF [in, out] -> fittrain [out, in]
      put(at, t.data(), static_cast<int64_t>(t.size()));
    } else {
      // wpe: the first seq_len rows when the run's windows are shorter than n_positions.
      put(at, v.data(), m.entry == "wpe" ? int64_t{mc.seq_len} * mc.n_embd : numel(m.shape));
    }
  }
}

void load_hf_params(const std::string& dir, const Model& model, float* host) {
  std::memset(host, 0, static_cast<size_t>(model.num_params()) * sizeof(float));  // padded vocabulary rows stay 0
  load_hf_params(dir, model, [host](int64_t offset, const float* data, int64_t count) {
    std::memcpy(host + offset, data, static_cast<size_t>(count) * sizeof(float));
  });
}

size_t hf_import_host_bytes(const std::string& dir) {
  size_t most = 0;
  for (const HfTensorMap& m : hf_gpt2_tensors(read_hf_gpt2_config(dir)))
    most = std::max(most, static_cast<size_t>(numel(m.shape)) * sizeof(float) * (m.transpose ? 2 : 1));
  return most;
}

// ---- export ----------------------------------------------------------------------------------------

HfExportSummary export_hf(const std::string& checkpoint, const std::string& out_dir,
                          const std::string& tokenizer_override, bool overwrite) {
  {
    // A model already there (an earlier export, or a downloaded one that --init-from reads)
    // is replaced only when asked.
    std::error_code ec;
    // (tokenizer.model too: an export writes or removes it, and a `tokenizer train` folder's
    // is the user's trained tokenizer)
    for (const char* f : {kHfWeightsFile, kHfConfigFile, kTokenizerModelFile})
      FT_USER_CHECK(overwrite || !fs::exists(fs::path(out_dir) / f, ec), "--out ", out_dir, " already holds ", f,
                    ": pass --overwrite to replace it, or another --out");
  }
  CheckpointReader r(checkpoint);
  const nlohmann::json mcfg = checkpoint_model_config(checkpoint);
  const std::string arch = mcfg.value("arch", "gpt2");
  FT_USER_CHECK(arch == "gpt2", checkpoint, ": model family '", arch,
                "' has no Hugging Face export (only gpt2 exports)");
  const std::unique_ptr<Model> model = make_model(mcfg, checkpoint);
  const GPT2Config c = gpt2_config_of(*model, checkpoint);
  const ParamTable& table = model->param_table();
  const size_t n = static_cast<size_t>(table.total());

  // fp32 weights: the master copy of a mixed-precision run, else the parameters themselves.
  const std::string src = r.has("master") ? "master" : "params";
  const std::string dt = r.section_dtype(src);
  const size_t esize = dt == "f32" ? 4 : (dt == "bf16" || dt == "f16") ? 2 : 0;
  FT_USER_CHECK(esize > 0, checkpoint, ": section '", src, "' has dtype ", dt, ", not f32, bf16 or f16");
  FT_USER_CHECK(r.section_bytes(src) == n * esize, checkpoint, ": section '", src, "' has ", r.section_bytes(src),
                " bytes, expected ", n * esize, " for ", c.describe());
  std::vector<float> w(n);
  if (esize == 4) {
    r.read(src, w.data(), n * 4);
  } else {
    std::vector<uint16_t> h(n);
    r.read(src, h.data(), n * 2);
    const DType t = dt == "f16" ? DType::f16 : DType::bf16;
    for (size_t i = 0; i < n; ++i) w[i] = half_bits_to_float(t, h[i]);
  }
  const int64_t bad = first_nonfinite(w.data(), DType::f32, static_cast<int64_t>(n));
  FT_USER_CHECK(bad < 0, checkpoint, ": non-finite weight in ", param_name_at(table, bad), "; nothing exported");

  // The end-of-text id: the recorded SentencePiece model's; else the byte tokenizer's, or
  // GPT-2's 50256 for a model of GPT-2's vocabulary (data tokenized outside fittrain).
  HfExportSummary out;
  const std::optional<TokenizerRecord> rec = checkpoint_tokenizer(checkpoint);
  std::string tok_file;
  if (rec) {
    const std::string spec = tokenizer_override.empty() ? rec->model_path : tokenizer_override;
    std::error_code ec;
    FT_USER_CHECK(!tokenizer_override.empty() || fs::exists(spec, ec), checkpoint, ": the checkpoint's tokenizer ",
                  rec->identity, " was ", spec, ", which no longer exists: pass --tokenizer DIR_OR_MODEL");
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(spec, tokenizer_override.empty() ? checkpoint + ": tokenizer" : "--tokenizer");
    FT_USER_CHECK(tok->identity() == rec->identity, checkpoint, ": trained with tokenizer ", rec->identity, " but ",
                  spec, " is tokenizer ", tok->identity());
    out.eos_token_id = static_cast<int>(tok->end_of_text());
    tok_file = fs::is_directory(spec, ec) ? (fs::path(spec) / kTokenizerModelFile).string() : spec;
  } else {
    FT_USER_CHECK(tokenizer_override.empty(), "--tokenizer ", tokenizer_override, ": ", checkpoint,
                  " records no tokenizer (it was trained on byte tokens, or on shards tokenized outside "
                  "fittrain), so there is none to check it against or to export: leave --tokenizer out");
    out.eos_token_id = c.vocab_size == 50257 ? 50256 : static_cast<int>(ByteTokenizer::kEndOfText);
  }

  try {
    fs::create_directories(out_dir);
  } catch (const fs::filesystem_error& e) {
    throw UserError("--out " + out_dir + ": cannot create the folder (" + e.what() + ")");
  }
  // Replacing a model: its config goes first and the new one is written last, so an export
  // cut short leaves a folder that does not load (no config.json), never new weights read
  // with an old config or tokenizer.
  fs::remove(fs::path(out_dir) / kHfConfigFile);
  std::vector<SafetensorsOut> tensors;
  for (const HfTensorMap& m : hf_gpt2_tensors(c)) {
    const float* from = w.data() + flat_offset(table, m);
    SafetensorsOut t{"transformer." + m.name, "F32", m.shape, nullptr};
    if (m.transpose) {
      const int64_t in = m.shape[0], outc = m.shape[1];  // fittrain [out, in] -> HF [in, out]
      t.fill = [from, in, outc](char* dst) { transpose(from, outc, in, reinterpret_cast<float*>(dst)); };
    } else {
      const size_t bytes = static_cast<size_t>(numel(m.shape)) * 4;  // wte: the first V rows only
      t.fill = [from, bytes](char* dst) { std::memcpy(dst, from, bytes); };
    }
    tensors.push_back(std::move(t));
  }
  const nlohmann::json& meta = r.meta();
  out.step = meta.value("step", int64_t{0});
  out.tensors = static_cast<int64_t>(tensors.size());
  out.weights = (fs::path(out_dir) / kHfWeightsFile).string();
  // "format": "pt" is what transformers checks for in a safetensors file's metadata.
  write_safetensors(out.weights, tensors,
                    {{"format", "pt"}, {"fittrain_checkpoint", fs::absolute(checkpoint).string()},
                     {"fittrain_step", std::to_string(out.step)}});
  const nlohmann::json config = {
      {"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"},
      {"vocab_size", c.vocab_size}, {"n_positions", c.seq_len}, {"n_embd", c.n_embd},
      {"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_inner", nullptr},
      {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5}, {"initializer_range", 0.02},
      {"scale_attn_weights", true}, {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false}, {"tie_word_embeddings", true},
      {"bos_token_id", out.eos_token_id}, {"eos_token_id", out.eos_token_id},
      {"torch_dtype", "float32"}, {"use_cache", true}};
  if (!tok_file.empty()) {
    // The SentencePiece model only: transformers' own tokenizer.json is another format, so
    // fittrain's tokenizer record is not written here.
    std::ifstream in(tok_file, std::ios::binary);
    FT_USER_CHECK(in.good(), "cannot read tokenizer model ", tok_file);
    std::stringstream ss;
    ss << in.rdbuf();
    out.tokenizer = (fs::path(out_dir) / kTokenizerModelFile).string();
    write_file_atomic(out.tokenizer, ss.str());
  } else {
    fs::remove(fs::path(out_dir) / kTokenizerModelFile);  // an earlier export's: not this model's
  }
  out.config = (fs::path(out_dir) / kHfConfigFile).string();
  write_file_atomic(out.config, config.dump(2) + "\n");
  return out;
}

int run_export(const RunConfig& rc) {
  FT_USER_CHECK(rc.export_format == "hf", "--format ", rc.export_format, ": the formats are: hf");
  FT_USER_CHECK(!rc.out_dir.empty(), "--out: give the folder to write");
  const std::string path = find_checkpoint(rc.checkpoint, rc.results_dir, true);
  const HfExportSummary s = export_hf(path, rc.out_dir, rc.tokenizer, rc.overwrite);
  std::printf("export     %s (step %lld) as Hugging Face GPT2LMHeadModel, fp32\n", path.c_str(),
              static_cast<long long>(s.step));
  std::printf("wrote      %s (%lld tensors) and %s (eos_token_id %d)\n", s.weights.c_str(),
              static_cast<long long>(s.tensors), s.config.c_str(), s.eos_token_id);
  if (!s.tokenizer.empty()) std::printf("wrote      %s\n", s.tokenizer.c_str());
  return 0;
}

}  // namespace ft
