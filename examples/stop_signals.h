// SIGINT and SIGTERM for the train CLI, taken by a thread of their own instead of a handler.
//
// A handler runs on the stack of whichever thread the signal interrupts, and the kernel pushes
// its frame below that thread's stack pointer. Code that moves the stack pointer elsewhere
// breaks then: oneDNN 2.6's AVX-512 dnnl_sgemm (Debian's) points it into a heap buffer
// (oneDNN issue #4845), and while tapegrad's matmul called it the cli_sigint test aborted with
// "corrupted double-linked list" about once in 50 runs on a loaded two-core machine. tapegrad
// now uses oneDNN's matmul primitive instead; here, besides, the signals are blocked in every
// thread from the start of main and one thread takes them with sigwait, so no handler frame is
// ever pushed on a compute thread, whatever library it is in.
//
// Until defer_stop_signals() and after end_at_once_on_signals(), a signal ends the process as
// its default action would (status 128 + the signal); in between the first is recorded for
// the training loop to act on, and a second ends the process at once.
#pragma once
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <thread>

namespace stop {

// -1: a signal ends the process; 0: deferring, none yet; above 0: the first signal deferred.
inline std::atomic<int> g_state{-1};

inline sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Ends the process by `sig` with its default action, from the signal thread.
[[noreturn]] inline void die_by(int sig) {
  std::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  std::raise(sig);  // delivered to this thread, now unblocked: the process ends here
  std::_Exit(128 + sig);
}

// Call first in main, before anything starts a thread: every later thread (OpenMP's, oneDNN's,
// MPI's) inherits the blocked mask.
inline void start_signal_thread() {
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      int deferring = 0;
      if (!g_state.compare_exchange_strong(deferring, sig)) die_by(sig);
    }
  }).detach();
}

inline void defer_stop_signals() { g_state.store(0); }

// 0, or the first signal received while deferring.
inline int requested_stop() { return std::max(g_state.load(), 0); }

// From now on a signal ends the process; returns the signal deferred until now, or 0 (one
// exchange, so a signal is either returned here or ends the process, never lost in between).
inline int end_at_once_on_signals() { return std::max(g_state.exchange(-1), 0); }

}  // namespace stop
