// The forward's parameter names (ModelBinding::params_needed) are a contract with ZeRO-1's
// gatherer (train/param_gatherer.h): under ZeRO-1 the compute stream waits only for the
// gathers of the chunks named so far, so an op that reads a parameter the forward has not
// named yet may read last step's values. The check runs one training forward and backward with
// every parameter NaN until the forward names it (a named range gets its values at once, as a
// gathered chunk arrives) and expects the very loss and gradients of the same pass with every
// value in place, and every parameter named by the forward's end. CPU backend (the pass runs
// op by op on the host, so a read before the name sees NaN). Returns how many times the pass
// named parameters.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "train/runtime.h"

namespace ft::testing {

inline int64_t expect_reads_only_named_params(ModelRuntime& rt, const Batch& batch, const std::string& what) {
  Model& model = rt.model();
  const int64_t P = model.num_params();
  if (rt.params().dtype != DType::f32) {
    ADD_FAILURE() << what << ": the check writes the parameters in place (CPU, fp32)";
    return 0;
  }
  std::vector<float> values(static_cast<size_t>(P)), clean_grads(static_cast<size_t>(P)),
      grads(static_cast<size_t>(P));
  rt.copy_params_to_host(values.data());
  rt.zero_grads();
  const double clean = rt.forward_backward(batch, 0.5f);
  rt.copy_grads_to_host(clean_grads.data());

  float* live = static_cast<float*>(rt.params().data);
  std::fill(live, live + P, std::numeric_limits<float>::quiet_NaN());
  std::vector<char> named(static_cast<size_t>(P), 0);
  int64_t names = 0;
  ParamNeededFn gather = [&](std::span<const ParamRange> ranges) {
    ++names;
    for (const ParamRange& r : ranges) {
      ASSERT_TRUE(r.offset >= 0 && r.count >= 0 && r.offset + r.count <= P) << what << ": range outside the layout";
      std::memcpy(live + r.offset, values.data() + r.offset, static_cast<size_t>(r.count) * sizeof(float));
      std::fill(named.begin() + r.offset, named.begin() + r.offset + r.count, 1);
    }
  };
  model.bind(ModelBinding{&rt.backend(), &rt.arena(), rt.shape(), rt.params(), rt.grads(), gather});
  rt.zero_grads();
  const double hooked = rt.forward_backward(batch, 0.5f);
  rt.copy_grads_to_host(grads.data());
  model.bind(ModelBinding{&rt.backend(), &rt.arena(), rt.shape(), rt.params(), rt.grads(), {}});
  std::memcpy(live, values.data(), static_cast<size_t>(P) * sizeof(float));  // as it was

  EXPECT_GT(names, 1) << what << ": the forward names its parameters group by group";
  EXPECT_EQ(std::count(named.begin(), named.end(), 0), 0) << what << ": parameters the forward never named";
  EXPECT_EQ(clean, hooked) << what << ": an op read a parameter before the forward named it";
  EXPECT_EQ(0, std::memcmp(clean_grads.data(), grads.data(), grads.size() * sizeof(float)))
      << what << ": the gradients differ (a read before its name)";
  return names;
}

}  // namespace ft::testing
