#pragma once
#include "core/tensor.h"

namespace tg {

// NumPy matmul: 1-D operands are promoted (and the added dim removed), batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace tg
