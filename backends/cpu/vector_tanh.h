// tanh over a run of float32 values in vector registers, for the CPU SDPA kernels' softcap:
// std::tanh is a library call per score, which made a softcapped forward 3.8x slower than a
// plain one. Kept out of the kernels' headers so that Eigen is compiled once.
#pragma once
#include <cstdint>

namespace tg::cpu {

// t[i] = tanh(s[i] / cap) for 0 <= i < n, by Eigen's vectorized float tanh (a rational
// approximation within a couple of ulps of tanh; exactly +-1 beyond |x| ~ 8).
void tanh_of_scaled(const float* s, float cap, float* t, int64_t n);

}  // namespace tg::cpu
