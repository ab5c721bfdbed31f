// Error handling: UserError for bad input (one clear line), LOOM_CHECK for internal invariants.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace loom {

// A problem with the user's input (config, files, command line). The message is shown as is,
// without a source location, and must name the key/file, the value and the fix.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
};

// A broken internal invariant or a failed library call; the message carries file:line.
class InternalError : public std::runtime_error {
 public:
  explicit InternalError(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& msg);
}  // namespace detail

// Builds a message from any streamable pieces: str("n_head=", n, " must divide ", c).
template <typename... Args>
std::string str(const Args&... args) {
  return detail::concat(args...);
}

// A count and its noun: plural(1, "rank", "ranks") is "1 rank", plural(3, ...) "3 ranks".
inline std::string plural(long long n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace loom

// LOOM_CHECK(cond, pieces...): throws InternalError "file:line: check 'cond' failed: pieces".
#define LOOM_CHECK(cond, ...)                                                            \
  do {                                                                                   \
    if (!(cond))                                                                         \
      ::loom::detail::check_failed(__FILE__, __LINE__, #cond, ::loom::str(__VA_ARGS__)); \
  } while (0)

// LOOM_CHECK_EQ(a, b): prints both values on failure.
#define LOOM_CHECK_EQ(a, b)                                                             \
  do {                                                                                  \
    const auto& loom_a_ = (a);                                                          \
    const auto& loom_b_ = (b);                                                          \
    if (!(loom_a_ == loom_b_))                                                          \
      ::loom::detail::check_failed(__FILE__, __LINE__, #a " == " #b,                    \
                                   ::loom::str(#a "=", loom_a_, " ", #b "=", loom_b_)); \
  } while (0)

// LOOM_USER_CHECK(cond, pieces...): throws UserError with the message alone.
#define LOOM_USER_CHECK(cond, ...)                                  \
  do {                                                              \
    if (!(cond)) throw ::loom::UserError(::loom::str(__VA_ARGS__)); \
  } while (0)
