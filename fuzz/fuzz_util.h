// Shared by the fuzz targets: the input written to a file of this process's own (the readers
// under test take paths and map or read files, as they do for users).
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ft::fuzz {

// The files write_input made, removed when the fuzzer exits (a static's destructor).
struct InputFiles {
  std::vector<std::string> paths;
  ~InputFiles() {
    for (const std::string& p : paths) std::remove(p.c_str());
  }
};
inline InputFiles& input_files() {
  static InputFiles files;
  return files;
}

inline std::string write_input(const char* name, const uint8_t* data, size_t size) {
  const std::string path = std::string("/tmp/fittrain_fuzz_") + name + "_" + std::to_string(::getpid());
  std::vector<std::string>& made = input_files().paths;
  if (std::find(made.begin(), made.end(), path) == made.end()) made.push_back(path);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace ft::fuzz
