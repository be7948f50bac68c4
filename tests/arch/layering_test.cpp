// The layers of src/ only point down (docs/DESIGN.md): every #include "layer/..." in a
// file of one layer names that layer or one below it. A new upward include fails here
// with the file and the line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

namespace {

// What each layer may include (itself included).
const std::map<std::string, std::set<std::string>> kAllowed = {
    {"core", {"core"}},
    {"backend", {"core", "backend"}},
    {"plan", {"core", "backend", "plan"}},
    {"data", {"core", "data"}},
    {"dist", {"core", "backend", "dist"}},
    {"optim", {"core", "backend", "plan", "optim"}},
    {"models", {"core", "backend", "plan", "models"}},
    {"train", {"core", "backend", "plan", "models", "optim", "dist", "data", "train"}},
    {"cli", {"core", "backend", "plan", "models", "optim", "dist", "data", "train", "cli"}},
};

TEST(Layering, IncludesOnlyPointDown) {
  const std::filesystem::path src = std::filesystem::path(FITTRAIN_SOURCE_DIR) / "src";
  const std::regex inc("^\\s*#\\s*include\\s*\"([a-z_]+)/");
  int files = 0, includes = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    const auto rel = std::filesystem::relative(entry.path(), src);
    const std::string layer = rel.begin()->string();
    auto allowed = kAllowed.find(layer);
    ASSERT_NE(allowed, kAllowed.end()) << "src/" << layer << " is not a known layer: add it to kAllowed and DESIGN.md";
    ++files;
    std::ifstream f(entry.path());
    std::string line;
    int n = 0;
    while (std::getline(f, line)) {
      ++n;
      std::smatch m;
      if (!std::regex_search(line, m, inc)) continue;
      ++includes;
      EXPECT_TRUE(allowed->second.count(m[1].str()))
          << "src/" << rel.string() << ":" << n << " (" << layer << ") includes " << m[1].str() << "/: " << line;
    }
  }
  EXPECT_GT(files, 50);
  EXPECT_GT(includes, 100);
}

}  // namespace

namespace ft {
namespace {

// The shared GPU machines must keep NVLink multicast off (a program using it can take the
// host's GPUs out of service): no source calls the driver's multicast objects or NVLS, and
// none clears the variables that switch it off.
TEST(Layering, NoMulticastObjects) {
  const std::filesystem::path src = std::filesystem::path(FITTRAIN_SOURCE_DIR) / "src";
  for (const auto& entry : std::filesystem::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      for (const char* banned : {"cuMulticast", "unsetenv(\"NCCL_NVLS", "unsetenv(\"TORCH_SYMM", "unsetenv(\"NVSHMEM",
                                 "clearenv"})
        EXPECT_EQ(line.find(banned), std::string::npos) << entry.path() << ":" << n << " uses " << banned;
    }
  }
}

}  // namespace
}  // namespace ft
