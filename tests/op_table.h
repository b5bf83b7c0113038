// One table of the public ops, in the manner of PyTorch's OpInfo: per row the op's name, how
// to call it, its inputs' shapes and domain, a float64 reference where one exists, and whether
// it is differentiable. It drives the value tests, the float64 gradchecks (plain, strided and
// broadcast) and the bad-input checks (test_op_table.cpp), and the CUDA parity run
// (test_cuda.cpp). test_op_table.cpp fails when a public op is in neither the table nor its
// list of exemptions.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace optable {

using tg::Tensor;
using Inputs = std::vector<Tensor>;

struct OpInfo {
  std::string name;               // the public op; its errors start with "[name]"
  std::string variant;            // what this row exercises, when an op has several rows
  std::vector<tg::Shape> shapes;  // the tensor inputs of the plain case
  std::function<Tensor(const Inputs&)> call;  // the op on those inputs
  double lo = -1, hi = 1;                     // where the inputs' values are drawn
  std::function<double(const std::vector<double>&)> reference;  // one element, float64
  bool differentiable = true;
  bool elementwise = false;   // also run with broadcast inputs (and checked per element)
  bool floating_only = true;  // refuses int64 inputs with an "[name]" error
  double tol32 = 1e-5;        // float32 against the reference, and CUDA against the CPU
  // Turns the drawn float inputs into what the op takes (bool masks, values with inf), for
  // rows without a gradient; the reference sees the prepared values.
  std::function<Inputs(const Inputs&)> prepare;

  std::string error_op;  // the name its errors carry when not `name` (a shared validation)

  std::string label() const { return variant.empty() ? name : name + " (" + variant + ")"; }
};

const std::vector<OpInfo>& op_table();

// Inputs for a row: float64 (or `dtype`) values in [lo, hi) from fixed streams, leaves that
// require grad when the row is differentiable and `grad` is asked.
enum class Layout { Plain, Strided, Broadcast };
Inputs make_inputs(const OpInfo& op, Layout layout, tg::DType dtype, bool grad);
// The row's call with the broadcast layout's expansion applied (unary ops see an expanded
// view; binary ones get shapes that broadcast to each other).
std::function<Tensor(const Inputs&)> call_for(const OpInfo& op, Layout layout);

}  // namespace optable
