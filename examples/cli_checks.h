// What the command-line programs share: every flag's value checked before any work, and one
// way of ending. A bad value or an unknown flag is one "[--flag] ..." (or "[program] ...")
// line on stderr and exit status 2, the usual status of a usage error; a failure while
// working is one "error: ..." line and status 1.
#pragma once
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>

namespace cli {

// A flag's value that cannot be used; its message starts with "[--flag]".
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class... Parts>
[[noreturn]] void usage_error(const char* flag, const Parts&... parts) {
  std::ostringstream os;
  os << "[" << flag << "] ";
  (os << ... << parts);
  throw UsageError(os.str());
}

// Counts: at least 1, or at least 0 where 0 means something (said in the flag's help).
inline void positive(int64_t v, const char* flag) {
  if (v < 1) usage_error(flag, "must be at least 1, got ", v);
}
inline void non_negative(int64_t v, const char* flag) {
  if (v < 0) usage_error(flag, "must be 0 or more, got ", v);
}

// A finite number in [lo, hi], or [lo, hi) when hi_open.
inline void finite_in(double v, const char* flag, double lo, double hi, bool hi_open = false) {
  if (!std::isfinite(v)) usage_error(flag, "must be a finite number, got ", v);
  if (v < lo || v > hi || (hi_open && v == hi)) {
    usage_error(flag, "must be in [", lo, ", ", hi, hi_open ? ")" : "]", ", got ", v);
  }
}
inline void finite_positive(double v, const char* flag) {
  if (!std::isfinite(v) || v <= 0) usage_error(flag, "must be a finite number above 0, got ", v);
}

// This process's rank under a launcher (mpirun, srun), from its environment; 0 without one.
// Every rank parses the same flags: only rank 0 prints what parsing says.
inline int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

// Parses argv into app, then runs body(); maps each way of failing to its line and status.
template <class Body>
int run(const char* program, CLI::App& app, int argc, char** argv, Body&& body) {
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return launcher_rank() == 0 ? app.exit(e) : 0;
    } catch (const CLI::CallForAllHelp& e) {
      return launcher_rank() == 0 ? app.exit(e) : 0;
    } catch (const CLI::ParseError& e) {
      if (launcher_rank() == 0) std::fprintf(stderr, "[%s] %s (see --help)\n", program, e.what());
      return 2;
    }
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return 1;
  }
}

}  // namespace cli
