// builtin_corpus: a deterministic, structured English-like text for smoke tests and demos,
// so that a tiny model has something learnable without downloading data.
//
// Text comes from a small hand-written grammar: paragraphs about one character (introduced,
// then referred to by name or pronoun), sentences from a dozen templates whose verbs take
// objects of the right kind (people eat food, carry objects, feed animals), "a"/"an" agreement,
// capitalised sentence starts and names, and a little dialogue. Byte-level entropy is close to
// English (about 4 bits per byte), while the grammar makes much lower loss reachable.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ft {

inline constexpr size_t kBuiltinCorpusDefaultBytes = 1'500'000;

// At least approx_bytes bytes (a paragraph longer), identical for identical arguments.
std::string builtin_corpus(size_t approx_bytes = kBuiltinCorpusDefaultBytes, uint64_t seed = 0);

}  // namespace ft
