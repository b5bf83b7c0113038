// The train CLI's progress line: step, loss, rate, tokens/s and ETA, redrawn in place on a
// terminal, a line every twentieth of the run otherwise; notes print above it.
#pragma once
#include <tapegrad.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace cli {

// One line per event; on a terminal the progress line is redrawn in place.
class Progress {
 public:
  // Under mpirun rank 0's stdout may be a terminal of mpirun's making whatever the user's is:
  // plain lines there.
  Progress(int64_t first, int64_t total)
      : first_(first), total_(total), tty_(isatty(1) && tg::dist::world_size() == 1) {
    start_ = std::chrono::steady_clock::now();
  }
  void update(int64_t step, double loss, double lr, int64_t tokens) {
    tokens_ += tokens;
    const double secs = elapsed();
    const int64_t done = step + 1 - first_;
    const double eta = done ? secs / done * static_cast<double>(total_ - step - 1) : 0;
    const int width = 24, filled = static_cast<int>(width * (step + 1) / total_);
    char line[256];
    std::snprintf(line, sizeof line,
                  "[%s%s] step %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  ETA %.0fs",
                  std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                  static_cast<long long>(step) + 1, static_cast<long long>(total_), loss, lr,
                  secs > 0 ? tokens_ / secs : 0.0, eta);
    const int64_t every = std::max<int64_t>(1, total_ / 20);
    if (tty_) {
      std::printf("\r%s\033[K", line);
      std::fflush(stdout);
    } else if ((step + 1) % every == 0 || step + 1 == total_) {
      std::printf("%s\n", line);
    }
  }
  void note(const std::string& msg) {
    if (tty_) std::printf("\r\033[K");
    std::printf("%s\n", msg.c_str());
    std::fflush(stdout);
  }
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  int64_t first_, total_;
  bool tty_;
  double tokens_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace cli
