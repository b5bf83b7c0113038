// The Philox stream (core/philox.h, DESIGN.md §5) in bulk for the CPU kernels: each block of four
// words computed once, and several blocks at a time in vector lanes, where philox_uniform
// computes a whole block for every position it is asked for.
#pragma once
#include <cstdint>

namespace tg::cpu {

// out[i] = philox_uniform(seed, pos + i) for 0 <= i < n, bit for bit.
void philox_uniforms(uint64_t seed, uint64_t pos, int64_t n, float* out);

}  // namespace tg::cpu
