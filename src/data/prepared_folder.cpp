#include "data/prepared_folder.h"

#include <filesystem>
#include <regex>

namespace ft {
namespace fs = std::filesystem;

bool is_prepared_shard_name(const std::string& file_name) {
  static const std::regex ours(R"((train|val)_[0-9]{6}\.(bin|pairs))");
  return std::regex_match(file_name, ours);
}

std::string first_prepared_shard(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (is_prepared_shard_name(it->path().filename().string())) return it->path().filename().string();
  return "";
}

}  // namespace ft
