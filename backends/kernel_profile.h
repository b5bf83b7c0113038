// Kernel time by kind, for benchmarks and for finding where a step's time goes. While
// profiling is on, backend_for() hands out a wrapper that times every kernel call (wall
// clock on the calling thread; CUDA kernels would be timed at launch, not completion).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/dtype.h"

namespace tg {

struct Backend;

struct KernelTime {
  double ms = 0;
  int64_t calls = 0;
};

// Kinds: matmul, sdpa, elementwise (unary, binary, where, fill, arange), reduce (and the
// sum of squares of gradient clipping), copy, random (rand, dropout), rows (gather,
// scatter-add), softmax (softmax, log_softmax, cross-entropy), norm (RMSNorm), rope, swiglu,
// optimizer (fused AdamW), read_back (device -> host: on a GPU each waits for the queued work),
// upload (host -> device).
void set_kernel_profiling(bool on);
bool kernel_profiling();
std::map<std::string, KernelTime> kernel_profile();
void reset_kernel_profile();

namespace detail {
Backend& profiling_backend(Device d);  // the timing wrapper around d's backend
}

}  // namespace tg
