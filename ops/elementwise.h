// Elementwise ops with NumPy broadcasting. Binary ops require both sides to share a dtype
// and device; a double on either side becomes a 0-d tensor of the other side's dtype.
#pragma once
#include "core/tensor.h"

namespace tg {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // ties send half the gradient to each side
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor sub(double a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor div(double a, const Tensor& b);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);  // log(1 + x), accurate for small x
Tensor expm1(const Tensor& x);  // exp(x) - 1, accurate for small x
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor abs(const Tensor& x);  // gradient sign(x), 0 at 0
Tensor sign(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);  // gradient 0 at 0
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x);  // tanh approximation
// Stable composites: log(exp(a) + exp(b)), log(1 + exp(x)), log(sigmoid(x)).
Tensor logaddexp(const Tensor& a, const Tensor& b);
Tensor softplus(const Tensor& x);
Tensor log_sigmoid(const Tensor& x);

// Comparisons and logic give bool tensors and no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor isfinite(const Tensor& x);

// cond ? a : b, cond bool, all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
// x with `value` where mask is true (mask broadcast to x's shape).
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

}  // namespace tg
