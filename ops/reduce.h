// Reductions over any set of dims (empty dims = all), keepdim as in NumPy/PyTorch.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace tg {

using Dims = std::vector<int64_t>;

Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);  // bool sums to int64
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
// Max/min values; the gradient goes to the first extremum in row-major order.
Tensor max(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor min(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);  // int64
Tensor logsumexp(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
// Variance with Bessel's correction by default (divides by n - correction).
Tensor var(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false);
// Sums x down to `shape` (x's shape broadcast from it): undoes broadcasting in backward.
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace tg
