// builtin_corpus: a small generative grammar; see builtin_corpus.h.
#include "data/builtin_corpus.h"

#include <array>
#include <span>
#include <string_view>

namespace ft {
namespace {

using Words = std::span<const std::string_view>;

struct Name {
  std::string_view name;
  std::string_view pronoun;  // subject pronoun
  std::string_view possessive;
};
constexpr Name kNames[] = {
    {"anna", "she", "her"},  {"ben", "he", "his"},    {"clara", "she", "her"},
    {"david", "he", "his"},  {"emma", "she", "her"},  {"felix", "he", "his"},
    {"grace", "she", "her"}, {"henry", "he", "his"},  {"iris", "she", "her"},
    {"jack", "he", "his"},   {"lena", "she", "her"},  {"marco", "he", "his"},
    {"nora", "she", "her"},  {"oscar", "he", "his"},  {"rosa", "she", "her"},
    {"tom", "he", "his"},
};

constexpr std::string_view kPeople[] = {"farmer",  "baker",    "teacher",  "doctor",
                                        "sailor",  "miller",   "fisherman", "painter",
                                        "gardener", "merchant", "soldier",  "shepherd"};
constexpr std::string_view kAnimals[] = {"dog",  "cat",   "horse", "goat",  "cow",
                                         "fox",  "bird",  "sheep", "duck",  "mouse"};
constexpr std::string_view kFoods[] = {"bread", "apple",  "cheese", "soup",  "fish",
                                       "cake",  "egg",    "pear",   "carrot", "onion"};
constexpr std::string_view kObjects[] = {"basket", "box", "letter", "lamp", "rope", "hat",
                                         "book",   "key", "cup",    "bag",  "coin", "umbrella"};
constexpr std::string_view kPlaces[] = {"market", "river",  "forest", "village", "garden", "hill",
                                        "school", "bridge", "harbor", "field",   "mill",   "kitchen"};

constexpr std::string_view kObjectVerbs[] = {"carried", "dropped", "found",  "lost",  "painted",
                                             "sold",    "bought",  "hid",    "washed", "opened",
                                             "mended",  "wrapped"};
constexpr std::string_view kFoodVerbs[] = {"ate", "cooked", "bought", "sold", "shared", "tasted"};
constexpr std::string_view kAnimalVerbs[] = {"fed", "followed", "watched", "chased", "called",
                                             "brushed"};
constexpr std::string_view kPersonVerbs[] = {"helped", "visited", "thanked", "met", "greeted"};
constexpr std::string_view kMotionVerbs[] = {"walked", "ran", "went", "hurried", "rode"};
// What each animal does, in the same order as kAnimals.
constexpr std::string_view kAnimalActs[] = {"barked", "slept", "galloped", "climbed", "mooed",
                                            "hid",    "sang",  "grazed",   "swam",    "squeaked"};

constexpr std::string_view kAdjectives[] = {"old",   "young", "red",   "small",  "big",
                                            "green", "quiet", "brown", "white",  "heavy",
                                            "bright", "clever", "little", "empty", "new"};
constexpr std::string_view kFoodAdjectives[] = {"fresh", "sweet", "warm", "ripe", "salty"};
constexpr std::string_view kFeelings[] = {"happy", "tired", "hungry", "cold", "glad", "worried"};
constexpr std::string_view kPrepositions[] = {"near", "behind", "under", "beside", "across",
                                              "inside"};
constexpr std::string_view kTimes[] = {"in the morning", "at noon", "in the evening",
                                       "after the rain", "before dinner", "on monday",
                                       "on sunday", "at night"};

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  bool chance(int percent) { return below(100) < static_cast<size_t>(percent); }
  template <class T, size_t N>
  const T& pick(const T (&a)[N]) { return a[below(N)]; }

 private:
  uint64_t s_;
};

bool starts_with_vowel(std::string_view w) {
  return !w.empty() && std::string_view("aeiou").find(w[0]) != std::string_view::npos;
}

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  // Appends a word with a separating space (none at sentence start).
  void word(std::string_view w) {
    if (!at_start_) out_.push_back(' ');
    const size_t pos = out_.size();
    out_.append(w);
    if (capitalize_next_ && !w.empty() && w[0] >= 'a' && w[0] <= 'z') out_[pos] = char(w[0] - 32);
    capitalize_next_ = false;
    at_start_ = false;
  }
  void name(std::string_view n) {  // names are always capitalised
    capitalize_next_ = true;
    word(n);
  }
  // "a"/"an" chosen by the next word, then an optional adjective, then the noun.
  void indefinite(std::string_view adj, std::string_view noun) {
    const std::string_view next = adj.empty() ? noun : adj;
    word(starts_with_vowel(next) ? "an" : "a");
    if (!adj.empty()) word(adj);
    word(noun);
  }
  void punct(std::string_view p) { out_.append(p); }
  void end_sentence(std::string_view p = ".") {
    out_.append(p);
    capitalize_next_ = true;
  }
  void open_quote() {
    if (!at_start_) out_.push_back(' ');
    out_.push_back('"');
    at_start_ = true;
    capitalize_next_ = true;
  }

 private:
  std::string& out_;
  bool at_start_ = true;
  bool capitalize_next_ = true;
};

struct Paragraph {
  const Name* hero;
  const Name* friend_;
  std::string_view job;
  std::string_view home;  // place
  std::string_view pet;
  bool introduced = false;
};

void subject(Writer& w, Rng& rng, Paragraph& p) {
  if (p.introduced && rng.chance(50))
    w.word(p.hero->pronoun);
  else if (rng.chance(25)) {
    w.word("the");
    w.word(p.job);
  } else {
    w.name(p.hero->name);
  }
}

