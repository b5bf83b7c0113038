// Elementwise ops: validate -> allocate -> backend kernel -> record backward.
#include "ops/elementwise.h"

#include <cmath>
#include <optional>

#include "autograd/autograd.h"
#include "ops/factories.h"
#include "ops/fused_kernels.h"
#include "ops/op_util.h"
#include "ops/reduce.h"
#include "ops/unary_op.h"

namespace tg {
using detail::view_as;
using detail::view_of;

namespace {

// The scalar operand `arg` of op as a 0-d tensor of t's dtype and device (a C++ scalar does
// not promote a tensor), or an "[op]" error when t's dtype cannot hold it (0.5 or NaN for an
// int64 tensor would silently become 0 or undefined behaviour). Undefined for an undefined t,
// so that the op it feeds reports the undefined argument by name.
Tensor scalar_like(const Tensor& t, double v, const char* op, const char* arg) {
  if (!t.defined()) return Tensor();
  detail::check_scalar(v, t.dtype(), op, arg);
  return scalar_tensor(v, t.options());
}

// out = op(a, b) with broadcasting; no autograd.
Tensor binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  detail::check_defined(a, name, "self");
  detail::check_defined(b, name, "other");
  detail::check_same_device(a, b, name, "other");
  detail::check_same_dtype(a, b, name, "other");
  TG_CHECK(scalar::accepts(op, a.dtype()), name, "argument 'self' has dtype ", a.dtype(),
           ", which this op does not take");
  Shape shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  DType out_dtype = scalar::gives_bool(op) ? kBool : a.dtype();
  Tensor out = Tensor::empty_like_shape(shape, out_dtype, a.device());
  if (out.numel())
    detail::backend_of(a).binary(op, view_as(a, shape), view_as(b, shape), view_of(out));
  return out;
}

Tensor unary_kernel(UnaryOp op, const Tensor& x, double param, DType out_dtype) {
  Tensor out = Tensor::empty_like_shape(x.sizes(), out_dtype, x.device());
  if (out.numel()) detail::backend_of(x).unary(op, view_of(x), view_of(out), param);
  return out;
}

// What a unary op's derivative is written in: its input x or its output y = f(x).
enum class Saves { Input, Output };

// A differentiable float unary op whose backward is grad * dfdx(s), s the saved x or y. Outside
// create_graph that is one pass of `fused`, the same product as one expression of the list
// (elementwise_ops.def: grad * (1 - y)(1 + y) for tanh); under create_graph, with the fused
// kernels off, or for a gradient of another dtype, the composite mul(grad, dfdx(s)) (its ops
// record for the next derivative under create_graph). Forward and backward over 4M float32 on two
// Intel AVX-512 cores: tanh 5.2-5.4 ms with the composite's three passes, 2.2 in one; sigmoid
// 5.1-5.4 -> 2.0, relu 4.1-4.3 -> 1.8-1.9, log 4.7-4.8 -> 2.1.
template <class Deriv>
Tensor unary_diff(UnaryOp op, const char* name, const Tensor& x, double param, Saves saves,
                  Deriv dfdx, std::optional<BinaryOp> fused = std::nullopt) {
  detail::check_defined(x, name, "self");
  detail::check_floating(x, name, "self");
  Tensor out = unary_kernel(op, x, param, x.dtype());
  if (any_requires_grad({x})) {
    const SavedTensor s =
        saves == Saves::Input ? SavedTensor(x) : SavedTensor(out, SavedTensor::Role::Output);
    record(name, {x}, {&out},
           [s, dfdx, fused, name](const std::vector<Tensor>& g) -> std::vector<Tensor> {
             const Tensor v = s.unpack(name);
             if (fused && fused_kernels() && !grad_enabled() && g[0].dtype() == v.dtype())
               return {binary_kernel(*fused, g[0], v, name)};
             return {mul(g[0], dfdx(v))};
           });
  }
  return out;
}

}  // namespace

Tensor unary_op(UnaryOp op, const Tensor& x, double param) {
  detail::check_defined(x, "unary_op", "self");
  TG_CHECK(scalar::accepts(op, x.dtype()), "unary_op", "argument 'self' has dtype ", x.dtype(),
           ", which this op does not take");
  return unary_kernel(op, x, param, scalar::gives_bool(op) ? kBool : x.dtype());
}

// --- arithmetic

Tensor add(const Tensor& self, const Tensor& other) {
  auto [a, b] = detail::promoted(self, other, "add");
  Tensor out = binary_kernel(BinaryOp::Add, a, b, "add");
  record("add", {a, b}, {&out}, [sa = a.sizes(), sb = b.sizes()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], sa), sum_to(g[0], sb)};
  });
  return out;
}

