// This machine's name, for what a process says of where it runs: the results folder's lock
// (core/folder_lock.h), the ranks' placement line and refusals (dist/rank_map.h), TensorBoard's
// event file names.
#pragma once
#include <unistd.h>

#include <climits>
#include <string>

namespace ft {

// gethostname(), or "localhost" when the machine has no name.
inline std::string host_name() {
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

}  // namespace ft
