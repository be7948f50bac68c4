#include "models/gpt2_config.h"

#include <sstream>

#include "core/error.h"

namespace ft {

void GPT2Config::validate() const {
  FT_USER_CHECK(n_layer >= 1 && n_layer <= 1000, "--n-layer must be in [1, 1000], got ", n_layer);
  FT_USER_CHECK(n_head >= 1, "--n-head must be >= 1, got ", n_head);
  FT_USER_CHECK(n_embd >= 1 && n_embd <= (1 << 16), "--n-embd must be in [1, 65536], got ", n_embd);
  FT_USER_CHECK(n_head <= n_embd, "--n-head (", n_head, ") must not exceed --n-embd (", n_embd, ")");
  FT_USER_CHECK(n_embd % n_head == 0, "--n-embd (", n_embd, ") must be divisible by --n-head (",
                n_head, ")");
  FT_USER_CHECK(seq_len >= 1 && seq_len <= (1 << 20), "--seq-len must be in [1, 1048576], got ",
                seq_len);
  FT_USER_CHECK(vocab_size >= 2 && vocab_size <= (1 << 30), "--vocab-size must be in [2, 2^30], got ",
                vocab_size);
}

std::string GPT2Config::describe() const {
  std::ostringstream os;
  os << "GPT-2 L=" << n_layer << " H=" << n_head << " C=" << n_embd << " T=" << seq_len
     << " V=" << vocab_size << " (padded " << padded_vocab_size() << ")";
  return os.str();
}

nlohmann::json GPT2Config::to_json() const {
  return {{"arch", "gpt2"}, {"n_layer", n_layer}, {"n_head", n_head}, {"n_embd", n_embd},
          {"seq_len", seq_len}, {"vocab_size", vocab_size}};
}

GPT2Config GPT2Config::from_json(const nlohmann::json& j, const std::string& source) {
  FT_USER_CHECK(j.is_object(), source, ": model configuration is not an object");
  GPT2Config c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "arch") continue;
    int* field = k == "n_layer" ? &c.n_layer : k == "n_head" ? &c.n_head : k == "n_embd" ? &c.n_embd
               : k == "seq_len" ? &c.seq_len : k == "vocab_size" ? &c.vocab_size : nullptr;
    FT_USER_CHECK(field, source, ": unknown GPT-2 setting '", k,
                  "' (known: n_layer, n_head, n_embd, seq_len, vocab_size)");
    FT_USER_CHECK(it.value().is_number_integer(), source, ": GPT-2 setting '", k, "' must be an integer, got ",
                  it.value().dump());
    *field = it.value().get<int>();
  }
  for (const char* k : {"n_layer", "n_head", "n_embd", "seq_len", "vocab_size"})
    FT_USER_CHECK(j.contains(k), source, ": GPT-2 configuration lacks '", k, "'");
  return c;
}

}  // namespace ft
