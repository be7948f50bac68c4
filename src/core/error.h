// Errors. fittrain distinguishes two kinds:
//  - UserError: bad input (a flag, a file, a budget). The CLI prints its message alone and
//    exits with status 2. Messages name the flag or file and say what is wrong.
//  - InternalError: a broken invariant, with file and line. Exit status 3.
// Neither is ever caught inside the training loop: a step either completes or the process
// stops before touching a checkpoint (checkpoints are written atomically elsewhere).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ft {

struct UserError : std::runtime_error {
  explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
};

// The device (or host) could not provide memory the plan asked for: the Session re-plans
// with what is free instead of failing, unless the plan cannot shrink further.
struct OutOfMemoryError : UserError {
  explicit OutOfMemoryError(const std::string& msg) : UserError(msg) {}
};

struct InternalError : std::runtime_error {
  explicit InternalError(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace ft

// Bad input: throws ft::UserError with the concatenated message.
#define FT_USER_CHECK(cond, ...)                                     \
  do {                                                               \
    if (!(cond)) throw ::ft::UserError(::ft::detail::concat(__VA_ARGS__)); \
  } while (0)

// Invariant: throws ft::InternalError naming file and line.
#define FT_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond))                                                                         \
      throw ::ft::InternalError(::ft::detail::concat(__FILE__, ":", __LINE__, ": check '", \
                                                     #cond, "' failed. ", ##__VA_ARGS__)); \
  } while (0)
