// The token-choice rule of generation, on the host: greedy argmax, or sampling with a
// temperature, then top-k, then top-p (nucleus), in Hugging Face's order. Exact: the kept set
// is the k most likely tokens (ties to the smaller id), then the shortest prefix of them, most
// likely first, whose probability (renormalised over the k) reaches top_p.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "models/model.h"

namespace ft {

// The first index of the largest logit (what the device's argmax_rows gives).
int32_t argmax_token(std::span<const float> logits);

// Throws UserError naming the option for a temperature < 0, top_k < 0 or top_p outside (0, 1].
void check_generate_options(const GenerateOptions& opt);

// The tokens a row may draw and their unnormalised weights, most likely first where top_p
// < 1 cut the list (else in no particular order); total = the sum of weights.
struct SamplingSet {
  std::vector<int32_t> ids;
  std::vector<double> weights;
  double total = 0;
};
SamplingSet sampling_set(std::span<const float> logits, const GenerateOptions& opt);

// The distribution sample_token draws from: vocab-sized, 0 outside the kept set (tests).
std::vector<double> sampling_distribution(std::span<const float> logits, const GenerateOptions& opt);

// One token: greedy when opt.temperature == 0, else drawn from the kept set with a uniform
// u in [0, 1).
int32_t sample_token(std::span<const float> logits, const GenerateOptions& opt, double u);

// The uniform draw of (seed, prompt index within the call, step): independent of the batch
// a prompt happened to be in.
double sample_uniform(uint64_t seed, uint64_t prompt, uint64_t step);

}  // namespace ft
