// Hugging Face interchange, in process: the export's names, shapes and transposes against arrays
// written out by hand for a 2-layer model, the import's round trip and every refusal.
#include "train/hf_interchange.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "cli/cli_util.h"
#include "core/error.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/tokenizer.h"
#include "models/registry.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

// A fresh folder, removed when the test process exits (cli/cli_util.h's).
std::string temp_dir(const std::string& name) { return ::ft::testing::temp_dir("hf_" + name); }

// L=2, H=1, C=2, T=3, V=5 (padded to 128). Flat layout (models/gpt2_backbone.cpp add_params):
//   wte 0..255, wpe 256..261, ln1w 262, ln1b 266, qkvw 270 (12 a layer), qkvb 294 (6),
//   attprojw 306 (4), attprojb 314, ln2w 318, ln2b 322, fcw 326 (16), fcb 358 (8),
//   fcprojw 374 (16), fcprojb 406, lnfw 410, lnfb 412; 414 in all.
GPT2Config small() { return GPT2Config{2, 1, 2, 3, 5}; }

// A checkpoint whose parameter i is the number i: each exported value says where it came from.
std::string index_checkpoint(const std::string& dir, const std::string& arch = "gpt2") {
  std::vector<float> p(414);
  std::iota(p.begin(), p.end(), 0.0f);
  nlohmann::json meta = {{"format", "fittrain"}, {"model", small().to_json()}, {"task", "lm"}, {"step", 7}};
  meta["model"]["arch"] = arch;
  const std::string path = dir + "/ckpt.ftc";
  const CheckpointSection s{"params", p.data(), p.size() * 4, "f32"};
  write_checkpoint(path, meta, std::span<const CheckpointSection>(&s, 1));
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(HfExport, NamesShapesAndTransposesByHand) {
  const std::string dir = temp_dir("by_hand");
  const HfExportSummary s = export_hf(index_checkpoint(dir), dir + "/hf");
  EXPECT_EQ(s.step, 7);
  EXPECT_EQ(s.tensors, 2 + 2 * 12 + 2);
  EXPECT_EQ(s.eos_token_id, 256);  // no tokenizer record: the byte tokenizer's end of text
  SafetensorsReader r(dir + "/hf/model.safetensors");
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.find("lm_head.weight"), nullptr);  // tied: omitted, as save_pretrained does
  auto expect = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    const SafetensorsInfo* t = r.find("transformer." + name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, "F32") << name;
    EXPECT_EQ(t->shape, shape) << name;
    EXPECT_EQ(r.read_f32("transformer." + name), values) << name;
  };
  expect("wte.weight", {5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});  // 5 real rows of 128
  expect("wpe.weight", {3, 2}, {256, 257, 258, 259, 260, 261});
  expect("h.0.ln_1.weight", {2}, {262, 263});
  expect("h.1.ln_1.bias", {2}, {268, 269});
  // Conv1D [in, out]: row i holds fittrain's column i of [out, in].
  expect("h.1.attn.c_attn.weight", {2, 6}, {282, 284, 286, 288, 290, 292, 283, 285, 287, 289, 291, 293});
  expect("h.1.attn.c_attn.bias", {6}, {300, 301, 302, 303, 304, 305});
  expect("h.0.attn.c_proj.weight", {2, 2}, {306, 308, 307, 309});
  expect("h.1.attn.c_proj.bias", {2}, {316, 317});
  expect("h.0.ln_2.weight", {2}, {318, 319});
  expect("h.1.ln_2.bias", {2}, {324, 325});
  expect("h.1.mlp.c_fc.weight", {2, 8},
         {342, 344, 346, 348, 350, 352, 354, 356, 343, 345, 347, 349, 351, 353, 355, 357});
  expect("h.0.mlp.c_fc.bias", {8}, {358, 359, 360, 361, 362, 363, 364, 365});
  expect("h.0.mlp.c_proj.weight", {8, 2},
         {374, 382, 375, 383, 376, 384, 377, 385, 378, 386, 379, 387, 380, 388, 381, 389});
  expect("h.1.mlp.c_proj.bias", {2}, {408, 409});
  expect("ln_f.weight", {2}, {410, 411});
  expect("ln_f.bias", {2}, {412, 413});

  std::ifstream in(dir + "/hf/config.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  EXPECT_EQ(c["model_type"], "gpt2");
  EXPECT_EQ(c["architectures"], nlohmann::json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(c["vocab_size"], 5);
  EXPECT_EQ(c["n_positions"], 3);
  EXPECT_EQ(c["n_embd"], 2);
  EXPECT_EQ(c["n_layer"], 2);
  EXPECT_EQ(c["n_head"], 1);
  EXPECT_TRUE(c["n_inner"].is_null());
  EXPECT_EQ(c["activation_function"], "gelu_new");
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_EQ(c["eos_token_id"], 256);
  EXPECT_EQ(c["torch_dtype"], "float32");

  // Import gives the parameters back bitwise, the padded vocabulary rows zero.
  const std::unique_ptr<Model> m = make_model(small().to_json(), "test");
  std::vector<float> back(static_cast<size_t>(m->num_params()), -1.0f);
  load_hf_params(dir + "/hf", *m, back.data());
  for (size_t i = 0; i < back.size(); ++i) EXPECT_EQ(back[i], i >= 10 && i < 256 ? 0.0f : float(i)) << i;
}

TEST(HfExport, OnlyGpt2Exports) {
  const std::string dir = temp_dir("family");
  const std::string msg = error_of([&] { export_hf(index_checkpoint(dir, "dit"), dir + "/hf"); });
  EXPECT_NE(msg.find("model family 'dit'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ckpt.ftc"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir + "/hf/model.safetensors"));
}

TEST(HfExport, MixedPrecisionExportsTheMasterWeights) {
  const std::string dir = temp_dir("master");
  std::vector<float> master(414);
  std::iota(master.begin(), master.end(), 0.5f);
  const std::vector<uint16_t> bf16(414, 0x3f80);  // 1.0 everywhere: not what is exported
  const nlohmann::json meta = {{"format", "fittrain"}, {"model", small().to_json()}, {"step", 3}};
  const CheckpointSection s[] = {{"params", bf16.data(), bf16.size() * 2, "bf16"},
                                 {"master", master.data(), master.size() * 4, "f32"}};
  write_checkpoint(dir + "/c.ftc", meta, s);
  export_hf(dir + "/c.ftc", dir + "/hf");
  SafetensorsReader r(dir + "/hf/model.safetensors");
  EXPECT_EQ(r.read_f32("transformer.ln_f.bias"), (std::vector<float>{412.5f, 413.5f}));
  EXPECT_EQ(r.read_f32("transformer.h.0.attn.c_proj.weight"), (std::vector<float>{306.5f, 308.5f, 307.5f, 309.5f}));
}

TEST(HfExport, SentencePieceEosAndModelFile) {
  const std::string dir = temp_dir("spm");
  {
    std::ofstream text(dir + "/corpus.txt");
    for (int i = 0; i < 400; ++i) text << "the quick brown fox " << i << " jumps over the lazy dog number " << i * 7 << "\n";
  }
  SentencePieceTrainOptions opt;
  opt.inputs = {dir + "/corpus.txt"};
  opt.vocab_size = 300;
  opt.out_dir = dir + "/tok";
  const SentencePieceTrainReport rep = train_sentencepiece(opt);
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(opt.out_dir, "test");
  const GPT2Config c{1, 1, 2, 3, 300};
  const std::vector<float> p(static_cast<size_t>(make_model(c.to_json(), "test")->num_params()), 0.25f);
  nlohmann::json meta = {{"format", "fittrain"}, {"model", c.to_json()}, {"step", 1}};
  meta["tokenizer"] = {{"kind", "sentencepiece"}, {"identity", rep.identity}, {"vocab_size", rep.vocab_size},
                       {"model_type", "unigram"}, {"path", rep.model_path}};
  const CheckpointSection s{"params", p.data(), p.size() * 4, "f32"};
  write_checkpoint(dir + "/c.ftc", meta, std::span<const CheckpointSection>(&s, 1));
  const HfExportSummary sum = export_hf(dir + "/c.ftc", dir + "/hf");
  EXPECT_EQ(sum.eos_token_id, static_cast<int>(tok->end_of_text()));
  std::ifstream in(dir + "/hf/config.json");
  EXPECT_EQ(nlohmann::json::parse(in)["eos_token_id"], tok->end_of_text());
  auto bytes = [](const std::string& f) {
    std::ifstream i(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(i), {});
  };
  EXPECT_EQ(bytes(dir + "/hf/tokenizer.model"), bytes(rep.model_path));
  EXPECT_FALSE(fs::exists(dir + "/hf/tokenizer.json"));  // the HF tokenizers' file name: not ours to write
  // The model file moved: named, with the flag that points to it.
  fs::rename(opt.out_dir, dir + "/moved");
  const std::string e = error_of([&] { export_hf(dir + "/c.ftc", dir + "/hf2"); });
  EXPECT_NE(e.find("no longer exists: pass --tokenizer"), std::string::npos) << e;
  EXPECT_EQ(export_hf(dir + "/c.ftc", dir + "/hf2", dir + "/moved").eos_token_id, sum.eos_token_id);
}

// A folder that already holds a model is replaced only when asked; then nothing of the earlier
// model stays (its tokenizer.model went with a checkpoint that records none).
TEST(HfExport, AModelAlreadyInTheFolderIsReplacedOnlyWhenAsked) {
  const std::string dir = temp_dir("overwrite");
  const GPT2Config c = small();
  const std::vector<float> p(static_cast<size_t>(make_model(c.to_json(), "test")->num_params()), 0.25f);
  const nlohmann::json meta = {{"format", "fittrain"}, {"model", c.to_json()}, {"step", 4}};
  const CheckpointSection s{"params", p.data(), p.size() * 4, "f32"};
  write_checkpoint(dir + "/c.ftc", meta, std::span<const CheckpointSection>(&s, 1));
  fs::create_directories(dir + "/hf");
  for (const char* f : {"model.safetensors", "config.json", "tokenizer.model"}) {
    std::ofstream(dir + "/hf/" + f) << "downloaded " << f;
  }
  const std::string e = error_of([&] { export_hf(dir + "/c.ftc", dir + "/hf"); });
  EXPECT_NE(e.find("--out " + dir + "/hf already holds model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("--overwrite"), std::string::npos) << e;
  std::ifstream kept(dir + "/hf/config.json");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "downloaded config.json");
  fs::remove(dir + "/hf/model.safetensors");  // a config alone is a model too
  EXPECT_NE(error_of([&] { export_hf(dir + "/c.ftc", dir + "/hf"); }).find("holds config.json"), std::string::npos);
  fs::remove(dir + "/hf/config.json");  // and a tokenizer alone (a `tokenizer train` folder) is the user's
  EXPECT_NE(error_of([&] { export_hf(dir + "/c.ftc", dir + "/hf"); }).find("holds tokenizer.model"), std::string::npos);
  // A --tokenizer for a checkpoint that records none is refused (it was ignored).
  EXPECT_NE(error_of([&] { export_hf(dir + "/c.ftc", dir + "/hf", dir + "/tok", true); })
                .find("--tokenizer " + dir + "/tok: " + dir + "/c.ftc records no tokenizer"),
            std::string::npos);
  const HfExportSummary sum = export_hf(dir + "/c.ftc", dir + "/hf", "", true);
  EXPECT_EQ(sum.step, 4);
  EXPECT_TRUE(sum.tokenizer.empty());
  EXPECT_FALSE(fs::exists(dir + "/hf/tokenizer.model"));
  std::ifstream cfg(dir + "/hf/config.json");
  EXPECT_EQ(nlohmann::json::parse(cfg)["n_layer"], c.n_layer);
  EXPECT_EQ(SafetensorsReader(dir + "/hf/model.safetensors").read_f32("transformer.ln_f.bias").size(),
            static_cast<size_t>(c.n_embd));
}

// The exported folder's tensors, editable, written back as another folder.
struct Folder {
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> t;
  nlohmann::json config;
  explicit Folder(const std::string& dir) {
    SafetensorsReader r(dir + "/model.safetensors");
    for (const auto& i : r.tensors()) t[i.name] = {i.shape, r.read_f32(i.name)};
    std::ifstream in(dir + "/config.json");
    config = nlohmann::json::parse(in);
  }
  std::string write(const std::string& dir) const {
    fs::create_directories(dir);
    std::vector<SafetensorsOut> out;
    for (const auto& [name, v] : t)
      out.push_back({name, "F32", v.first, [&v](char* d) { std::memcpy(d, v.second.data(), v.second.size() * 4); }});
    write_safetensors(dir + "/model.safetensors", out, {{"format", "pt"}});
    std::ofstream(dir + "/config.json") << config.dump();
    return dir;
  }
};

// The import puts each tensor once, in place, into the layout (the device's uploads, a range
// at a time), never a copy of the whole layout; what it holds at once is its largest tensor,
// twice when transposed (the host plan's item for --init-from): here the MLP's [2, 8]
// matrices, 16 floats transposed beside themselves.
TEST(HfImport, PutsEachTensorOnceInPlaceHoldingOneTensorAtATime) {
  const std::string dir = temp_dir("import_sink");
  export_hf(index_checkpoint(dir), dir + "/hf");
  const std::unique_ptr<Model> m = make_model(small().to_json(), "test");
  std::vector<int> covered(static_cast<size_t>(m->num_params()), 0);
  std::vector<float> got(covered.size(), -1.0f);
  int64_t largest = 0;
  load_hf_params(dir + "/hf", *m, [&](int64_t offset, const float* data, int64_t count) {
    ASSERT_GE(offset, 0);
    ASSERT_LE(offset + count, m->num_params());
    for (int64_t i = 0; i < count; ++i) ++covered[static_cast<size_t>(offset + i)], got[static_cast<size_t>(offset + i)] = data[i];
    largest = std::max(largest, count);
  });
  for (size_t i = 0; i < covered.size(); ++i) {
    const bool padded_row = i >= 10 && i < 256;  // wte's rows past the vocabulary
    EXPECT_EQ(covered[i], padded_row ? 0 : 1) << i;
    if (!padded_row) EXPECT_EQ(got[i], float(i)) << i;
  }
  EXPECT_EQ(largest, 16);
  EXPECT_EQ(hf_import_host_bytes(dir + "/hf"), 2u * 16 * 4);
}

TEST(HfImport, AcceptsReleasedFileConventions) {
  const std::string dir = temp_dir("conventions");
  export_hf(index_checkpoint(dir), dir + "/hf");
  const std::unique_ptr<Model> m = make_model(small().to_json(), "test");
  std::vector<float> want(414), got(414);
  load_hf_params(dir + "/hf", *m, want.data());
  // No "transformer." prefix (the released GPT-2 files), mask buffers, a tied lm_head present.
  Folder f(dir + "/hf");
  Folder g = f;
  g.t.clear();
  for (auto& [name, v] : f.t) g.t[name.substr(std::string("transformer.").size())] = v;
  g.t["h.0.attn.bias"] = {{1, 1, 3, 3}, std::vector<float>(9, 1.0f)};
  g.t["h.1.attn.masked_bias"] = {{}, {-1e4f}};
  g.t["lm_head.weight"] = f.t.at("transformer.wte.weight");
  load_hf_params(g.write(dir + "/released"), *m, got.data());
  EXPECT_EQ(got, want);
  // Shorter windows than n_positions: wpe's first rows.
  RunConfig rc;
  rc.init_from = dir + "/hf";
  rc.seq_len = 2;
  const nlohmann::json short_cfg = init_from_model_config(rc);
  EXPECT_EQ(short_cfg["seq_len"], 2);
  const std::unique_ptr<Model> ms = make_model(short_cfg, "test");
  std::vector<float> s(static_cast<size_t>(ms->num_params()));
  load_hf_params(dir + "/hf", *ms, s.data());
  EXPECT_EQ(std::vector<float>(s.begin() + 256, s.begin() + 260), (std::vector<float>{256, 257, 258, 259}));
}

TEST(HfImport, RefusalsNameTheTensorOrFlag) {
  const std::string dir = temp_dir("refusals");
  export_hf(index_checkpoint(dir), dir + "/hf");
  const std::unique_ptr<Model> m = make_model(small().to_json(), "test");
  std::vector<float> host(414);
  auto load_error = [&](const std::string& name, const std::function<void(Folder&)>& edit) {
    Folder f(dir + "/hf");
    edit(f);
    const std::string d = f.write(dir + "/" + name);
    return error_of([&] { load_hf_params(d, *m, host.data()); });
  };
  auto has = [](const std::string& msg, const std::string& w) {
    EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  };
  std::string e = load_error("missing", [](Folder& f) { f.t.erase("transformer.h.1.mlp.c_fc.bias"); });
  has(e, "missing tensor 'transformer.h.1.mlp.c_fc.bias'");
  has(e, "missing/model.safetensors");
  e = load_error("shape", [](Folder& f) { f.t["transformer.h.0.attn.c_attn.weight"].first = {6, 2}; });
  has(e, "'transformer.h.0.attn.c_attn.weight' has shape [6, 2], expected [2, 6]");
  e = load_error("untied", [](Folder& f) {
    f.t["lm_head.weight"] = f.t["transformer.wte.weight"];
    f.t["lm_head.weight"].second[3] += 1;
  });
  has(e, "'lm_head.weight' differs");
  e = load_error("extra", [](Folder& f) { f.t["transformer.h.0.mlp.gate.weight"] = {{1}, {0.0f}}; });
  has(e, "unexpected tensor 'transformer.h.0.mlp.gate.weight'");
  e = load_error("nan", [](Folder& f) { f.t["transformer.ln_f.bias"].second[1] = NAN; });
  has(e, "'transformer.ln_f.bias' holds a non-finite value at element 1");
  e = load_error("llama", [](Folder& f) { f.config["model_type"] = "llama"; });
  has(e, "llama/config.json: model_type 'llama'");
  e = load_error("relu", [](Folder& f) { f.config["activation_function"] = "relu"; });
  has(e, "activation_function 'relu'");
  e = load_error("eps", [](Folder& f) { f.config["layer_norm_epsilon"] = 1e-6; });
  has(e, "layer_norm_epsilon");
  e = load_error("untied_config", [](Folder& f) { f.config["tie_word_embeddings"] = false; });
  has(e, "tie_word_embeddings false");
  e = load_error("no_layers", [](Folder& f) { f.config.erase("n_layer"); });
  has(e, "'n_layer' is missing");

  // Model flags that disagree with config.json name the flag and both values.
  RunConfig rc;
  rc.init_from = dir + "/hf";
  rc.n_layer = 3;
  e = error_of([&] { init_from_model_config(rc); });
  has(e, "--n-layer 3 conflicts with");
  has(e, "config.json: n_layer 2");
  rc.n_layer = 2;  // agreeing is fine
  EXPECT_EQ(init_from_model_config(rc)["n_layer"], 2);
  rc.seq_len = 4;
  e = error_of([&] { init_from_model_config(rc); });
  has(e, "--seq-len 4 conflicts with");
  has(e, "n_positions 3");
  rc.seq_len = 0;
  rc.model = "gpt2";
  e = error_of([&] { init_from_model_config(rc); });
  has(e, "--model gpt2 (n_layer) 12 conflicts with");
  rc.model = "tiny";
  rc.init_from = dir + "/nowhere";
  e = error_of([&] { init_from_model_config(rc); });
  has(e, "--init-from " + dir + "/nowhere: not a folder");
}

}  // namespace
}  // namespace ft
