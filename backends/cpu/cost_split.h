// Contiguous shares of a task list for the threads of an OpenMP team, balanced by cost. A
// thread that walks its tasks in order can keep what consecutive tasks share (the SDPA
// forward's packed K/V head) in its own cache, which a dynamic schedule would scatter.
#pragma once
#include <cstdint>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tg::cpu {

// Prefix sums of task costs: prefix[i] is the cost of tasks [0, i).
struct CostPrefix {
  std::vector<int64_t> prefix{0};
  explicit CostPrefix(int64_t expected_tasks = 0) { prefix.reserve(expected_tasks + 1); }
  void add(int64_t cost) { prefix.push_back(prefix.back() + cost); }
  int64_t tasks() const { return static_cast<int64_t>(prefix.size()) - 1; }
};

// Tasks [first, last) of thread `thread` of `threads`: the tasks whose cost midpoints fall in
// its 1/threads share of the total, so every task goes to exactly one thread, in order, and
// each thread's share is within one task's cost of the mean. (All-zero costs: the last thread.)
struct TaskRange {
  int64_t first = 0, last = 0;
};
inline TaskRange task_share(const CostPrefix& c, int64_t thread, int64_t threads) {
  const int64_t total = c.prefix.back();
  // The first task whose midpoint (prefix[i] + prefix[i + 1]) / 2 is at or past total * k / n.
  auto start = [&](int64_t k) -> int64_t {
    if (k >= threads) return c.tasks();
    int64_t lo = 0, hi = c.tasks();
    while (lo < hi) {
      const int64_t i = (lo + hi) / 2;
      if ((c.prefix[i] + c.prefix[i + 1]) * threads < 2 * total * k)
        lo = i + 1;
      else
        hi = i;
    }
    return lo;
  };
  return {start(thread), start(thread + 1)};
}

// The calling thread's share in an OpenMP parallel region (all tasks outside one).
inline TaskRange my_tasks(const CostPrefix& c) {
#ifdef _OPENMP
  return task_share(c, omp_get_thread_num(), omp_get_num_threads());
#else
  return task_share(c, 0, 1);
#endif
}

}  // namespace tg::cpu
