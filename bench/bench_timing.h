// The benchmarks' clock and summary: wall milliseconds, the median of a run's samples, and
// where a step's time goes by kernel kind.
#pragma once

#include <tapegrad.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace bench {

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs step() `steps` times under the profiling backend and prints the kernel time by kind per
// step, "kernel_ms\t[label\t]kind\tms\tN calls", then the rest of the wall time as
// "framework (wall - kernels)" (the profiler's per-kernel timing slows the steps themselves).
template <class Step>
void print_kernel_profile(const std::string& label, int steps, Step&& step) {
  tg::reset_kernel_profile();
  tg::set_kernel_profiling(true);
  const double a = now_ms();
  for (int i = 0; i < steps; ++i) step();
  const double wall = (now_ms() - a) / steps;
  tg::set_kernel_profiling(false);
  const std::string prefix = "kernel_ms\t" + (label.empty() ? "" : label + "\t");
  double kernels = 0;
  for (const auto& [kind, t] : tg::kernel_profile()) {
    std::printf("%s%s\t%.2f\t%lld calls\n", prefix.c_str(), kind.c_str(), t.ms / steps,
                static_cast<long long>(t.calls / steps));
    kernels += t.ms / steps;
  }
  std::printf("%sframework (wall - kernels)\t%.2f\n", prefix.c_str(), wall - kernels);
}

}  // namespace bench
