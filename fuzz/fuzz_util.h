// Shared by the fuzz targets: the input written to a file of this process's own (the readers
// under test take paths and map or read files, as they do for users).
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ft::fuzz {

inline std::string write_input(const char* name, const uint8_t* data, size_t size) {
  const std::string path = std::string("/tmp/fittrain_fuzz_") + name + "_" + std::to_string(::getpid());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace ft::fuzz
