// The emulator's fibers: a saved context, a switch between two, and a fiber's start
// (runtime.cpp runs a block's threads as fibers on the calling thread).
//
// On x86-64 a switch pushes the callee-saved registers on the running fiber's stack and swaps
// stack pointers, in user space. glibc's swapcontext, the fallback elsewhere (or with
// TG_EMULATOR_UCONTEXT), also saves and restores the signal mask with a system call at every
// switch: perf put __swapcontext at 20% of test_cuda_emulated's samples and the kernel's system
// call path at 25% more.
#pragma once
#include <cstddef>

#if !defined(__x86_64__) && !defined(TG_EMULATOR_UCONTEXT)
#define TG_EMULATOR_UCONTEXT 1
#endif
#ifdef TG_EMULATOR_UCONTEXT
#include <ucontext.h>
#endif

namespace tg::cuda_emulator {

#ifdef TG_EMULATOR_UCONTEXT
struct FiberContext {
  ucontext_t uc{};
};
#else
struct FiberContext {
  void* sp = nullptr;  // the stack pointer it resumes at, its registers pushed below
};
#endif

// Saves the running context in `from` and resumes `to`.
void switch_fiber(FiberContext& from, FiberContext& to);

// Makes `c` start fn() on the stack [stack, stack + bytes) when it is switched to. fn must not
// return: it ends by switching to another context, which never resumes it.
void make_fiber(FiberContext& c, char* stack, size_t bytes, void (*fn)());

}  // namespace tg::cuda_emulator
