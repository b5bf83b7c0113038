#include "dist/watchdog.h"

#include <cstdio>
#include <cstdlib>

namespace tg::dist::detail {

void Watchdog::start(double timeout_s, int rank) {
  timeout_ = std::chrono::duration<double>(timeout_s);
  rank_ = rank;
  if (timeout_s > 0) thread_ = std::thread([this] { watch(); });
}

void Watchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::arm(const char* what) {
  std::lock_guard<std::mutex> lock(mutex_);
  what_ = what;
  deadline_ = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_);
  if (idle_) cv_.notify_all();
}

void Watchdog::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  what_ = nullptr;
}

void Watchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (!what_) {
      idle_ = true;
      cv_.wait(lock);
      idle_ = false;
      continue;
    }
    if (cv_.wait_until(lock, deadline_) == std::cv_status::timeout && what_ &&
        std::chrono::steady_clock::now() >= deadline_) {
      std::fprintf(stderr,
                   "[dist] rank %d: %s waited more than %g s for the other ranks (one failed, "
                   "exited or called a different collective); ending the job\n",
                   rank_, what_, timeout_.count());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
}

}  // namespace tg::dist::detail