void sentence(Writer& w, Rng& rng, Paragraph& p) {
  const size_t kind = rng.below(10);
  if (kind != 8 && rng.chance(20)) {  // no time phrase before dialogue
    w.word(rng.pick(kTimes));
    w.punct(",");
  }
  switch (kind) {
    case 0: {  // object verb + place
      subject(w, rng, p);
      w.word(rng.pick(kObjectVerbs));
      if (rng.chance(50)) {
        w.word("the");
        w.word(rng.pick(kAdjectives));
        w.word(rng.pick(kObjects));
      } else {
        w.indefinite(rng.chance(60) ? rng.pick(kAdjectives) : "", rng.pick(kObjects));
      }
      w.word(rng.pick(kPrepositions));
      w.word("the");
      w.word(rng.pick(kPlaces));
      break;
    }
    case 1: {  // food
      subject(w, rng, p);
      w.word(rng.pick(kFoodVerbs));
      w.indefinite(rng.chance(60) ? rng.pick(kFoodAdjectives) : "", rng.pick(kFoods));
      if (rng.chance(40)) {
        w.word("with");
        w.name(p.friend_->name);
      }
      break;
    }
    case 2: {  // the pet acts
      w.word("the");
      if (rng.chance(40)) w.word(rng.pick(kAdjectives));
      w.word(p.pet);
      size_t a = 0;
      while (kAnimals[a] != p.pet) ++a;
      w.word(kAnimalActs[a]);
      w.word(rng.pick(kPrepositions));
      w.word("the");
      w.word(rng.pick(kPlaces));
      break;
    }
    case 3: {  // animal verb
      subject(w, rng, p);
      w.word(rng.pick(kAnimalVerbs));
      w.word(p.hero->possessive);
      w.word(p.pet);
      break;
    }
    case 4: {  // motion
      subject(w, rng, p);
      w.word(rng.pick(kMotionVerbs));
      w.word("to");
      w.word("the");
      const auto place = rng.pick(kPlaces);
      w.word(place);
      if (place == "market" || rng.chance(30)) {
        w.word("to");
        w.word("buy");
        w.word("some");
        w.word(rng.pick(kFoods));
      }
      break;
    }
    case 5: {  // giving
      subject(w, rng, p);
      w.word("gave");
      w.word("the");
      w.word(rng.pick(kObjects));
      w.word("to");
      w.name(p.friend_->name);
      break;
    }
    case 6: {  // person verb
      subject(w, rng, p);
      w.word(rng.pick(kPersonVerbs));
      if (rng.chance(50)) {
        w.name(p.friend_->name);
      } else {
        w.word("the");
        w.word(rng.pick(kPeople));
      }
      w.word("at");
      w.word("the");
      w.word(rng.pick(kPlaces));
      break;
    }
    case 7: {  // feeling -> consequence
      const auto feel = rng.pick(kFeelings);
      subject(w, rng, p);
      w.word("was");
      w.word(feel);
      w.punct(",");
      w.word("so");
      w.word(p.hero->pronoun);
      if (feel == "hungry") {
        w.word("ate");
        w.indefinite("", rng.pick(kFoods));
      } else if (feel == "tired" || feel == "cold") {
        w.word("rested");
        w.word("in");
        w.word("the");
        w.word("kitchen");
      } else {
        w.word("sang");
        w.word("a");
        w.word("song");
      }
      break;
    }
    case 8: {  // dialogue
      const auto obj = rng.pick(kObjects);
      w.open_quote();
      w.word("where");
      w.word("is");
      w.word("the");
      w.word(obj);
      w.punct("?\"");
      w.word("asked");
      w.name(p.hero->name);
      w.end_sentence(".");
      w.open_quote();
      w.word("the");
      w.word(obj);
      w.word("is");
      w.word(rng.pick(kPrepositions));
      w.word("the");
      w.word(rng.pick(kPlaces));
      w.punct(",\"");
      w.word("said");
      w.name(p.friend_->name);
      break;
    }
    default: {  // description
      w.word("the");
      w.word(p.home);
      w.word("was");
      w.word(rng.pick(kAdjectives));
      w.word("and");
      w.word(rng.chance(50) ? "quiet" : "warm");
      break;
    }
  }
  w.end_sentence(".");
  p.introduced = true;
}

}  // namespace

std::string builtin_corpus(size_t approx_bytes, uint64_t seed) {
  std::string out;
  out.reserve(approx_bytes + 2048);
  Rng rng(seed ^ 0x6275696C74696E00ull);  // "builtin"
  while (out.size() < approx_bytes) {
    if (!out.empty()) out.append("\n\n");
    Writer w(out);
    Paragraph p{&rng.pick(kNames), nullptr, rng.pick(kPeople), rng.pick(kPlaces),
                rng.pick(kAnimals)};
    do p.friend_ = &rng.pick(kNames); while (p.friend_ == p.hero);
    // Introduction: "Anna was a young baker who lived near the river."
    w.name(p.hero->name);
    w.word("was");
    w.indefinite(rng.pick(kAdjectives), p.job);
    w.word("who");
    w.word("lived");
    w.word(rng.pick(kPrepositions));
    w.word("the");
    w.word(p.home);
    w.word("with");
    w.word(p.hero->possessive);
    w.word(p.pet);
    w.end_sentence(".");
    p.introduced = true;
    const size_t n = 3 + rng.below(5);
    for (size_t i = 0; i < n; ++i) sentence(w, rng, p);
    if (rng.chance(40)) {
      w.word("that");
      w.word("night");
      w.punct(",");
      w.word(p.hero->pronoun);
      w.word("slept");
      w.word("well");
      w.end_sentence(".");
    }
  }
  return out;
}

}  // namespace ft
