#include "train/model_io.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <vector>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/host_name.h"
#include "data/dataset.h"
#include "plan/fit.h"
#include "train/checkpoint.h"
#include "train/checkpoint_dir.h"
#include "train/hf_interchange.h"
#include "train/progress.h"
#include "train/results_dir.h"
#include "train/step_guard.h"

namespace ft {

namespace {

void check_format(const nlohmann::json& meta, const std::string& path) {
  const std::string f = meta.value("format", "");
  FT_USER_CHECK(f == "fittrain" || f == "fittrain-gpt2", path, ": not a fittrain checkpoint (format '", f, "')");
}

// Section `name` (`bytes` of `dtype`) read a block at a time: consume(first element, data,
// element count) for each block. Returns the first non-finite element (-1: none), to be
// refused by the caller once the CRC has passed (read_blocks throws first on a corrupt
// section, so a corrupt file is named corrupt).
template <class Consume>
int64_t read_finite_blocks(const CheckpointReader& r, const std::string& name, size_t bytes, DType dtype,
                           const Consume& consume) {
  const size_t esize = dtype_size(dtype);
  int64_t bad = -1;
  r.read_blocks(name, bytes, [&](uint64_t offset, const uint8_t* data, size_t n) {
    const auto first = static_cast<int64_t>(offset / esize), count = static_cast<int64_t>(n / esize);
    if (const int64_t b = first_nonfinite(data, dtype, count); b >= 0 && bad < 0) bad = first + b;
    consume(first, data, count);
  });
  return bad;
}

}  // namespace

nlohmann::json checkpoint_model_config(const std::string& path) {
  CheckpointReader r(path);
  check_format(r.meta(), path);
  FT_USER_CHECK(r.meta().contains("model") && r.meta()["model"].is_object(), path,
                ": checkpoint has no model configuration");
  nlohmann::json m = r.meta()["model"];
  if (!m.contains("arch")) m["arch"] = "gpt2";
  return m;
}

std::string absolute_data_path(const std::string& data_path) {
  std::string out;
  for (const std::string& part : data_path_parts(data_path))
    out += (out.empty() ? "" : ",") + (part.empty() ? part : std::filesystem::absolute(part).lexically_normal().string());
  return out;
}

std::optional<std::string> checkpoint_data_path(const std::string& path) {
  CheckpointReader r(path);
  const nlohmann::json& m = r.meta();
  if (!m.contains("data") || !m["data"].is_object() || !m["data"].contains("path") || !m["data"]["path"].is_string())
    return std::nullopt;
  return m["data"]["path"].get<std::string>();
}

std::string checkpoint_task(const std::string& path) {
  CheckpointReader r(path);
  check_format(r.meta(), path);
  return r.meta().value("task", "lm");
}

namespace {

nlohmann::json tokenizer_json(const TokenizerRecord& t) {
  return {{"kind", t.kind}, {"identity", t.identity}, {"vocab_size", t.vocab_size}, {"model_type", t.model_type},
          {"path", t.model_path}};
}

std::optional<TokenizerRecord> tokenizer_from_meta(const nlohmann::json& meta, const std::string& path) {
  if (!meta.contains("tokenizer")) return std::nullopt;
  TokenizerRecord t;
  try {
    const auto& j = meta.at("tokenizer");
    t.kind = j.at("kind").get<std::string>();
    t.identity = j.at("identity").get<std::string>();
    t.vocab_size = j.at("vocab_size").get<uint32_t>();
    t.model_type = j.value("model_type", "");
    t.model_path = j.at("path").get<std::string>();
  } catch (const std::exception& e) {
    throw UserError(path + ": malformed tokenizer record in the checkpoint (" + e.what() + ")");
  }
  return t;
}

}  // namespace

std::optional<TokenizerRecord> checkpoint_tokenizer(const std::string& path) {
  CheckpointReader r(path);
  check_format(r.meta(), path);
  return tokenizer_from_meta(r.meta(), path);
}

void check_model_config(const nlohmann::json& meta, const Model& model, const std::string& path) {
  FT_USER_CHECK(meta.contains("model"), path, ": checkpoint has no model configuration");
  const auto& m = meta["model"];
  const nlohmann::json want = model.config();
  for (auto it = want.begin(); it != want.end(); ++it) {
    FT_USER_CHECK(m.contains(it.key()) && m[it.key()] == it.value(), path, ": checkpoint model ",
                  it.key(), "=", m.value(it.key(), nlohmann::json()).dump(), " but this run has ",
                  it.key(), "=", it.value().dump(), " (pass the checkpoint's model flags or another --results-dir)");
  }
}

void save_checkpoint(Session& s, const std::string& path, const TrainState& st, bool with_optimizer) {
  ModelRuntime& m = s.runtime();
  const size_t n = static_cast<size_t>(s.model().num_params());
  const bool on_host = s.device() == DeviceKind::cpu;
  nlohmann::json meta;
  meta["format"] = "fittrain";
  meta["model"] = s.model().config();
  meta["task"] = s.run().task;
  meta["precision"] = precision_name(s.precision());
  meta["step"] = st.step;
  meta["cursor"] = {{"epoch", st.cursor.epoch}, {"sample_in_epoch", st.cursor.sample_in_epoch}};
  meta["tokens_seen"] = st.tokens_seen;
  meta["global_seed"] = s.run().global_seed;
  meta["global_batch_size"] = s.run().global_batch_size;
  meta["world_size"] = s.comm().world_size();
  // Only a checkpoint of the evaluated step records its loss: one saved between evaluations
  // carried the last one, which keep-best then ranked as its own (ties going to the newer).
  if (st.val_loss >= 0 && st.val_loss_step == st.step) meta["val_loss"] = st.val_loss;
  if (st.skipped_updates > 0) meta["skipped_updates"] = st.skipped_updates;
  if (!st.run_id.empty()) meta["run_id"] = st.run_id;
  if (st.tokenizer) meta["tokenizer"] = tokenizer_json(*st.tokenizer);
  if (st.train_samples > 0) meta["data"] = {{"path", st.data_path}, {"train_samples", st.train_samples}};
  if (with_optimizer && m.has_ema()) meta["ema"] = st.ema_settings;
  if (st.loss_scale > 0)
    meta["loss_scaler"] = {{"scale", st.loss_scale}, {"clean", st.scale_clean_steps}, {"skipped", st.scale_skipped_steps}};

  // Every section streams to the file in blocks: on the CPU straight from the arena; other
  // devices copy each block of kWeightsBlock elements to one host block first (the host
  // plan's "weights blocks"). ZeRO-1 shards of the optimizer state are gathered from every
  // rank (a collective: every rank gathers the same sections in table order while rank 0
  // writes), a block of whole chunks at a time, on rank 0 alone; the others only take part.
  std::vector<Tensor> tensors = {m.params()};
  std::vector<std::string> names = {"params"};
  if (with_optimizer) {
    if (!m.optimizer().master().empty()) {
      tensors.push_back(m.optimizer().master());
      names.push_back("master");
    }
    tensors.push_back(m.optimizer().m());
    names.push_back("adam_m");
    tensors.push_back(m.optimizer().v());
    names.push_back("adam_v");
    if (m.has_ema()) {  // the EMA of the weights (optim/ema.h), f32 in the parameters' layout
      tensors.push_back(m.optimizer().ema());
      names.push_back("ema");
    }
  }
  FT_CHECK(n > 0, "empty model");
  const bool sharded = m.sharded();
  auto gathered = [&](size_t i) { return sharded && names[i] != "params"; };  // f32 [n] once gathered
  // Rank 0 writes the replicated parameters before the first gathered section (GPT-2 XL: 3.1
  // GB in bf16). The others wait for that in a barrier --comm-timeout does not bound, not
  // inside their first gather, which it bounds.
  size_t first_gathered = 0;
  while (first_gathered < tensors.size() && !gathered(first_gathered)) ++first_gathered;
  auto before_gathers = [&](size_t i) {
    if (i == first_gathered) s.comm().barrier_without_timeout();
  };
  m.wait_params();
  s.backend().synchronize();
  if (s.comm().rank() != 0) {  // rank 0 alone writes
    for (size_t i = 0; i < tensors.size(); ++i)
      if (gathered(i)) {
        before_gathers(i);
        m.gather_shard(tensors[i], {});
      }
    return;
  }
  std::vector<char> block;  // a device's section, a block at a time
  // A checkpoint with non-finite weights or optimizer state is never written: the trainer
  // does not apply non-finite updates (train/step_guard.h), so getting here is a bug. The
  // write stops at the block that holds one (a gathered section only once every rank's
  // gather is done), and the file it was to replace stays.
  auto refuse = [&](size_t i, int64_t bad) {
    FT_CHECK(bad < 0, "refusing to write checkpoint ", path, ": section '", names[i],
             "' holds a non-finite value at element ", bad, " (", param_name_at(s.model().param_table(), bad),
             "); the checkpoints written before are kept");
  };
  auto checked = [&](size_t i, const CheckpointSink& out, int64_t first, const void* data, DType dtype, int64_t count) {
    const int64_t bad = first_nonfinite(data, dtype, count);
    refuse(i, bad < 0 ? bad : first + bad);
    out(data, static_cast<size_t>(count) * dtype_size(dtype));
  };
  std::vector<CheckpointSection> sections;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const DType dtype = gathered(i) ? DType::f32 : tensors[i].dtype;
    const int64_t count = gathered(i) ? static_cast<int64_t>(n) : tensors[i].numel();
    auto stream = [&, i, dtype, count](const CheckpointSink& out) {
      if (gathered(i)) {
        before_gathers(i);
        int64_t bad = -1;
        m.gather_shard(tensors[i], [&](int64_t first, const float* data, int64_t k) {
          if (bad >= 0) return;  // the rest is only gathered, for the other ranks' sake
          if (const int64_t b = first_nonfinite(data, DType::f32, k); b >= 0) bad = first + b;
          else out(data, static_cast<size_t>(k) * 4);
        });
        refuse(i, bad);
      } else if (on_host) {
        checked(i, out, 0, tensors[i].data, dtype, count);
      } else {
        const size_t esize = dtype_size(dtype);
        block.resize(static_cast<size_t>(std::min(count, kWeightsBlock)) * esize);
        for (int64_t b = 0; b < count; b += kWeightsBlock) {
          const int64_t k = std::min(kWeightsBlock, count - b);
          s.backend().copy_to_host(block.data(), static_cast<const char*>(tensors[i].data) + b * esize,
                                   static_cast<size_t>(k) * esize);
          checked(i, out, b, block.data(), dtype, k);
        }
      }
    };
    sections.push_back(
        CheckpointSection{names[i], nullptr, static_cast<size_t>(count) * dtype_size(dtype), dtype_name(dtype), stream});
  }
  write_checkpoint(path, meta, sections);
}