Tensor sub(const Tensor& self, const Tensor& other) {
  auto [a, b] = detail::promoted(self, other, "sub");
  Tensor out = binary_kernel(BinaryOp::Sub, a, b, "sub");
  record("sub", {a, b}, {&out}, [sa = a.sizes(), sb = b.sizes()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], sa), neg(sum_to(g[0], sb))};
  });
  return out;
}

Tensor mul(const Tensor& self, const Tensor& other) {
  auto [a, b] = detail::promoted(self, other, "mul");
  Tensor out = binary_kernel(BinaryOp::Mul, a, b, "mul");
  if (any_requires_grad({a, b})) {
    SavedTensor sa(b.requires_grad() ? a : Tensor()), sb(a.requires_grad() ? b : Tensor());
    record("mul", {a, b}, {&out},
           [sa, sb, ra = a.requires_grad(), rb = b.requires_grad(), sza = a.sizes(),
            szb = b.sizes()](const std::vector<Tensor>& g) {
             std::vector<Tensor> r(2);
             if (ra) r[0] = sum_to(mul(g[0], sb.unpack("mul")), sza);
             if (rb) r[1] = sum_to(mul(g[0], sa.unpack("mul")), szb);
             return r;
           });
  }
  return out;
}

Tensor div(const Tensor& self, const Tensor& other) {
  auto [a, b] = detail::promoted(self, other, "div");
  if (b.defined() && b.dtype() == kInt64 && b.numel()) {  // a float divisor of 0 gives inf or NaN
    TG_CHECK(sum(eq(b, 0.0)).item<int64_t>() == 0, "div",
             "integer division by zero: argument 'other' (int64) holds 0");
  }
  Tensor out = binary_kernel(BinaryOp::Div, a, b, "div");
  if (any_requires_grad({a, b})) {
    SavedTensor sb(b), sy(b.requires_grad() ? out : Tensor(), SavedTensor::Role::Output);
    record("div", {a, b}, {&out},
           [sb, sy, ra = a.requires_grad(), rb = b.requires_grad(), sza = a.sizes(),
            szb = b.sizes()](const std::vector<Tensor>& g) {
             std::vector<Tensor> r(2);
             Tensor bv = sb.unpack("div");
             Tensor ga = div(g[0], bv);
             if (ra) r[0] = sum_to(ga, sza);
             if (rb) r[1] = sum_to(neg(mul(ga, sy.unpack("div"))), szb);  // -g a / b^2
             return r;
           });
  }
  return out;
}

