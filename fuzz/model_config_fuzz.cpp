// libFuzzer target: a model configuration as a checkpoint or a config file carries it (JSON),
// through the registry: parse, build the model (parameter table), plan one small shape. Bad
// JSON or a bad configuration must be ft::UserError (or the JSON parser's parse_error); a
// crash, a sanitizer report (e.g. an integer overflow in a shape) or another exception is a bug.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "models/registry.h"
#include "train/runtime.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto be = ft::make_cpu_backend();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  try {
    auto model = ft::make_model(j, "fuzz");
    // Planning touches every shape formula; keep it to models whose plan is cheap to compute:
    // placement is greedy over buffers (quadratic in their number), and a 1000-layer model
    // (the fuzzer found one) has ~30k buffers, which takes seconds per plan.
    if (model->num_params() > (int64_t{1} << 26) || model->num_phases() > 400) return 0;
    ft::PlanShape s;
    (void)ft::runtime_plan(*model, *be, s);
  } catch (const ft::UserError&) {
  }
  return 0;
}
