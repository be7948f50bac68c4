// `fittrain --version`: the version and what this binary was built with (backends, libraries
// and their versions), for bug reports.
#pragma once
#include <string>

namespace ft {
std::string build_info();
}
