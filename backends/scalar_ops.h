// Scalar functors shared by the CPU and CUDA elementwise kernels: one definition per op.
#pragma once
#include <cmath>

#include "backends/backend.h"
#include "core/philox.h"  // TG_HD

namespace tg::scalar {

template <class T>
TG_HD inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
TG_HD inline T gelu(T x) {
  const T k = T(0.7978845608028654), c = T(0.044715);
  return T(0.5) * x * (T(1) + std::tanh(k * (x + c * x * x * x)));
}
template <class T>
TG_HD inline T gelu_grad(T x) {
  const T k = T(0.7978845608028654), c = T(0.044715);
  T th = std::tanh(k * (x + c * x * x * x));
  return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * k * (T(1) + T(3) * c * x * x);
}

template <class T>
TG_HD inline T unary(UnaryOp op, T x, T p) {
  switch (op) {
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Exp:
      return std::exp(x);
    case UnaryOp::Log:
      return std::log(x);
    case UnaryOp::Sqrt:
      return std::sqrt(x);
    case UnaryOp::Rsqrt:
      return T(1) / std::sqrt(x);
    case UnaryOp::Abs:
      return std::abs(x);
    case UnaryOp::Sign:
      return T((x > T(0)) - (x < T(0)));
    case UnaryOp::Tanh:
      return std::tanh(x);
    case UnaryOp::Sigmoid:
      return sigmoid(x);
    case UnaryOp::Relu:
      return x > T(0) ? x : T(0);
    case UnaryOp::Silu:
      return x * sigmoid(x);
    case UnaryOp::Gelu:
      return gelu(x);
    case UnaryOp::SiluGrad: {
      T s = sigmoid(x);
      return s * (T(1) + x * (T(1) - s));
    }
    case UnaryOp::GeluGrad:
      return gelu_grad(x);
    case UnaryOp::Pow:
      return std::pow(x, p);
    default:
      return x;  // IsFinite / LogicalNot are handled by their own loops
  }
}

template <class T>
TG_HD inline T arith(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      return a / b;
    case BinaryOp::Maximum:
      return (a != a || a > b) ? a : b;  // NaN propagates
    case BinaryOp::Minimum:
      return (a != a || a < b) ? a : b;
    default:
      return a;
  }
}

template <class T>
TG_HD inline bool compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Eq:
      return a == b;
    case BinaryOp::Ne:
      return a != b;
    case BinaryOp::Lt:
      return a < b;
    case BinaryOp::Le:
      return a <= b;
    case BinaryOp::Gt:
      return a > b;
    case BinaryOp::Ge:
      return a >= b;
    case BinaryOp::LogicalAnd:
      return a && b;
    case BinaryOp::LogicalOr:
      return a || b;
    default:
      return false;
  }
}

constexpr bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

}  // namespace tg::scalar
