#include "dist/multicast_switches.h"

#include <cstdlib>
#include <sstream>
#include <vector>

namespace ft {

std::string multicast_switches() {
  std::string out;
  for (const char* name : kMulticastSwitches) {
    const char* v = std::getenv(name);
    out += std::string(name) + (v ? "=" + std::string(v) : std::string(" unset")) + "\n";
  }
  return out;
}

std::string multicast_switch_apart(const std::string& here, const std::string& rank0) {
  if (here == rank0) return "";
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  };
  const std::vector<std::string> mine = lines(here), theirs = lines(rank0);
  for (size_t i = 0; i < mine.size() || i < theirs.size(); ++i) {
    const std::string a = i < mine.size() ? mine[i] : "(none)", b = i < theirs.size() ? theirs[i] : "(none)";
    if (a != b) return a + " (rank 0: " + b + ")";
  }
  return "";
}

}  // namespace ft
