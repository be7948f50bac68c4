// Shared by the DiT and CDEIT tests (CPU and GPU): a diffusion batch (images, conditions,
// timesteps, noise keys) as the diffusion task hands it to the model, random or read from a
// PyTorch fixture (scripts/make_dit_fixture.py, scripts/make_cdeit_fixture.py), and the run of
// a fixture: the first loss and gradients, then its AdamW steps on the same batch.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/batch.h"
#include "core/rng.h"
#include "models/gpt2_fixture.h"
#include "train/runtime.h"

namespace ft::testing {

struct DiffusionBatch {
  std::vector<float> image, cond;
  std::vector<int32_t> t, keys;
  int64_t b = 0;
  // The task's fields for a model configuration (DiTConfig or CDEITConfig).
  template <class Config>
  Batch batch(const Config& c) const {
    Batch out;
    out.size = b;
    out.fields.push_back(BatchField{FieldSpec{"image", DType::f32, c.image_elems()}, const_cast<float*>(image.data())});
    if (c.cond_elems() > 0)
      out.fields.push_back(BatchField{FieldSpec{"cond", DType::f32, c.cond_elems()}, const_cast<float*>(cond.data())});
    out.fields.push_back(BatchField{FieldSpec{"t", DType::i32, 1}, const_cast<int32_t*>(t.data())});
    out.fields.push_back(BatchField{FieldSpec{"noise_key", DType::i32, 1}, const_cast<int32_t*>(keys.data())});
    return out;
  }
};

// Images uniform in [-1, 1), normal conditions, any timestep and key.
template <class Config>
DiffusionBatch random_diffusion_batch(const Config& c, int64_t b, uint64_t seed) {
  Rng rng(seed);
  DiffusionBatch r;
  r.b = b;
  r.image.resize(static_cast<size_t>(b * c.image_elems()));
  for (float& v : r.image) v = 2.0f * rng.uniform() - 1.0f;
  r.cond.resize(static_cast<size_t>(b * c.cond_elems()));
  for (float& v : r.cond) v = static_cast<float>(rng.normal());
  for (int64_t i = 0; i < b; ++i) {
    r.t.push_back(static_cast<int32_t>(rng.next_u64() % 1000));
    r.keys.push_back(static_cast<int32_t>(rng.next_u64()));
  }
  return r;
}

inline DiffusionBatch fixture_batch(const Fixture& fx) {
  DiffusionBatch db;
  db.b = fx.config.at("batch").get<int64_t>();
  db.image = fx.get<float>("image");
  db.cond = fx.get<float>("cond");
  db.t = fx.get<int32_t>("t");
  db.keys = fx.get<int32_t>("noise_key");
  return db;
}

struct DiffusionFixtureRun {
  double loss = 0;
  std::vector<float> grads, step_losses, params_after;
};

// Loads the fixture's weights into rt and runs its batch: the loss (the batch mean of each
// sample's MSE, so dloss = 1/B) and gradients of the first step; then, when the fixture has
// "step_losses", that many AdamW steps on the same batch with its optimizer settings, the
// gradient clipped as torch.nn.utils.clip_grad_norm_ does (scale clip / (norm + 1e-6)).
inline DiffusionFixtureRun run_diffusion_fixture(const Fixture& fx, ModelRuntime& rt, const Batch& batch,
                                                 int64_t num_params) {
  const auto& c = fx.config;
  const int64_t B = c.at("batch").get<int64_t>();
  const std::vector<float> params = fx.get<float>("params");
  rt.load_params_from_host(params.data());
  DiffusionFixtureRun r;
  const int steps = c.contains("steps") ? c.at("steps").get<int>() : 1;
  for (int step = 0; step < steps; ++step) {
    rt.zero_grads();
    const double l = rt.forward_backward(batch, 1.0f / static_cast<float>(B)) / static_cast<double>(B);
    if (step == 0) {
      r.loss = l;
      r.grads.resize(static_cast<size_t>(num_params));
      rt.copy_grads_to_host(r.grads.data());
    }
    if (!c.contains("steps")) break;
    r.step_losses.push_back(static_cast<float>(l));
    const double norm = std::sqrt(rt.grad_sum_squares_part());
    AdamWStep st;
    st.lr = c.at("lr");
    st.weight_decay = c.at("weight_decay");
    st.beta1 = c.at("beta1");
    st.beta2 = c.at("beta2");
    st.eps = c.at("eps");
    const double clip = c.at("grad_clip");
    st.grad_scale = norm > clip ? static_cast<float>(clip / (norm + 1e-6)) : 1.0f;
    st.t = step + 1;
    rt.adamw_step(st);
  }
  if (c.contains("steps")) {
    r.params_after.resize(static_cast<size_t>(num_params));
    rt.copy_params_to_host(r.params_after.data());
  }
  return r;
}

}  // namespace ft::testing
