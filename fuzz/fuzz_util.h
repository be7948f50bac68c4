// Shared by the fuzz targets: the input written to a file of this process's own (the readers
// under test take paths and map or read files, as they do for users).
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace ft::fuzz {

// /tmp/fittrain_fuzz_<name>_<pid>: a file or folder of this process's own, removed (with
// what it holds) when the fuzzer exits, by a static's destructor.
inline std::string scratch_path(const char* name) {
  static struct Made {
    std::vector<std::string> paths;
    ~Made() {
      std::error_code ec;
      for (const std::string& p : paths) std::filesystem::remove_all(p, ec);
    }
  } made;
  const std::string path = std::string("/tmp/fittrain_fuzz_") + name + "_" + std::to_string(::getpid());
  if (std::find(made.paths.begin(), made.paths.end(), path) == made.paths.end()) made.paths.push_back(path);
  return path;
}

inline std::string write_input(const char* name, const uint8_t* data, size_t size) {
  const std::string path = scratch_path(name);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace ft::fuzz
