// ByteTokenizer; see tokenizer.h.
#include "data/tokenizer.h"

namespace ft {

std::vector<uint32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

std::string ByteTokenizer::decode(std::span<const uint32_t> tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (uint32_t t : tokens) {
    if (t < 256) {
      out.push_back(static_cast<char>(static_cast<unsigned char>(t)));
    } else if (t == kEndOfText) {
      out.append(kEndOfTextMarker);
    } else {
      out.append("<|").append(std::to_string(t)).append("|>");
    }
  }
  return out;
}

}  // namespace ft
