// tg::Error and the checks that raise it. Every message starts with "[op]" and names the
// argument, what was expected and what came.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tg {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

// Throws tg::Error("[op] <message>").
template <class... Args>
[[noreturn]] void fail(const char* op, Args&&... args) {
  throw Error(detail::concat("[", op, "] ", std::forward<Args>(args)...));
}

}  // namespace tg

// TG_CHECK(cond, "op", "message parts", ...): throw tg::Error("[op] message") unless cond.
#define TG_CHECK(cond, op, ...)               \
  do {                                        \
    if (!(cond)) ::tg::fail(op, __VA_ARGS__); \
  } while (0)
