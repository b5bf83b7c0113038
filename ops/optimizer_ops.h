// Fused optimizer updates: one pass over a parameter and its state instead of a chain of
// in-place elementwise ops. Not recorded on the tape (run them under NoGradGuard).
#pragma once
#include "backends/fused_math.h"  // AdamWStep
#include "core/tensor.h"

namespace tg {

// AdamW in place: p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps). p, g, m and v share shape, dtype and
// device; p, m and v must be contiguous.
void adamw_update_(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWStep& s);

// acc += sum(x^2), squares and sum in float64: gradient clipping's norm in one pass over x
// instead of a square, a widening copy and a sum. acc is a float64 scalar on x's device; x
// any floating tensor. Not recorded on the tape.
void add_sum_of_squares_(Tensor& acc, const Tensor& x);

}  // namespace tg
