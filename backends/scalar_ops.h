// Scalar functors shared by the CPU and CUDA elementwise kernels: one definition per op.
#pragma once
#include <cmath>

#include "backends/backend.h"
#include "core/philox.h"  // TG_HD

namespace tg::scalar {

TG_HD inline float bits_to_float(int bits) {
#ifdef __CUDA_ARCH__
  return __int_as_float(bits);
#else
  return __builtin_bit_cast(float, bits);
#endif
}

// The core of exp_f32, for float and for GCC's float vectors alike (backends/cpu/simd.h):
// Cody-Waite reduction xc = n ln2 + r, |r| <= ln2/2, and a degree-7 Taylor polynomial for e^r
// (truncation error below 1e-8 relative). Sets n = round(xc / ln2) and returns e^r.
template <class F>
TG_HD inline F exp_reduced(F xc, F& n) {
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  n = (xc * 1.44269504f + shifter) - shifter;
  F r = xc - n * 0.693145752f;  // ln2 split in two for an exact product
  r = r - n * 1.42860677e-6f;
  F p = r * 1.9841270e-4f + 1.3888889e-3f;
  p = p * r + 8.3333333e-3f;
  p = p * r + 4.1666667e-2f;
  p = p * r + 1.6666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p;
}

// exp for float32 that the compiler can vectorize (std::exp is a library call it cannot):
// exp_reduced, then 2^n from the exponent bits. Within 2 ulp of std::exp; exact 0 below -104
// (so exp(-inf) = 0), inf above 88.7, NaN stays NaN.
TG_HD inline float exp_f32(float x) {
  const float hi = 88.72283f, lo = -103.97208f;
  float xc = x < lo ? lo : (x > hi ? hi : x);
  float n;
  const float p = exp_reduced(xc, n);
  // 2^n in two halves so that n down to -150 (subnormal results) stays representable.
  int ni = static_cast<int>(n);
  int n1 = ni / 2, n2 = ni - n1;
  float s1 = bits_to_float((n1 + 127) << 23);
  float s2 = bits_to_float((n2 + 127) << 23);
  float y = p * s1 * s2;
  y = x < lo ? 0.0f : y;
  y = x > hi ? __builtin_inff() : y;
  return x != x ? x : y;
}

template <class T>
TG_HD inline T exp_any(T x) {
  if constexpr (sizeof(T) == 4) {
    return exp_f32(x);
  } else {
    return std::exp(x);
  }
}

template <class T>
TG_HD inline T sigmoid(T x) {
  return T(1) / (T(1) + exp_any(-x));
}

// silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x).
template <class T>
TG_HD inline T silu_grad_from_sigmoid(T x, T s) {
  return s * (T(1) + x * (T(1) - s));
}

// GELU, tanh form: 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3), computed as
// x * sigmoid(2z) (the same function) so it needs only exp.
template <class T>
TG_HD inline T gelu(T x) {
  const T k = T(0.7978845608028654), c = T(0.044715);
  return x * sigmoid(T(2) * k * (x + c * x * x * x));
}
template <class T>
TG_HD inline T gelu_grad(T x) {
  const T k = T(0.7978845608028654), c = T(0.044715);
  T s = sigmoid(T(2) * k * (x + c * x * x * x));  // = 0.5 (1 + tanh z)
  return s + T(2) * x * s * (T(1) - s) * k * (T(1) + T(3) * c * x * x);
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
    case UnaryOp::SiluGrad:
      return silu_grad_from_sigmoid(x, sigmoid(x));
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
