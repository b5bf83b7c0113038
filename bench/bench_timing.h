// The benchmarks' clock and summary: wall milliseconds and the median of a run's samples.
#pragma once

#include <algorithm>
#include <chrono>
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

}  // namespace bench
