// The public autograd entry points beyond Tensor's members.
#pragma once
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/tensor.h"

namespace tg {

// Runs backward from `outputs` (seeded with `grad_outputs`, or ones for scalars) and
// accumulates into the .grad() of reachable leaves.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false);

// Functional form: returns d(outputs)/d(inputs) without touching any .grad(). An input the
// outputs do not depend on gets zeros, or an error unless allow_unused.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = true);

}  // namespace tg
