// The public autograd entry points beyond Tensor's members.
#pragma once
#include <optional>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/hooks.h"
#include "autograd/node.h"
#include "core/tensor.h"

namespace tg {

// Runs backward from `outputs` (seeded with `grad_outputs`, or ones for scalars) and
// accumulates into the .grad() of reachable leaves.
// create_graph (libtorch's meaning): the backward pass is itself recorded, so the gradients
// it makes are differentiable (Hessian-vector products, gradient penalties); retain_graph
// then defaults to true. A leaf's .grad made so refers to its graph, which refers to the
// leaf: call zero_grad() when done with it (or use tg::grad, which touches no .grad()).
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false);

// Functional form: returns d(outputs)/d(inputs) without touching any .grad(). An input the
// outputs do not depend on gets zeros, or an error unless allow_unused. create_graph as above.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {},
                         std::optional<bool> retain_graph = std::nullopt, bool allow_unused = true,
                         bool create_graph = false);

}  // namespace tg
