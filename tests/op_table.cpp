#include "op_table.h"

#include <cmath>

namespace optable {

using namespace tg;

namespace {

using Ref = std::function<double(const std::vector<double>&)>;

// A fixed tensor (a mask, ids, targets) on the device of the row's first input, and in its
// floating dtype when `floating`; as it is when that input is undefined (the bad-input runs).
Tensor beside(const Tensor& fixed, const Inputs& in, bool floating = false) {
  if (in.empty() || !in[0].defined()) return fixed;
  Tensor t = fixed.to(in[0].device());
  return floating ? t.to(in[0].dtype()) : t;
}

double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
double softplus_ref(double x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

OpInfo unary(std::string name, Tensor (*f)(const Tensor&), double (*ref)(double), double lo = -1,
             double hi = 1) {
  OpInfo op;
  op.name = std::move(name);
  op.shapes = {{3, 4}};
  op.call = [f](const Inputs& in) { return f(in[0]); };
  op.lo = lo;
  op.hi = hi;
  op.reference = [ref](const std::vector<double>& x) { return ref(x[0]); };
  op.elementwise = true;
  return op;
}

OpInfo binary(std::string name, Tensor (*f)(const Tensor&, const Tensor&),
              double (*ref)(double, double), double lo = -1, double hi = 1) {
  OpInfo op;
  op.name = std::move(name);
  op.shapes = {{3, 4}, {3, 4}};
  op.call = [f](const Inputs& in) { return f(in[0], in[1]); };
  op.lo = lo;
  op.hi = hi;
  op.reference = [ref](const std::vector<double>& x) { return ref(x[0], x[1]); };
  op.elementwise = true;
  return op;
}

// A row with a custom call and no per-element reference.
OpInfo other(std::string name, std::string variant, std::vector<Shape> shapes,
             std::function<Tensor(const Inputs&)> call, bool differentiable = true) {
  OpInfo op;
  op.name = std::move(name);
  op.variant = std::move(variant);
  op.shapes = std::move(shapes);
  op.call = std::move(call);
  op.differentiable = differentiable;
  return op;
}

OpInfo comparison(std::string name, Tensor (*f)(const Tensor&, const Tensor&),
                  bool (*ref)(double, double)) {
  OpInfo op = binary(std::move(name), f, nullptr);
  op.reference = [ref](const std::vector<double>& x) { return ref(x[0], x[1]) ? 1.0 : 0.0; };
  op.differentiable = false;
  op.floating_only = false;
  return op;
}

std::vector<OpInfo> build() {
  std::vector<OpInfo> t;
  // --- elementwise, differentiable
  t.push_back(unary("neg", neg, [](double x) { return -x; }));
  t.back().floating_only = false;
  t.push_back(unary("exp", exp, [](double x) { return std::exp(x); }));
  t.push_back(unary("expm1", expm1, [](double x) { return std::expm1(x); }));
  t.push_back(unary(
      "log", log, [](double x) { return std::log(x); }, 0.5, 2));
  t.push_back(unary(
      "log1p", log1p, [](double x) { return std::log1p(x); }, -0.5, 2));
  t.push_back(unary(
      "sqrt", sqrt, [](double x) { return std::sqrt(x); }, 0.5, 2));
  t.push_back(unary(
      "rsqrt", rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.5, 2));
  t.push_back(unary("abs", abs, [](double x) { return std::abs(x); }));
  t.back().floating_only = false;
  t.push_back(unary("sign", sign, [](double x) { return double((x > 0) - (x < 0)); }));
  t.back().differentiable = false;  // zero almost everywhere: not recorded
  t.back().floating_only = false;
  t.push_back(unary("tanh", tanh, [](double x) { return std::tanh(x); }));
  t.push_back(unary("sigmoid", sigmoid, sigmoid_ref, -3, 3));
  t.push_back(unary("relu", relu, [](double x) { return x > 0 ? x : 0.0; }));
  t.push_back(unary(
      "silu", silu, [](double x) { return x * sigmoid_ref(x); }, -3, 3));
  t.push_back(unary(
      "gelu", gelu,
      [](double x) {
        return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      },
      -3, 3));
  t.push_back(unary("softplus", softplus, softplus_ref, -3, 3));
  t.push_back(unary(
      "log_sigmoid", log_sigmoid, [](double x) { return -softplus_ref(-x); }, -3, 3));
  {
    OpInfo op = unary("pow", nullptr, nullptr, 0.5, 2);
    op.call = [](const Inputs& in) { return pow(in[0], 2.5); };
    op.reference = [](const std::vector<double>& x) { return std::pow(x[0], 2.5); };
    t.push_back(op);
  }
  t.push_back(binary("add", add, [](double a, double b) { return a + b; }));
  t.back().floating_only = false;
  t.push_back(binary("sub", sub, [](double a, double b) { return a - b; }));
  t.back().floating_only = false;
  t.push_back(binary("mul", mul, [](double a, double b) { return a * b; }));
  t.back().floating_only = false;
  t.push_back(binary(
      "div", div, [](double a, double b) { return a / b; }, 0.5, 2));
  t.back().floating_only = false;
  t.push_back(binary("maximum", maximum, [](double a, double b) { return a > b ? a : b; }));
  t.back().floating_only = false;
  t.push_back(binary("minimum", minimum, [](double a, double b) { return a < b ? a : b; }));
  t.back().floating_only = false;
  t.push_back(binary(
      "logaddexp", logaddexp,
      [](double a, double b) { return std::max(a, b) + std::log1p(std::exp(-std::abs(a - b))); },
      -3, 3));
  {
    // cond fixed (broadcast over rows), a and b differentiable
    Tensor cond = from_vector(std::vector<bool>{true, false, false, true}, {4});
    OpInfo op = binary("where", nullptr, nullptr);
    op.call = [cond](const Inputs& in) { return where(beside(cond, in), in[0], in[1]); };
    op.reference = nullptr;
    op.floating_only = false;
    t.push_back(op);
    OpInfo mf = unary("masked_fill", nullptr, nullptr);
    mf.call = [cond](const Inputs& in) { return masked_fill(in[0], beside(cond, in), -2.0); };
    mf.reference = nullptr;
    mf.floating_only = false;
    t.push_back(mf);
  }
  // --- elementwise, no gradient
  t.push_back(comparison("eq", eq, [](double a, double b) { return a == b; }));
  t.push_back(comparison("ne", ne, [](double a, double b) { return a != b; }));
  t.push_back(comparison("lt", lt, [](double a, double b) { return a < b; }));
  t.push_back(comparison("le", le, [](double a, double b) { return a <= b; }));
  t.push_back(comparison("gt", gt, [](double a, double b) { return a > b; }));
  t.push_back(comparison("ge", ge, [](double a, double b) { return a >= b; }));
  {
    auto to_bool = [](const Inputs& in) {
      Inputs out;
      for (const Tensor& t : in) out.push_back(gt(t, 0.0));
      return out;
    };
    OpInfo land = comparison("logical_and", logical_and, nullptr);
    land.reference = [](const std::vector<double>& x) { return x[0] && x[1] ? 1.0 : 0.0; };
    land.prepare = to_bool;
    t.push_back(land);
    OpInfo lor = comparison("logical_or", logical_or, nullptr);
    lor.reference = [](const std::vector<double>& x) { return x[0] || x[1] ? 1.0 : 0.0; };
    lor.prepare = to_bool;
    t.push_back(lor);
    OpInfo lnot = unary("logical_not", logical_not, nullptr);
    lnot.reference = [](const std::vector<double>& x) { return x[0] ? 0.0 : 1.0; };
    lnot.prepare = to_bool;
    lnot.differentiable = false;
    lnot.floating_only = false;
    t.push_back(lnot);
    OpInfo fin = unary("isfinite", isfinite, nullptr);
    fin.prepare = [](const Inputs& in) {  // +inf, -inf and NaN among finite values
      const Tensor& x = in[0];
      return Inputs{
          where(gt(x, 0.6), INFINITY, where(lt(x, -0.6), -INFINITY, where(gt(x, 0.5), NAN, x)))};
    };
    fin.reference = [](const std::vector<double>& x) { return std::isfinite(x[0]) ? 1.0 : 0.0; };
    fin.differentiable = false;
    fin.floating_only = false;
    t.push_back(fin);
  }
  // --- reductions
  t.push_back(other("sum", "dims {0, 2}", {{2, 3, 4}}, [](const Inputs& in) {
    return sum(in[0], {0, 2});
  }));
  t.back().floating_only = false;
  t.push_back(other("sum", "all, keepdim", {{3, 4}},
                    [](const Inputs& in) { return sum(in[0], {}, true); }));
  t.back().floating_only = false;
  t.push_back(
      other("mean", "last dim", {{2, 3, 4}}, [](const Inputs& in) { return mean(in[0], {-1}); }));
  t.push_back(other("max", "dim 1", {{2, 3, 4}}, [](const Inputs& in) { return max(in[0], {1}); }));
  t.back().floating_only = false;
  t.push_back(other("min", "dims {0, 2}, keepdim", {{2, 3, 4}}, [](const Inputs& in) {
    return min(in[0], {0, 2}, true);
  }));
  t.back().floating_only = false;
  t.push_back(other(
      "argmax", "dim 1", {{3, 4}}, [](const Inputs& in) { return argmax(in[0], 1); }, false));
  t.back().floating_only = false;
  t.push_back(other("logsumexp", "dim 2", {{2, 3, 4}},
                    [](const Inputs& in) { return logsumexp(in[0], {2}); }));
  t.push_back(other("var", "dim 1", {{2, 3, 4}}, [](const Inputs& in) { return var(in[0], {1}); }));
  t.push_back(other("sum_to", "to (1, 4)", {{3, 4}}, [](const Inputs& in) {
    return sum_to(in[0], {1, 4});
  }));
  t.back().floating_only = false;
  // --- linear algebra, joins
  t.push_back(other("matmul", "2-D", {{3, 4}, {4, 2}},
                    [](const Inputs& in) { return matmul(in[0], in[1]); }));
  t.back().floating_only = false;
  t.push_back(other("matmul", "batched with broadcast", {{2, 1, 3, 4}, {3, 4, 2}},
                    [](const Inputs& in) { return matmul(in[0], in[1]); }));
  t.back().floating_only = false;
  t.push_back(other("cat", "dim 1", {{3, 2}, {3, 1}}, [](const Inputs& in) {
    return cat({in[0], in[1], in[0]}, 1);
  }));
  t.back().floating_only = false;
  t.push_back(other("stack", "last dim", {{2, 3}, {2, 3}}, [](const Inputs& in) {
    return stack({in[0], in[1]}, -1);
  }));
  t.back().floating_only = false;
  t.push_back(other("split", "middle part", {{3, 5}},
                    [](const Inputs& in) { return split(in[0], 2, 1)[1]; }));
  t.back().floating_only = false;
  t.push_back(other("chunk", "last chunk", {{4, 3}},
                    [](const Inputs& in) { return chunk(in[0], 2, 0).back(); }));
  t.back().floating_only = false;
  // --- nn
  t.push_back(
      other("softmax", "dim 0", {{3, 4}}, [](const Inputs& in) { return softmax(in[0], 0); }));
  t.push_back(other("log_softmax", "last dim", {{3, 4}},
                    [](const Inputs& in) { return log_softmax(in[0], -1); }));
  {
    Tensor targets = from_vector(std::vector<int64_t>{2, 0, 3}, {3});
    t.push_back(other("cross_entropy", "mean", {{3, 4}}, [targets](const Inputs& in) {
      return cross_entropy(in[0], beside(targets, in));
    }));
    Tensor ids = from_vector(std::vector<int64_t>{1, 3, 1, 0, 3, 3}, {2, 3});
    t.push_back(other("embedding", "repeated ids", {{4, 2}},
                      [ids](const Inputs& in) { return embedding(in[0], beside(ids, in)); }));
    t.back().floating_only = false;  // any weight dtype, as in PyTorch
  }
  t.push_back(other("dropout", "p 0.4 at a fixed seed", {{3, 5}},
                    [](const Inputs& in) { return dropout(in[0], 0.4, 123, 8); }));
  t.push_back(other("rms_norm", "with weight", {{2, 3, 4}, {4}},
                    [](const Inputs& in) { return rms_norm(in[0], in[1], 1e-5); }));
  t.push_back(other("swiglu", "", {{3, 6}}, [](const Inputs& in) { return swiglu(in[0]); }));
  t.push_back(
      other("rope", "(B, H, S, D)", {{1, 2, 3, 4}}, [](const Inputs& in) { return rope(in[0]); }));
  t.push_back(other("sdpa", "GQA, causal", {{1, 2, 3, 4}, {1, 1, 3, 4}, {1, 1, 3, 4}},
                    [](const Inputs& in) {
                      SdpaOptions o;
                      o.causal = true;
                      return sdpa(in[0], in[1], in[2], o).out;
                    }));
  t.push_back(other("sdpa_reference", "GQA, causal", {{1, 2, 3, 4}, {1, 1, 3, 4}, {1, 1, 3, 4}},
                    [](const Inputs& in) {
                      SdpaOptions o;
                      o.causal = true;
                      return sdpa_reference(in[0], in[1], in[2], o).out;
                    }));
  t.back().error_op = "sdpa";  // the reference validates its arguments as sdpa does
  return t;
}

}  // namespace

const std::vector<OpInfo>& op_table() {
  static const std::vector<OpInfo> table = build();
  return table;
}

Inputs make_inputs(const OpInfo& op, Layout layout, DType dtype, bool grad) {
  std::vector<Shape> shapes = op.shapes;
  if (layout == Layout::Broadcast) {
    shapes = shapes.size() == 1 ? std::vector<Shape>{{3, 1}} : std::vector<Shape>{{3, 1}, {4}};
  }
  Inputs in;
  uint64_t seed = 17;
  for (const Shape& s : shapes) {
    const bool leaf = grad && op.differentiable;
    Tensor t;
    if (layout == Layout::Strided && s.size() >= 2) {  // the last two dims swapped in memory
      Shape swapped = s;
      std::swap(swapped[s.size() - 1], swapped[s.size() - 2]);
      t = tgtest::rnd(swapped, seed++, op.lo, op.hi).to(dtype).requires_grad_(leaf);
      t = t.transpose(-1, -2);
    } else if (layout == Layout::Strided && s.size() == 1) {  // every other element
      t = tgtest::rnd({2 * s[0]}, seed++, op.lo, op.hi).to(dtype).requires_grad_(leaf);
      t = t.slice(0, 0, 2 * s[0], 2);
    } else {
      t = tgtest::rnd(s, seed++, op.lo, op.hi).to(dtype).requires_grad_(leaf);
    }
    in.push_back(t);
  }
  return op.prepare ? op.prepare(in) : in;
}

std::function<Tensor(const Inputs&)> call_for(const OpInfo& op, Layout layout) {
  if (layout != Layout::Broadcast || op.shapes.size() != 1) return op.call;
  auto f = op.call;
  return [f](const Inputs& in) { return f({in[0].expand({3, 4})}); };
}

}  // namespace optable
