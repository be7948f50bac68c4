// libFuzzer target: the token-shard reader (both formats) on arbitrary bytes. A malformed file
// must be refused with ft::UserError; anything else (a crash, a sanitizer report, another
// exception) is a bug. A shard that opens must be readable to its last token.
#include <cstdint>

#include "core/error.h"
#include "data/token_shard.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ft::fuzz::write_input("shard", data, size);
  try {
    ft::TokenShard shard(path);
    uint64_t sum = 0;
    for (size_t i = 0; i < shard.size(); ++i) sum += shard.token(i);
    if (sum == 0xffffffffffffffffull) std::abort();  // keeps the reads
  } catch (const ft::UserError&) {
  }
  return 0;
}