namespace {
// What the ranks compare of the checkpoint each opened: its metadata and every section's size
// and CRC (read from its table, no pass over the data). The first line, where it is (machine
// and absolute path), is shown but not compared (one file may be mounted at other paths); the
// second is what messages show of it.
std::string checkpoint_identity(const CheckpointReader& r) {
  const nlohmann::json& meta = r.meta();
  std::error_code ec;
  std::string out = std::filesystem::absolute(r.path(), ec).string() + " on " + host_name() + "\nstep " +
                    std::to_string(meta.value("step", int64_t{0})) + ", run " +
                    (meta.contains("run_id") && meta["run_id"].is_string() ? meta["run_id"].get<std::string>()
                                                                           : std::string("without an id")) +
                    "\n";
  for (const CheckpointReader::Entry& e : r.sections())
    out += "section '" + e.name + "' " + e.dtype + " " + std::to_string(e.bytes) + " B, CRC " + std::to_string(e.crc) + "\n";
  return out + "metadata " + meta.dump() + "\n";
}

// "" when the identities (checkpoint_identity) agree past their first line; else the phrase
// of the refusal, naming both files and the first part that differs.
std::string checkpoint_apart(const std::string& here, const std::string& rank0) {
  auto lines = [](const std::string& id) {
    std::vector<std::string> out;
    std::istringstream in(id);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  const std::vector<std::string> mine = lines(here), theirs = lines(rank0);
  size_t first = 1;
  while (first < mine.size() && first < theirs.size() && mine[first] == theirs[first]) ++first;
  if (first == mine.size() && first == theirs.size()) return "";
  auto shown = [](const std::vector<std::string>& id) { return id[0] + " (" + (id.size() > 1 ? id[1] : "") + ")"; };
  // Same step and run: say which part differs ("section 'adam_m'", "the metadata").
  auto part = [](const std::string& line) {
    if (line.rfind("section '", 0) == 0) return line.substr(0, line.find('\'', 9) + 1);
    return line.rfind("metadata", 0) == 0 ? std::string("the metadata") : line;
  };
  return "read the checkpoint " + shown(mine) + ", which is not the one rank 0 read: " + shown(theirs) +
         (first > 1 ? "; they differ in " + part(first < mine.size() ? mine[first] : theirs[first]) : std::string());
}
}  // namespace

void agree_on_checkpoint(Session& s, const CheckpointReader& r) {
  if (s.comm().world_size() <= 1) return;
  s.agree_with_rank0(checkpoint_identity(r), checkpoint_apart,
                     "every rank of a run loads one checkpoint (over several machines, --results-dir must be one "
                     "folder every rank sees, a shared file system, and --checkpoint a file in it)");
}

TrainState load_checkpoint(Session& s, const std::string& path, bool with_optimizer) {
  CheckpointReader r(path);
  const auto& meta = r.meta();
  // Every rank opens the file itself (a resume names rank 0's choice; `test` finds it on each
  // rank): one that opened another file (another machine's own folder, a checkpoint replaced
  // meanwhile) would train or evaluate on other weights than the rest, without a word.
  agree_on_checkpoint(s, r);
  check_format(meta, path);
  check_model_config(meta, s.model(), path);
  const std::string task = meta.value("task", "lm");
  FT_USER_CHECK(task == s.run().task, path, ": checkpoint was trained for task '", task, "' but this run has --task ",
                s.run().task);
  ModelRuntime& m = s.runtime();
  // Non-finite weights or moments (a checkpoint written after a run blew up, by a version
  // that did not refuse to) cannot be evaluated, sampled or trained on: refuse, naming the
  // file. Checked on the host bytes each section is read through (no extra pass over the
  // device).
  auto refuse_nonfinite = [&](const std::string& name, int64_t bad) {  // bad: an element of the layout, or < 0
    FT_USER_CHECK(bad < 0, path, ": checkpoint holds non-finite values ('", name, "' element ", bad, ", in ",
                  param_name_at(s.model().param_table(), bad),
                  "); it cannot be used: take an earlier checkpoint (--checkpoint PATH; to train on from one, ",
                  "move this one out of the folder, and --resume auto takes the newest left)");
  };
  // A section streamed a block at a time, its first non-finite element refused after the CRC.
  auto read_finite = [&](const std::string& name, size_t bytes, DType dtype, const auto& consume) {
    refuse_nonfinite(name, read_finite_blocks(r, name, bytes, dtype, consume));
  };
  const OptimizerShard& shard = m.optimizer().shard();
  auto load = [&](const std::string& name, Tensor t) {
    FT_USER_CHECK(r.has(name), path, ": missing section '", name, "'");
    const bool same_dtype = r.section_dtype(name) == dtype_name(t.dtype);
    if (same_dtype && name != "params" && shard.sharded()) {
      // This rank's ZeRO-1 pieces of a full optimizer section (whatever world size wrote it:
      // the checkpoint always holds the whole layout, so a resume may re-shard).
      const size_t esize = dtype_size(t.dtype), full = static_cast<size_t>(shard.num_params) * esize;
      FT_USER_CHECK(r.section_bytes(name) == full, path, ": section '", name, "' has ", r.section_bytes(name),
                    " bytes, expected ", full);
      // Streamed: each block of the file uploads this rank's pieces inside it, so no host
      // copy of the section or of this rank's shard is made (GPT-2 XL: 6.2 GB a section,
      // 3.1 GB a shard on 2 ranks).
      s.backend().zero(t);  // the padding past P
      read_finite(name, full, t.dtype, [&](int64_t first, const uint8_t* data, int64_t count) {
        m.upload_shard_range(t, first, data, count);
      });
      return true;
    }
    if (same_dtype) {
      FT_USER_CHECK(r.section_bytes(name) == t.bytes(), path, ": section '", name, "' has ",
                    r.section_bytes(name), " bytes, expected ", t.bytes());
      // Streamed to the device block by block (copy_to_device stages each and returns), where
      // it used to go through a host copy of the whole section (GPT-2 XL's bf16 weights on a
      // resuming GPU rank: 2.9 GiB).
      const size_t esize = dtype_size(t.dtype);
      read_finite(name, t.bytes(), t.dtype, [&](int64_t first, const uint8_t* data, int64_t count) {
        s.backend().copy_to_device(static_cast<uint8_t*>(t.data) + first * esize, data,
                                   static_cast<size_t>(count) * esize);
      });
      return true;
    }
    return false;
  };
  // Parameters: same dtype loads as is; otherwise go through fp32 (e.g. a bf16 run's
  // checkpoint evaluated on the CPU uses its fp32 master weights).
  const size_t n = static_cast<size_t>(s.model().num_params());
  if (!load("params", m.params())) {
    const std::string src = r.has("master") ? "master" : "params";
    FT_USER_CHECK(r.section_dtype(src) == "f32", path, ": cannot convert section '", src, "' of dtype ",
                  r.section_dtype(src), " to ", dtype_name(m.params().dtype));
    FT_USER_CHECK(r.section_bytes(src) == n * 4, path, ": section '", src, "' has the wrong size");
    // Rounded and uploaded block by block as the file is read (no whole-layout host copy).
    m.begin_params_load();
    read_finite(src, n * 4, DType::f32, [&](int64_t first, const uint8_t* data, int64_t count) {
      m.load_params_range(first, reinterpret_cast<const float*>(data), count);
    });
  } else if (!m.optimizer().master().empty()) {
    if (!(r.has("master") && load("master", m.optimizer().master()))) m.master_from_params();
  }
  TrainState st;
  if (with_optimizer) {
    // The optimizer's state and the EMA are f32 in every checkpoint fittrain writes; one of
    // another dtype is refused rather than left unloaded (the arena is not zeroed: AdamW and
    // the evaluation would run on whatever the memory held).
    auto load_f32 = [&](const std::string& name, Tensor t) {
      FT_USER_CHECK(load(name, t), path, ": section '", name, "' has dtype ", r.section_dtype(name), ", expected ",
                    dtype_name(t.dtype));
    };
    load_f32("adam_m", m.optimizer().m());
    load_f32("adam_v", m.optimizer().v());
    // The EMA continues from the checkpoint's; one written without (an older version, or
    // --ema-decay 0) starts the EMA from the weights just loaded.
    if (m.has_ema()) {
      st.ema_loaded = r.has("ema");
      if (st.ema_loaded) load_f32("ema", m.optimizer().ema());
      else m.ema_update(0.f);
    }
  }
  st.step = meta.value("step", int64_t{0});
  st.global_batch_size = meta.value("global_batch_size", int64_t{0});
  if (meta.contains("cursor")) {
    st.cursor.epoch = meta["cursor"].value("epoch", uint64_t{0});
    // Checkpoints before the sample stream (data/sampler.h) counted whole global batches.
    st.cursor.sample_in_epoch =
        meta["cursor"].contains("sample_in_epoch")
            ? meta["cursor"].value("sample_in_epoch", uint64_t{0})
            : meta["cursor"].value("step_in_epoch", uint64_t{0}) * static_cast<uint64_t>(std::max<int64_t>(st.global_batch_size, 0));
  }
  st.tokens_seen = meta.value("tokens_seen", uint64_t{0});
  st.val_loss = meta.value("val_loss", -1.0);
  if (st.val_loss >= 0) st.val_loss_step = st.step;
  if (meta.contains("global_seed") && meta["global_seed"].is_number_unsigned())
    st.global_seed = meta["global_seed"].get<uint64_t>();
  st.skipped_updates = meta.value("skipped_updates", int64_t{0});
  if (meta.contains("run_id") && meta["run_id"].is_string()) st.run_id = meta["run_id"].get<std::string>();
  st.tokenizer = tokenizer_from_meta(meta, path);
  if (meta.contains("ema") && r.has("ema")) st.ema_settings = meta["ema"];  // the checkpoint keeps an EMA
  if (meta.contains("data") && meta["data"].is_object()) {
    st.data_path = meta["data"].value("path", std::string());
    st.train_samples = meta["data"].value("train_samples", uint64_t{0});
  }
  if (meta.contains("loss_scaler")) {
    st.loss_scale = meta["loss_scaler"].value("scale", 0.0);
    st.scale_clean_steps = meta["loss_scaler"].value("clean", int64_t{0});
    st.scale_skipped_steps = meta["loss_scaler"].value("skipped", int64_t{0});
  }
  return st;
}

void load_hf_weights(Session& s, const std::string& dir) {
  ModelRuntime& m = s.runtime();
  m.begin_params_load();  // the padded vocabulary rows stay zero
  // Every rank reads the folder itself: over several machines, each machine's own copy. The
  // weights as loaded (offset and values of every range, in the reader's fixed order) are
  // checksummed on the way (CRC-32C's SSE4.2 path: one more pass at memory speed over the
  // host ranges; nothing with one rank), so ranks that loaded other weights are refused
  // before step 1.
  const bool ranks = s.comm().world_size() > 1;
  uint32_t crc = 0;
  load_hf_params(dir, s.model(), [&](int64_t offset, const float* data, int64_t count) {
    if (ranks) {
      crc = crc32c(&offset, sizeof offset, crc);
      crc = crc32c(data, static_cast<size_t>(count) * sizeof(float), crc);
    }
    m.load_params_range(offset, data, count);
  });
  if (!ranks) return;
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  s.agree_with_rank0(
      hex,
      [&](const std::string& here, const std::string& rank0) -> std::string {
        if (here == rank0) return "";
        return "loaded other weights than rank 0 from " + dir + " (CRC-32C of the weights " + here + ", rank 0: " +
               rank0 + ")";
      },
      "every rank of a run starts from the same weights (over several machines, the same files in that folder on "
      "each)");
}

bool load_ema_weights(Session& s, const std::string& path) {
  CheckpointReader r(path);
  if (!r.has("ema")) return false;
  const size_t n = static_cast<size_t>(s.model().num_params());
  FT_USER_CHECK(r.section_dtype("ema") == "f32" && r.section_bytes("ema") == n * 4, path, ": section 'ema' holds ",
                r.section_bytes("ema"), " bytes of ", r.section_dtype("ema"), ", expected ", n * 4, " bytes of f32");
  // Uploaded block by block as it is read; a non-finite value is refused once the CRC passed.
  ModelRuntime& m = s.runtime();
  m.begin_params_load();
  const int64_t bad = read_finite_blocks(r, "ema", n * 4, DType::f32, [&](int64_t first, const uint8_t* data, int64_t count) {
    m.load_params_range(first, reinterpret_cast<const float*>(data), count);
  });
  FT_USER_CHECK(bad < 0, path, ": section 'ema' holds a non-finite value at element ", bad, " (",
                param_name_at(s.model().param_table(), bad), ")");
  return true;
}

std::string find_checkpoint(const std::string& spec, const std::string& results_dir, bool required) {
  if (spec != "auto") return spec;
  std::vector<std::string> warnings;
  auto latest = latest_valid_checkpoint(checkpoint_dir(results_dir), &warnings);
  for (auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (!latest) {
    FT_USER_CHECK(!required, "no valid checkpoint in ", checkpoint_dir(results_dir),
                  " (train first, or pass --checkpoint PATH)");
    return "";
  }
  return latest->path;
}

// Rank 0 alone decides whether there is a state to save (its state_to_save looked at its
// results folder) and tells the others.
void save_and_prune(Session& s, const RunConfig& rc, const TrainState* st, Progress* progress) {
  Communicator& comm = s.comm();
  if (comm.world_size() > 1) {
    int32_t go = st != nullptr;
    comm.broadcast(Tensor(&go, DType::i32, {1}), 0);
    if (!go) return;
  } else if (!st) {
    return;
  }
  const TrainState& state = *st;
  const std::string dir = checkpoint_dir(rc.results_dir);
  const std::string path = checkpoint_path(dir, state.step);
  if (comm.rank() == 0) {
    std::filesystem::create_directories(dir);
    ensure_run_identity(rc.results_dir, state.run_id);  // the folder is this run's from its first save
  }
  {
    ProgressActivity busy(progress, "writing checkpoint " + path, /*announce=*/false);
    save_checkpoint(s, path, state, true);
  }
  // Every rank goes on once rank 0 has the file. A rank that went on while rank 0 still wrote
  // would count the write against its next collective's --comm-timeout; one that exited (a stop
  // on a signal, on bad steps) would have the launcher end rank 0 in the middle of the write.
  if (comm.world_size() > 1) comm.barrier_without_timeout();
  if (comm.rank() != 0) return;
  std::vector<std::string> warnings;
  auto removed = rc.keep_best > 0
                     ? prune_checkpoints_best(dir, rc.keep_best, "val_loss", &warnings, state.run_id, state.step,
                                              rc.keep_checkpoints)
                     : prune_checkpoints(dir, rc.keep_checkpoints, &warnings, state.run_id, state.step);
  for (auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  const std::string msg =
      "checkpoint " + path + (removed.empty() ? "" : " (removed " + std::to_string(removed.size()) + " older)");
  if (progress) progress->line(msg);
  else std::printf("%s\n", msg.c_str());
}

}  // namespace ft
