// Reads the PyTorch fixtures written by scripts/make_gpt2_fixture.py (format described there).
#pragma once
#include <cstdint>
#include <cstring>
#include "core/half.h"
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace ft::testing {

struct Fixture {
  nlohmann::json config;
  nlohmann::json index;
  std::vector<char> payload;

  explicit Fixture(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open fixture " + path);
    char magic[8];
    f.read(magic, 8);
    if (std::memcmp(magic, "FTFIX001", 8) != 0) throw std::runtime_error("bad fixture magic in " + path);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string j(n, '\0');
    f.read(j.data(), static_cast<std::streamsize>(n));
    auto meta = nlohmann::json::parse(j);
    config = meta["config"];
    index = meta["tensors"];
    payload.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  template <class T> std::vector<T> get(const std::string& name) const {
    const auto& e = index.at(name);
    size_t count = 1;
    for (auto d : e["shape"]) count *= d.get<size_t>();
    std::vector<T> out(count);
    std::memcpy(out.data(), payload.data() + e["offset"].get<size_t>(), count * sizeof(T));
    return out;
  }
};

inline std::string fixture_path(const char* name) {
  return std::string(FITTRAIN_SOURCE_DIR) + "/tests/fixtures/" + name;
}

// ||a - b|| / ||b||
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return n > 0 ? std::sqrt(d / n) : std::sqrt(d);
}

}  // namespace ft::testing

#include <cmath>
#include <memory>

#include "models/gpt2_harness.h"

namespace ft::testing {

// What fittrain computes for the fixture's model, batch and optimizer settings.
struct FixtureRun {
  std::vector<float> logits, grads, step_losses, params_after;
  double loss = 0;
};

inline FixtureRun run_gpt2_fixture(const Fixture& fx, Backend& be, Precision precision) {
  const auto& c = fx.config;
  GPT2Config cfg{c["n_layer"], c["n_head"], c["n_embd"], c["seq_len"], c["vocab_size"]};
  const int64_t B = c["batch"], T = cfg.seq_len, N = B * T;
  PlanShape s;
  s.micro_batch = B;
  s.eval_batch = B;
  s.precision = precision;
  GPT2Harness model(be, cfg, s);
  auto params = fx.get<float>("params");
  auto tokens = fx.get<int32_t>("tokens"), targets = fx.get<int32_t>("targets");
  model.load_params_from_host(params.data());
  FixtureRun r;
  r.logits.resize(static_cast<size_t>(N * cfg.vocab_size));
  model.eval_logits(tokens.data(), B, r.logits.data());
  auto grads_to_host = [&]() {
    return model.grads();
  };
  const float dloss = 1.0f / static_cast<float>(N);
  for (int step = 0; step < c["steps"].get<int>(); ++step) {
    model.zero_grads();
    double l = model.forward_backward(tokens.data(), targets.data(), B, dloss) / static_cast<double>(N);
    if (step == 0) {
      r.loss = l;
      r.grads = grads_to_host();
    }
    r.step_losses.push_back(static_cast<float>(l));
    const double norm = std::sqrt(model.grad_sum_squares());
    AdamWStep st;
    st.lr = c["lr"];
    st.weight_decay = c["weight_decay"];
    st.beta1 = c["beta1"];
    st.beta2 = c["beta2"];
    st.eps = c["eps"];
    const double clip = c["grad_clip"];
    st.grad_scale = norm > clip ? static_cast<float>(clip / (norm + 1e-6)) : 1.0f;
    st.t = step + 1;
    model.adamw_step(st);
  }
  r.params_after.resize(params.size());
  model.copy_params_to_host(r.params_after.data());
  return r;
}

}  // namespace ft::testing
