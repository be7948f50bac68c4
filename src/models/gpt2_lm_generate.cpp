// GPT2LM::generate: batched generation with the backbone's KV cache. Per chunk of at most G
// (the plan's eval batch) prompts: one prefill (the evaluation forward over the prompts,
// right-padded to the longest), the logits of each prompt's last row, then one decode step per
// new token for every row of the chunk. Greedy choice runs on the device (argmax_rows: G ints
// come back per step, not G x V logits); sampling copies the logits and draws on the host
// (models/sampling.h).
#include <algorithm>

#include "core/error.h"
#include "models/gpt2_lm.h"
#include "models/sampling.h"

namespace ft {

std::vector<std::vector<int32_t>> GPT2LM::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                   const GenerateOptions& opt) {
  return generate(prompts, opt, {});
}

std::vector<std::vector<int32_t>> GPT2LM::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                   const GenerateOptions& opt, const StepLogitsFn& hook) {
  FT_CHECK(be_ != nullptr, "generate: model not bound");
  check_generate_options(opt);
  FT_CHECK(opt.vocab_limit >= 0 && opt.vocab_limit <= cfg_.vocab_size, "generate: vocab_limit ", opt.vocab_limit,
           " outside the vocabulary of ", cfg_.vocab_size);
  const int64_t T = cfg_.seq_len;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t n = static_cast<int64_t>(prompts[i].size());
    FT_USER_CHECK(n >= 1 && n <= T - 1, "prompt ", i, " has ", n, " tokens: a prompt takes 1 to ", T - 1,
                  " (the context length ", T, " less one)");
    for (int32_t tok : prompts[i])
      FT_USER_CHECK(tok >= 0 && tok < cfg_.vocab_size, "prompt ", i, ": token ", tok, " outside the vocabulary of ",
                    cfg_.vocab_size);
  }
  std::vector<std::vector<int32_t>> out(prompts.size());
  const size_t G = static_cast<size_t>(shape_.eval_batch);
  for (size_t first = 0; first < prompts.size(); first += G)
    generate_chunk(prompts, first, std::min(G, prompts.size() - first), opt, hook, out);
  return out;
}

void GPT2LM::generate_chunk(const std::vector<std::vector<int32_t>>& prompts, size_t first, size_t count,
                            const GenerateOptions& opt, const StepLogitsFn& hook,
                            std::vector<std::vector<int32_t>>& out) {
  const int64_t b = static_cast<int64_t>(count), T = cfg_.seq_len, V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size();
  std::vector<int64_t> len(count);  // tokens each row holds (prompt, then the new ones fed back)
  int64_t t = 0;
  for (size_t i = 0; i < count; ++i) t = std::max(t, len[i] = static_cast<int64_t>(prompts[first + i].size()));
  std::vector<bool> done(count, opt.max_new_tokens == 0);
  if (opt.max_new_tokens == 0) return;
  // prefill: prompts right-padded with token 0 (padded positions are never attended: see
  // GPT2Backbone::prefill)
  std::vector<int32_t> padded(static_cast<size_t>(b * t), 0);
  for (size_t i = 0; i < count; ++i) std::copy(prompts[first + i].begin(), prompts[first + i].end(), padded.begin() + i * t);
  Tensor hidden = backbone_.prefill(padded.data(), b, t);
  Tensor h = backbone_.prefill_last_rows(hidden, len, t);  // now in the decode phase
  Tensor logits = arena_->tensor(head_ids_.g_logits, act_, {b, Vp});
  Tensor next = arena_->tensor(head_ids_.g_next, DType::i32, {b});
  const bool on_device = opt.temperature == 0 && !hook;
  const int64_t drawn = opt.vocab_limit > 0 ? opt.vocab_limit : V;  // the ids a row may choose
  std::vector<float> host_logits(on_device ? 0 : static_cast<size_t>(b * V));
  std::vector<int32_t> chosen(count), feed(count), pos(count);
  for (int64_t step = 0;; ++step) {
    be_->matmul_forward(logits, h, backbone_.wte(false), Tensor());  // tied head
    if (on_device) {
      be_->argmax_rows(next, logits, drawn);
      be_->copy_to_host(chosen.data(), next.data, next.bytes());  // synchronous: G ints
    } else {
      logits_rows_to_host(logits, b, host_logits.data());
      // Rows are independent (each draw depends on its seed, row and step only), so they are
      // sampled in parallel: selecting the top-k of 50k logits is most of a sampled step.
      if (hook)
        for (size_t i = 0; i < count; ++i)
          if (!done[i]) hook(static_cast<int64_t>(first + i), step, {host_logits.data() + i * V, static_cast<size_t>(V)});
#pragma omp parallel for schedule(dynamic, 1)
      for (size_t i = 0; i < count; ++i) {
        if (done[i]) continue;
        const std::span<const float> row(host_logits.data() + i * V, static_cast<size_t>(drawn));
        chosen[i] = sample_token(row, opt, sample_uniform(opt.seed, first + i, static_cast<uint64_t>(step)));
      }
    }
    bool all_done = true;
    for (size_t i = 0; i < count; ++i) {
      if (done[i]) {
        feed[i] = 0, pos[i] = 0;  // a finished row still runs (the batch is fixed): harmless
        continue;
      }
      std::vector<int32_t>& o = out[first + i];
      if (chosen[i] == opt.stop_token) {
        done[i] = true;
      } else {
        o.push_back(chosen[i]);
        ++len[i];
        // a token placed at the last position, T - 1, is never fed back: the context is full
        done[i] = static_cast<int64_t>(o.size()) >= opt.max_new_tokens || len[i] >= T;
      }
      feed[i] = done[i] ? 0 : chosen[i];
      pos[i] = done[i] ? 0 : static_cast<int32_t>(len[i] - 1);
      all_done = all_done && done[i];
    }
    if (all_done) return;
    h = backbone_.decode_step(feed.data(), pos.data(), b);
  }
}

}  // namespace ft
