// libFuzzer target: the checkpoint reader on arbitrary bytes: open (header, metadata, section
// table), every payload's CRC, each section read whole. A malformed file must be refused with
// ft::UserError; a crash, a sanitizer report or another exception is a bug.
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "fuzz_util.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ft::fuzz::write_input("ckpt", data, size);
  try {
    ft::CheckpointReader r(path);
    r.verify_all();
    for (const auto& e : r.sections()) {
      if (e.bytes > (64u << 20)) continue;  // the reader bounds sections by the file size
      std::vector<char> buf(e.bytes);
      r.read(e.name, buf.data(), buf.size());
    }
    (void)r.meta().dump();
  } catch (const ft::UserError&) {
  }
  return 0;
}