namespace {
// maximum/minimum: the winner gets the gradient; ties split it evenly.
Tensor extremum(BinaryOp op, BinaryOp wins, const char* name, const Tensor& self,
                const Tensor& other) {
  auto [a, b] = detail::promoted(self, other, name);
  Tensor out = binary_kernel(op, a, b, name);
  if (any_requires_grad({a, b})) {
    SavedTensor sa(a), sb(b);
    record(name, {a, b}, {&out},
           [sa, sb, wins, name, sza = a.sizes(), szb = b.sizes()](const std::vector<Tensor>& g) {
             Tensor av = sa.unpack(name), bv = sb.unpack(name);
             Tensor tie = eq(av, bv);
             Tensor half = mul(g[0], 0.5);
             Tensor a_wins = binary_kernel(wins, av, bv, name);
             Tensor ga = where(a_wins, g[0], where(tie, half, 0.0));
             Tensor gb = where(logical_or(a_wins, tie), where(tie, half, 0.0), g[0]);
             return std::vector<Tensor>{sum_to(ga, sza), sum_to(gb, szb)};
           });
  }
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return extremum(BinaryOp::Maximum, BinaryOp::Gt, "maximum", a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return extremum(BinaryOp::Minimum, BinaryOp::Lt, "minimum", a, b);
}

Tensor add(const Tensor& a, double b) { return add(a, scalar_like(a, b, "add", "other")); }
Tensor sub(const Tensor& a, double b) { return sub(a, scalar_like(a, b, "sub", "other")); }
Tensor sub(double a, const Tensor& b) { return sub(scalar_like(b, a, "sub", "self"), b); }
Tensor mul(const Tensor& a, double b) { return mul(a, scalar_like(a, b, "mul", "other")); }
Tensor div(const Tensor& a, double b) { return div(a, scalar_like(a, b, "div", "other")); }
Tensor div(double a, const Tensor& b) { return div(scalar_like(b, a, "div", "self"), b); }

Tensor neg(const Tensor& x) {
  detail::check_defined(x, "neg", "self");
  TG_CHECK(x.dtype() != kBool, "neg", "argument 'self' must be numeric, got bool");
  Tensor out = unary_kernel(UnaryOp::Neg, x, 0, x.dtype());
  record("neg", {x}, {&out},
         [](const std::vector<Tensor>& g) { return std::vector<Tensor>{neg(g[0])}; });
  return out;
}

// --- differentiable unary ops: derivative in terms of x and y = f(x)

Tensor exp(const Tensor& x) {
  return unary_diff(UnaryOp::Exp, "exp", x, 0, Saves::Output, [](const Tensor& y) { return y; });
}
Tensor log(const Tensor& x) {
  return unary_diff(
      UnaryOp::Log, "log", x, 0, Saves::Input, [](const Tensor& xv) { return div(1.0, xv); },
      BinaryOp::LogBackward);
}
Tensor log1p(const Tensor& x) {
  return unary_diff(
      UnaryOp::Log1p, "log1p", x, 0, Saves::Input,
      [](const Tensor& xv) { return div(1.0, add(xv, 1.0)); }, BinaryOp::Log1pBackward);
}
Tensor expm1(const Tensor& x) {
  return unary_diff(
      UnaryOp::Expm1, "expm1", x, 0, Saves::Output, [](const Tensor& y) { return add(y, 1.0); },
      BinaryOp::Expm1Backward);
}
Tensor sqrt(const Tensor& x) {
  return unary_diff(
      UnaryOp::Sqrt, "sqrt", x, 0, Saves::Output, [](const Tensor& y) { return div(0.5, y); },
      BinaryOp::SqrtBackward);
}
Tensor rsqrt(const Tensor& x) {
  return unary_diff(
      UnaryOp::Rsqrt, "rsqrt", x, 0, Saves::Output,
      [](const Tensor& y) { return mul(pow(y, 3.0), -0.5); }, BinaryOp::RsqrtBackward);
}
Tensor pow(const Tensor& x, double e) {
  return unary_diff(UnaryOp::Pow, "pow", x, e, Saves::Input,
                    [e](const Tensor& xv) { return mul(pow(xv, e - 1.0), e); });
}
Tensor abs(const Tensor& x) {
  detail::check_defined(x, "abs", "self");
  if (x.dtype() == kInt64) return unary_op(UnaryOp::Abs, x);
  return unary_diff(
      UnaryOp::Abs, "abs", x, 0, Saves::Input,
      [](const Tensor& xv) { return unary_op(UnaryOp::Sign, xv); }, BinaryOp::AbsBackward);
}
Tensor sign(const Tensor& x) {
  detail::check_defined(x, "sign", "self");
  TG_CHECK(x.dtype() != kBool, "sign", "argument 'self' must be numeric, got bool");
  return unary_op(UnaryOp::Sign, x);  // gradient zero almost everywhere: not recorded
}
Tensor tanh(const Tensor& x) {
  return unary_diff(
      UnaryOp::Tanh, "tanh", x, 0, Saves::Output,
      [](const Tensor& y) { return mul(sub(1.0, y), add(y, 1.0)); }, BinaryOp::TanhBackward);
}
Tensor sigmoid(const Tensor& x) {
  return unary_diff(
      UnaryOp::Sigmoid, "sigmoid", x, 0, Saves::Output,
      [](const Tensor& y) { return mul(y, sub(1.0, y)); }, BinaryOp::SigmoidBackward);
}
Tensor relu(const Tensor& x) {
  return unary_diff(
      UnaryOp::Relu, "relu", x, 0, Saves::Input,
      [](const Tensor& xv) {
        return binary_kernel(BinaryOp::Gt, xv, scalar_like(xv, 0, "relu", "self"), "relu")
            .to(xv.dtype());
      },
      BinaryOp::ReluBackward);
}
Tensor silu(const Tensor& x) {
  return unary_diff(
      UnaryOp::Silu, "silu", x, 0, Saves::Input, [](const Tensor& xv) { return silu_grad(xv); },
      BinaryOp::SiluBackward);
}
Tensor gelu(const Tensor& x) {
  return unary_diff(
      UnaryOp::Gelu, "gelu", x, 0, Saves::Input, [](const Tensor& xv) { return gelu_grad(xv); },
      BinaryOp::GeluBackward);
}

// The derivatives: one fused kernel, or under create_graph the same formula (scalar_ops.h)
// in differentiable ops, for the second derivative.
Tensor silu_grad(const Tensor& x) {
  if (!grad_enabled()) return unary_op(UnaryOp::SiluGrad, x);
  Tensor s = sigmoid(x);
  return mul(s, add(mul(x, sub(1.0, s)), 1.0));  // s (1 + x (1 - s))
}
Tensor gelu_grad(const Tensor& x) {
  if (!grad_enabled()) return unary_op(UnaryOp::GeluGrad, x);
  const double k = 0.7978845608028654, c = 0.044715;
  Tensor x2 = mul(x, x);
  Tensor s = sigmoid(mul(mul(x, add(mul(x2, c), 1.0)), 2 * k));  // sigmoid(2z)
  // s + 2 x s (1 - s) k (1 + 3 c x^2)
  return add(s, mul(mul(mul(x, s), sub(1.0, s)), mul(add(mul(x2, 3 * c), 1.0), 2 * k)));
}

// --- stable composites (as MLX writes them)

// max(a, b) + log1p(exp(-|a - b|)); equal arguments (infinite ones included) add log 2: one
// kernel (scalar::logaddexp_of). The gradient is sigmoid(a - b) to a and sigmoid(b - a) to b,
// and 1/2 to each side at a tie (infinite ones too), as the composite's was by maximum's rule.
Tensor logaddexp(const Tensor& self, const Tensor& other) {
  auto [a, b] = detail::promoted(self, other, "logaddexp");
  detail::check_floating(a, "logaddexp", "self");
  broadcast_shapes(a.sizes(), b.sizes(), "logaddexp");  // its error names this op
  return detail::in_compute_dtype(a, [&, b = b](const Tensor& x) {
    Tensor y = b.to(x.dtype());
    Tensor out = binary_kernel(BinaryOp::LogAddExp, x, y, "logaddexp");
    if (any_requires_grad({x, y})) {
      SavedTensor sx(x), sy(y);
      // Only the sides that take a gradient: each costs five passes and a sum_to.
      record("logaddexp", {x, y}, {&out},
             [sx, sy, rx = x.requires_grad(), ry = y.requires_grad(), sa = x.sizes(),
              sb = y.sizes()](const std::vector<Tensor>& g) {
               const Tensor u = sx.unpack("logaddexp"), v = sy.unpack("logaddexp");
               const Tensor tie = eq(u, v);
               std::vector<Tensor> r(2);
               if (rx) r[0] = sum_to(mul(g[0], where(tie, 0.5, sigmoid(sub(u, v)))), sa);
               if (ry) r[1] = sum_to(mul(g[0], where(tie, 0.5, sigmoid(sub(v, u)))), sb);
               return r;
             });
    }
    return out;
  });
}
// softplus and log_sigmoid: logaddexp(x, 0) and -logaddexp(-x, 0) with the same bits, as ops of
// their own, so that the backward is one pass of grad * sigmoid(+-x) (sigmoid(0) = 1/2 is
// logaddexp's gradient at the tie). As logaddexp(x, 0) with both sides' gradients, softplus's
// forward and backward over 4M float32 on two Intel AVX-512 cores took 18.4-21.8 ms (now
// 3.7-4.2); log_sigmoid, three ops, 21.7-25.4 (now 3.7-4.1).
Tensor softplus(const Tensor& x) {
  return unary_diff(
      UnaryOp::Softplus, "softplus", x, 0, Saves::Input,
      [](const Tensor& xv) { return sigmoid(xv); }, BinaryOp::SoftplusBackward);
}
Tensor log_sigmoid(const Tensor& x) {
  return unary_diff(
      UnaryOp::LogSigmoid, "log_sigmoid", x, 0, Saves::Input,
      [](const Tensor& xv) { return sigmoid(neg(xv)); }, BinaryOp::LogSigmoidBackward);
}

// --- comparisons and logic (no gradient)

namespace {
Tensor comparison(BinaryOp op, const Tensor& self, const Tensor& other, const char* name) {
  auto [a, b] = detail::promoted(self, other, name);
  return binary_kernel(op, a, b, name);
}

// self `op` b (Eq, Ne, Lt or Gt) with b compared as the number it is, not as the element of
// self's dtype nearest to it: lt(int64 [0], 0.5) is true, eq(float16 x, 70000) is false (70000
// rounds to inf in float16).
Tensor compare_scalar(BinaryOp op, const Tensor& self, double b, const char* name) {
  detail::check_defined(self, name, "self");
  const DType t = self.dtype();
  const auto all = [&](bool v) {
    return full(self.sizes(), v, TensorOptions(kBool).device(self.device()));
  };
  if (std::isnan(b)) {
    if (!is_floating(t)) return all(op == BinaryOp::Ne);
  } else if (!scalar_fits(b, t) || scalar_as(b, t) != b) {
    if (is_floating(t)) {  // every float is a double: compare there, exactly
      return comparison(op, self.to(kFloat64),
                        scalar_tensor(b, TensorOptions(kFloat64).device(self.device())), name);
    }
    // An int64 or bool x against a b that is none of its values: x == b never holds, and
    // x < b (x > b) is x < ceil(b) (x > floor(b)), or always or never when b is out of range.
    if (op == BinaryOp::Eq || op == BinaryOp::Ne) return all(op == BinaryOp::Ne);
    if (b >= 0x1p63 || b < -0x1p63) return all((op == BinaryOp::Lt) == (b > 0));
    const Tensor x = self.to(kInt64);
    return comparison(
        op, x, scalar_tensor(op == BinaryOp::Lt ? std::ceil(b) : std::floor(b), x.options()), name);
  }
  return comparison(op, self, scalar_tensor(b, self.options()), name);
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::Eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::Ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::Lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::Le, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::Gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::Ge, a, b, "ge"); }
Tensor eq(const Tensor& a, double b) { return compare_scalar(BinaryOp::Eq, a, b, "eq"); }
Tensor ne(const Tensor& a, double b) { return compare_scalar(BinaryOp::Ne, a, b, "ne"); }
Tensor lt(const Tensor& a, double b) { return compare_scalar(BinaryOp::Lt, a, b, "lt"); }
Tensor gt(const Tensor& a, double b) { return compare_scalar(BinaryOp::Gt, a, b, "gt"); }

Tensor logical_not(const Tensor& x) {
  detail::check_defined(x, "logical_not", "self");
  detail::check_dtype(x, kBool, "logical_not", "self");
  return unary_kernel(UnaryOp::LogicalNot, x, 0, kBool);
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  detail::check_defined(a, "logical_and", "self");
  detail::check_dtype(a, kBool, "logical_and", "self");
  return binary_kernel(BinaryOp::LogicalAnd, a, b, "logical_and");
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  detail::check_defined(a, "logical_or", "self");
  detail::check_dtype(a, kBool, "logical_or", "self");
  return binary_kernel(BinaryOp::LogicalOr, a, b, "logical_or");
}
Tensor isfinite(const Tensor& x) {
  detail::check_defined(x, "isfinite", "self");
  if (!is_floating(x.dtype())) return full(x.sizes(), 1.0, x.options().dtype(kBool));
  return unary_kernel(UnaryOp::IsFinite, x, 0, kBool);
}

// --- selection

Tensor where(const Tensor& cond, const Tensor& input, const Tensor& other) {
  detail::check_defined(cond, "where", "condition");
  detail::check_dtype(cond, kBool, "where", "condition");
  detail::check_defined(input, "where", "input");
  detail::check_defined(other, "where", "other");
  detail::check_same_device(input, cond, "where", "condition");
  auto [a, b] = detail::promoted(input, other, "where");
  Shape shape =
      broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  Tensor out = Tensor::empty_like_shape(shape, a.dtype(), a.device());
  if (out.numel())
    detail::backend_of(a).where(view_as(cond, shape), view_as(a, shape), view_as(b, shape),
                                view_of(out));
  if (any_requires_grad({a, b})) {
    SavedTensor sc(cond);
    record("where", {a, b}, {&out},
           [sc, sza = a.sizes(), szb = b.sizes()](const std::vector<Tensor>& g) {
             Tensor c = sc.unpack("where");
             return std::vector<Tensor>{sum_to(where(c, g[0], 0.0), sza),
                                        sum_to(where(c, 0.0, g[0]), szb)};
           });
  }
  return out;
}
Tensor where(const Tensor& cond, const Tensor& a, double b) {
  return where(cond, a, scalar_like(a, b, "where", "other"));
}
Tensor where(const Tensor& cond, double a, const Tensor& b) {
  return where(cond, scalar_like(b, a, "where", "self"), b);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  detail::check_defined(x, "masked_fill", "self");
  detail::check_defined(mask, "masked_fill", "mask");
  detail::check_dtype(mask, kBool, "masked_fill", "mask");
  detail::check_same_device(x, mask, "masked_fill", "mask");
  Shape shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill");
  TG_CHECK(shape == x.sizes(), "masked_fill", "mask of shape ", shape_str(mask.sizes()),
           " must broadcast to self's shape ", shape_str(x.sizes()));
  return where(mask, scalar_like(x, value, "masked_fill", "value"), x);
}

// --- operators

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return sub(a, b); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return div(a, b); }

}  // namespace tg
