// The raw unary kernel with no gradient, for backward formulas (e.g. UnaryOp::GeluGrad).
// Internal to the library: not part of tapegrad.h, whose users get the differentiable ops.
#pragma once
#include "backends/backend.h"  // UnaryOp
#include "core/tensor.h"

namespace tg {

Tensor unary_op(UnaryOp op, const Tensor& x, double param = 0.0);

// d silu / dx and d gelu / dx: the fused kernel, or differentiable ops under create_graph.
Tensor silu_grad(const Tensor& x);
Tensor gelu_grad(const Tensor& x);

}  // namespace tg
