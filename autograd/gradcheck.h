// tg::gradcheck: analytic gradients against central differences, in float64.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tg {

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step
  double atol = 1e-5;  // pass when |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
  int64_t max_jacobian_outputs = 256;  // beyond this, one random projection of the output
  uint64_t seed = 0;
};

struct GradcheckInputReport {
  bool checked = false;  // false for inputs that do not require grad
  bool ok = true;
  int64_t worst_index = -1;   // row-major index of the worst element of the input
  int64_t worst_output = -1;  // output element (or -1 for the projected check)
  double analytic = 0, numeric = 0, error = 0;
};

struct GradcheckResult {
  bool ok = true;
  std::vector<GradcheckInputReport> inputs;
  std::string message;  // one line per checked input; names the worst element
};

// Checks d f(inputs) / d inputs[i] for every input that requires grad. Inputs must be
// float64; they may be non-contiguous views (not expanded ones). f must be deterministic.
// When f's output has at most max_jacobian_outputs elements the whole Jacobian is compared;
// otherwise the vector-Jacobian product with one random cotangent. Inputs that are leaves
// requiring grad are passed to f as they are (and perturbed in place), so f may use other
// handles to them, e.g. a module's parameters.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

// Second derivatives, as PyTorch's gradgradcheck: gradcheck of the first-order gradient
// (inputs, v) -> d<v, f(inputs)>/d inputs, made with create_graph, against its central
// differences; v is a random float64 cotangent of f's output shape (from opts.seed), checked
// as one more input, reported last. Same tolerances and rules as gradcheck.
GradcheckResult gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                              const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

}  // namespace tg
