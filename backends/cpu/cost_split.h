// Contiguous shares of a task list for the threads of an OpenMP team, balanced by cost. A
// thread that walks its tasks in order can keep what consecutive tasks share (the SDPA
// forward's packed K/V head) in its own cache, which a dynamic schedule would scatter.
#pragma once
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/tensor.h"

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

// How many parts to split each of `tasks` equal tasks into so that a team of `threads` gets
// about four a thread, where a dynamic schedule then evens out threads that run at different
// speeds: 1 while there are that many already, never more than `most` nor kMaxParts (each part
// beyond the first costs the SDPA kernels a partial sum the size of their result).
inline constexpr int64_t kMaxParts = 8;
inline int64_t parts_per_task(int64_t tasks, int64_t threads, int64_t most) {
  if (tasks >= 4 * threads) return 1;
  return std::clamp<int64_t>((4 * threads + tasks - 1) / std::max<int64_t>(tasks, 1), 1,
                             std::clamp<int64_t>(most, 1, kMaxParts));
}

// The same shares handed out task by task, with stealing: a thread whose share runs out takes
// the second half (by cost) of the share with the most cost left, and walks it in order. On a
// shared machine one core can run a fifth slower than the other for most of a second at a time
// (a 2-core Zen 3 VM, presumably with another guest on a sibling hyperthread: tile products
// from L1 at 72 and 95 GFLOP/s on its two threads in the same quarter second), which a fixed
// share turns into the other thread waiting; stolen runs stay contiguous, so what consecutive
// tasks share is kept. Which thread runs a task never changes its result.
class TaskShares {
 public:
  TaskShares(const CostPrefix& c, int64_t threads) : c_(c) {
    for (int64_t t = 0; t < threads; ++t) shares_.push_back(task_share(c, t, threads));
  }
  // Shares for the threads of the OpenMP team to come (all tasks outside OpenMP).
  explicit TaskShares(const CostPrefix& c) : TaskShares(c, get_num_threads()) {}
  // next(thread) and peek(thread) for the calling thread of the team.
  int64_t next() { return next(thread_number()); }
  int64_t peek() { return peek(thread_number()); }
  // The next task of thread `thread` (any thread number: one past the shares has none of its
  // own and only steals), or -1 when every task is taken.
  int64_t next(int64_t thread) {
    std::lock_guard<std::mutex> lock(m_);
    TaskRange* own = thread < static_cast<int64_t>(shares_.size()) ? &shares_[thread] : nullptr;
    if (own && own->first < own->last) return own->first++;
    TaskRange* victim = nullptr;
    for (TaskRange& r : shares_)
      if (r.first < r.last && (!victim || left(r) > left(*victim))) victim = &r;
    if (!victim) return -1;
    if (!own) return --victim->last;  // a thread with no share of its own: one task at a time
    // The first task whose cost midpoint is past half the victim's cost left (its last task
    // when only one is left).
    int64_t lo = victim->first, hi = victim->last - 1;
    const int64_t half = c_.prefix[victim->first] + c_.prefix[victim->last];
    while (lo < hi) {
      const int64_t i = (lo + hi) / 2;
      if (c_.prefix[i] + c_.prefix[i + 1] < half)
        lo = i + 1;
      else
        hi = i;
    }
    *own = {lo + 1, victim->last};
    victim->last = lo;
    return lo;
  }
  // The task `next(thread)` will return if nothing is stolen from the thread first (-1: none
  // of its own): what a task may ask the cache to bring in for the one after it.
  int64_t peek(int64_t thread) {
    std::lock_guard<std::mutex> lock(m_);
    if (thread >= static_cast<int64_t>(shares_.size())) return -1;
    const TaskRange& r = shares_[thread];
    return r.first < r.last ? r.first : -1;
  }

 private:
  static int64_t thread_number() {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
  }
  int64_t left(const TaskRange& r) const { return c_.prefix[r.last] - c_.prefix[r.first]; }
  const CostPrefix& c_;
  std::vector<TaskRange> shares_;
  std::mutex m_;
};

}  // namespace tg::cpu
