#include "dist/rank_map.h"

#include <unistd.h>

#include <map>

#include "core/host_name.h"

namespace ft {

std::string rank_entry(const std::string& device) {
  return host_name() + "\t" + device + "\t" + std::to_string(::getpid());
}

std::string format_rank_map(const std::vector<std::string>& entries, const std::string& indent) {
  std::vector<std::string> hosts;                // in the order of their first rank
  std::map<std::string, std::string> of_host;    // host -> "rank 0 cuda:0 (pid 12), ..."
  for (size_t r = 0; r < entries.size(); ++r) {
    const std::string& e = entries[r];
    const size_t a = e.find('\t'), b = a == std::string::npos ? a : e.find('\t', a + 1);
    const std::string host = b == std::string::npos ? e : e.substr(0, a);
    const std::string where = b == std::string::npos ? std::string()
                                                     : " " + e.substr(a + 1, b - a - 1) + " (pid " + e.substr(b + 1) + ")";
    if (!of_host.count(host)) hosts.push_back(host);
    std::string& line = of_host[host];
    line += (line.empty() ? "" : ", ") + ("rank " + std::to_string(r)) + where;
  }
  std::string out;
  for (size_t h = 0; h < hosts.size(); ++h) out += (h ? "\n" + indent : "") + hosts[h] + ": " + of_host[hosts[h]];
  return out;
}

}  // namespace ft
