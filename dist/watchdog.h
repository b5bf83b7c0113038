// Ends the process when one collective runs past the timeout: the only way out of a blocking
// MPI call whose peers are gone. _Exit without MPI_Finalize makes mpirun stop the other ranks.
// Internal to dist.cpp, which arms it around every collective.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace tg::dist::detail {

class Watchdog {
 public:
  ~Watchdog() { stop(); }
  // A thread that watches for `timeout_s` (none when 0); `rank` for its message.
  void start(double timeout_s, int rank);
  void stop();
  // Wakes the thread only from its untimed wait: waiting for an earlier deadline, it finds the
  // later one when that passes. (A wake-up for every collective took a context switch on a
  // busy core each time DDP tested its buckets.)
  void arm(const char* what);
  void disarm();

 private:
  void watch();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::thread thread_;
  std::chrono::duration<double> timeout_{0};
  std::chrono::steady_clock::time_point deadline_;
  const char* what_ = nullptr;
  bool stopping_ = false;
  bool idle_ = false;  // in the untimed wait: nothing armed when the thread last looked
  int rank_ = 0;
};

}  // namespace tg::dist::detail
