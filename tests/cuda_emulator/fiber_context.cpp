// fiber_context.h's switch: hand-written on x86-64, ucontext elsewhere.
#include "tests/cuda_emulator/fiber_context.h"

#include <cstdint>

#ifndef TG_EMULATOR_UCONTEXT
// tg_emulator_switch(&from.sp, to.sp): pushes the System V ABI's callee-saved integer registers,
// saves the stack pointer, loads the other context's and pops its registers; `ret` then returns
// into that context (or enters a new fiber's function, make_fiber). The caller-saved registers
// are saved by the compiler around the call. MXCSR and the x87 control word, callee-saved too,
// are left alone: no emulated kernel changes them, so every fiber has the same.
extern "C" void tg_emulator_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .p2align 4
  .globl tg_emulator_switch
  .hidden tg_emulator_switch
  .type tg_emulator_switch, @function
tg_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tg_emulator_switch, .-tg_emulator_switch
)");
#endif

namespace tg::cuda_emulator {

#ifdef TG_EMULATOR_UCONTEXT

void switch_fiber(FiberContext& from, FiberContext& to) { swapcontext(&from.uc, &to.uc); }

void make_fiber(FiberContext& c, char* stack, size_t bytes, void (*fn)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, fn, 0);
}

#else

void switch_fiber(FiberContext& from, FiberContext& to) { tg_emulator_switch(&from.sp, to.sp); }

void make_fiber(FiberContext& c, char* stack, size_t bytes, void (*fn)()) {
  // The top 16-byte aligned; below it, the six registers the switch pops (zeros), fn as the
  // address its `ret` goes to, and one word of padding, so that fn starts with the stack
  // pointer 8 past a multiple of 16, as after a call.
  char* top = stack + bytes;
  top -= reinterpret_cast<uintptr_t>(top) % 16;
  auto** sp = reinterpret_cast<void**>(top) - 8;
  for (int r = 0; r < 6; ++r) sp[r] = nullptr;
  sp[6] = reinterpret_cast<void*>(fn);
  sp[7] = nullptr;
  c.sp = sp;
}

#endif

}  // namespace tg::cuda_emulator
