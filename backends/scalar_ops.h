// Scalar functors shared by the CPU and CUDA elementwise kernels: one definition per op.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/backend.h"
#include "backends/dispatch.h"
#include "core/error.h"
#include "core/half.h"
#include "core/host_device.h"

namespace tg::scalar {

TG_HD inline float bits_to_float(int bits) {
  return half_bits::bits_float(static_cast<uint32_t>(bits));
}

// The constants of exp's Cody-Waite reduction x = n ln2 + r (exp_reduction below): adding
// 1.5 * 2^23 rounds a float to the nearest integer; ln2 in two parts, the first with few enough
// bits that n * kExpLn2Hi is exact.
inline constexpr float kExpShifter = 12582912.0f;
inline constexpr float kExpLog2e = 1.44269504f;
inline constexpr float kExpLn2Hi = 0.693145752f;
inline constexpr float kExpLn2Lo = 1.42860677e-6f;

// The Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, for float and for GCC's float vectors
// alike: returns r and sets n = round(x / ln2) and nb = x log2e + 1.5 * 2^23, whose low bits are
// n itself (simd::exp_nonpositive shifts them into 2^n's exponent field).
template <class F>
TG_HD inline F exp_reduction(F x, F& nb, F& n) {
  nb = x * kExpLog2e + kExpShifter;
  n = nb - kExpShifter;
  const F r = x - n * kExpLn2Hi;
  return r - n * kExpLn2Lo;
}

// The core of exp_f32, for float and for GCC's float vectors alike (backends/cpu/simd.h):
// exp_reduction, and a degree-7 Taylor polynomial for e^r (exp_taylor; truncation error below
// 1e-8 relative). Sets n = round(xc / ln2) and returns e^r.
template <class F>
TG_HD inline F exp_taylor(F r) {
  F p = r * 1.9841270e-4f + 1.3888889e-3f;
  p = p * r + 8.3333333e-3f;
  p = p * r + 4.1666667e-2f;
  p = p * r + 1.6666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  return p * r + 1.0f;
}
template <class F>
TG_HD inline F exp_reduced(F xc, F& n) {
  F nb;
  return exp_taylor(exp_reduction(xc, nb, n));
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

// log's core, for float and GCC's float vectors alike: e ln2 + log1p(f) for f = m - 1, m in
// [sqrt(1/2), sqrt(2)), as f + f^2 (f P(f) - 1/2), P of degree 7 fitted to log1p's relative error
// (5.8e-9 over the interval) by Lawson's algorithm on Chebyshev nodes; ln2 in two parts, the
// first with few enough bits (0.693359375 = 355/512) that e ln2hi is exact, added last. Every
// sum takes at most one product, so a compiler that fuses products into FMAs fuses them alike in
// scalar and vector code (a sum of two products can be fused either way: the bits then differ).
inline constexpr float kLogLn2Hi = 0.693359375f;
inline constexpr float kLogLn2Lo = -2.12194440e-4f;
// q = f P(f) - 1/2, so that log1p(f) = f + f^2 q.
template <class F>
TG_HD inline F log1p_poly(F f) {
  F p = f * -7.634429634e-02f + 1.276154965e-01f;
  p = p * f - 1.316019446e-01f;
  p = p * f + 1.420176178e-01f;
  p = p * f - 1.662335694e-01f;
  p = p * f + 2.000122666e-01f;
  p = p * f - 2.500082254e-01f;
  p = p * f + 3.333333135e-01f;
  return p * f - 0.5f;
}
template <class F>
TG_HD inline F log_reduced(F f, F e) {
  const F q = log1p_poly(f);
  const F v = f + e * kLogLn2Lo;
  return (v + (f * f) * q) + e * kLogLn2Hi;
}

// log for float32 that the compiler can vectorize (std::log is a library call it cannot: 4.7
// ms over 4M floats on two Intel AVX-512 cores): x = 2^e m, subnormal x scaled by 2^23 first,
// then log_reduced. log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN stays NaN.
// simd::log takes the same steps on vectors, with the same bits (tests/test_float32_math.cpp).
inline constexpr float kLogSqrt2 = 1.41421354f;  // m above it is halved, e raised by one
// y = 2^e m, m in [sqrt(1/2), sqrt(2)), from y's bits and the exponent of its [1, 2) mantissa:
// returns f = m - 1 and sets ef = e (log_f32 and log1p_f32; simd.h's log_split on vectors).
TG_HD inline float log_split(uint32_t bits, int e, float& ef) {
  float m = half_bits::bits_float((bits & 0x7fffffu) | 0x3f800000u);
  if (m > kLogSqrt2) {
    m *= 0.5f;
    e += 1;
  }
  ef = static_cast<float>(e);
  return m - 1.0f;
}
// r, or log(y) where y is a special value: y for inf, -inf for 0, the default quiet NaN below 0.
TG_HD inline float log_specials(float y, float r) {
  r = y == __builtin_inff() ? y : r;
  r = y == 0.0f ? -__builtin_inff() : r;
  return y < 0.0f ? half_bits::bits_float(0x7fc00000u) : r;
}
TG_HD inline float log_f32(float x) {
  const bool subnormal = x < 1.17549435e-38f;
  const uint32_t bits = half_bits::float_bits(subnormal ? x * 8388608.0f : x);
  float e;
  const float f =
      log_split(bits, static_cast<int>((bits >> 23) & 0xffu) - (subnormal ? 150 : 127), e);
  const float r = log_specials(x, log_reduced(f, e));
  return x != x ? x : r;
}

// log1p's core, for float and GCC's float vectors alike: log(2^e (1 + f) + tail 2^e (1 + f))
// to first order in tail, that is e ln2 + log1p(f) + tail, with log_reduced's polynomial. The
// small terms are summed first and f added to them, then e ln2hi: tail carries bits below f's
// last (the rounding error of 1 + x), which a sum rounded at f's size first would lose (1.29 ulp
// at worst that way, 0.83 this way, over every 97th float).
template <class F>
TG_HD inline F log1p_reduced(F f, F e, F tail) {
  const F q = log1p_poly(f);
  const F small = (f * f) * q + (e * kLogLn2Lo + tail);
  return (f + small) + e * kLogLn2Hi;
}

// log(1 + x) for float32 that the compiler can vectorize (std::log1p is a library call: 15.5 ms
// over 4M floats on two Intel AVX-512 cores, 20x exp's time), accurate for small x. On [sqrt(1/2)
// - 1, sqrt(2) - 1) it is log1p_reduced(x, 0, 0): x is f itself. Elsewhere u = 1 + x rounded, c
// its rounding error (exactly, by Fast2Sum), u = 2^e (1 + f) as in log_f32 (u is never subnormal:
// the smallest is 2^-24), and log1p(x) = log(u + c) = log_reduced's sum plus c / u. Within 0.88
// ulp of log1p over a fifth of all floats (0.97 without FMA); log1p(-1) = -inf, NaN below -1, -0
// stays -0, inf stays inf. simd::log1p takes the same steps on vectors, with the same bits.
inline constexpr float kLog1pLo = -0.292893231f;  // sqrt(1/2) - 1, rounded up
inline constexpr float kLog1pHi = 0.414213538f;   // sqrt(2) - 1, rounded down
TG_HD inline float log1p_f32(float x) {
  const float u = 1.0f + x;
  const float a = x > 1.0f ? x : 1.0f, b = x > 1.0f ? 1.0f : x;
  const float c = b - (u - a);
  const uint32_t bits = half_bits::float_bits(u);
  float e;
  const float f = log_split(bits, static_cast<int>((bits >> 23) & 0xffu) - 127, e);
  const bool direct = x >= kLog1pLo && x < kLog1pHi;
  float r = log_specials(u, direct ? log1p_reduced(x, 0.0f, 0.0f) : log1p_reduced(f, e, c / u));
  r = x == 0.0f ? x : r;  // -0
  return x != x ? x : r;
}

// expm1's reduction, for float and GCC's float vectors alike: x = n ln2 + rh + rl as in
// exp_reduction, with rh = x - n ln2hi (exact) and rl = -n ln2lo kept apart.
template <class F>
TG_HD inline void expm1_reduction(F x, F& nb, F& n, F& rh, F& rl) {
  nb = x * kExpLog2e + kExpShifter;
  n = nb - kExpShifter;
  rh = x - n * kExpLn2Hi;
  rl = n * -kExpLn2Lo;
}

// expm1's core: z with expm1(x) = 2^n z, from the reduction and two_mn = 2^-n (n at most 100
// for it). e^r - 1 = r + r^2 Q(r), Q of degree 5 fitted to expm1's relative error on [-ln2/2,
// ln2/2] (2.2e-9 with these float coefficients) by Lawson's algorithm on Chebyshev nodes; then z
// = (1 - 2^-n) + rh + (rl + r^2 Q): 1 - 2^-n is exact up to n = 24 and what it loses beyond
// is added back (clo), and the sum with rh is taken exactly (Fast2Sum), so that z is rounded
// once where 2^n e^r and 1 cancel (x near +-ln2/2).
template <class F>
TG_HD inline F expm1_reduced(F rh, F rl, F two_mn) {
  const F r = rh + rl;
  F q = r * 1.984587725e-04f + 1.394061721e-03f;
  q = q * r + 8.333389647e-03f;
  q = q * r + 4.166636243e-02f;
  q = q * r + 1.666666567e-01f;
  q = q * r + 0.5f;
  const F tail = (r * r) * q + rl;
  const F c = 1.0f - two_mn;
  const F clo = (1.0f - c) - two_mn;
  const F w = c + rh;
  const F werr = rh - (w - c);
  return w + (werr + (tail + clo));
}

// e^x - 1 for float32 that the compiler can vectorize (std::expm1 is a library call: 22.6 ms
// over 4M floats on two Intel AVX-512 cores, 33x exp's time), accurate for small x: x clamped to
// [-17.5, 89] (below, the result rounds to -1; above, 2^n z overflows to inf as e^x - 1 does),
// expm1_reduction, expm1_reduced, and z 2^n in two exact halves. n comes from nb's low bits (no
// conversion of a NaN to int). Within 0.99 ulp of expm1 over a fifth of all floats, with FMA
// or without; -0 stays -0 and NaN stays NaN. simd::expm1 takes the same steps on vectors, with the
// same bits.
inline constexpr float kExpm1Lo = -17.5f, kExpm1Hi = 89.0f;
TG_HD inline float expm1_f32(float x) {
  float xc = x < kExpm1Lo ? kExpm1Lo : x;
  xc = xc > kExpm1Hi ? kExpm1Hi : xc;
  float nb, n, rh, rl;
  expm1_reduction(xc, nb, n, rh, rl);
  const int ni = static_cast<int>(half_bits::float_bits(nb) - half_bits::float_bits(kExpShifter));
  const float two_mn = bits_to_float((127 - (ni < 100 ? ni : 100)) << 23);
  const float z = expm1_reduced(rh, rl, two_mn);
  const int n1 = ni / 2, n2 = ni - n1;
  float y = z * bits_to_float((n1 + 127) << 23) * bits_to_float((n2 + 127) << 23);
  y = x == 0.0f ? x : y;  // -0
  return x != x ? x : y;
}

// exp, log, log1p, expm1, tanh and sqrt of a GCC vector: the CPU backend's simd.h specializes this
// for its vectors (exp, log, log1p, expm1 and tanh of floats, with the _f32 functions' bits; sqrt
// of floats and doubles, correctly rounded), so that the elementwise list's expressions and the
// fused kernels' formulas, written once, also run a vector at a time (cpu_elementwise.cpp,
// cpu_model.cpp).
template <class V>
struct VectorMath;

// exp_any(x), log_any, log1p_any, expm1_any and tanh_any: the function of a float (exp_f32, ...),
// a double (std::exp, ...) or a vector of floats (VectorMath).
#define TG_MATH_ANY(name)                             \
  template <class T>                                  \
  TG_HD inline T name##_any(T x) {                    \
    if constexpr (std::is_same_v<T, float>) {         \
      return name##_f32(x);                           \
    } else if constexpr (std::is_same_v<T, double>) { \
      return std::name(x);                            \
    } else {                                          \
      return VectorMath<T>::name(x);                  \
    }                                                 \
  }
TG_MATH_ANY(exp)
TG_MATH_ANY(log)
TG_MATH_ANY(log1p)
TG_MATH_ANY(expm1)  // tanh_any: after tanh_f32 below

// The square root of a float or a double (std::sqrt) or of a vector of them (VectorMath),
// correctly rounded in every case.
template <class T>
TG_HD inline T sqrt_any(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::sqrt(x);
  } else {
    return VectorMath<T>::sqrt(x);
  }
}

// tanh's two branches on a = |x|, for float and GCC's float vectors alike. Below a = 0.625 an odd
// polynomial, a + a^3 P(a^2), P of degree 5 fitted to tanh's relative error on Chebyshev nodes;
// above, 1 - 2 / (e + 1) from e = e^(2a).
inline constexpr float kTanhSmall = 0.625f;
template <class F>
TG_HD inline F tanh_small(F a) {
  const F u = a * a;
  F p = u * 2.20910087e-3f - 8.25379416e-3f;
  p = p * u + 2.17335559e-2f;
  p = p * u - 5.39531820e-2f;
  p = p * u + 1.33332610e-1f;
  p = p * u - 3.33333313e-1f;
  return a + a * (u * p);
}
template <class F>
TG_HD inline F tanh_big(F e) {
  return 1.0f - 2.0f / (e + 1.0f);
}
// 2a is clamped to 18.5, where 1 - 2 / (e + 1) already rounds to 1 (it does from a = 9.01), so
// e^(2a) = p 2^n needs no range checks: 0 <= n <= 27, 2^n from nb's low bits (as in
// simd::exp_nonpositive_reduce), p 2^n exact.
inline constexpr float kTanhTwiceMax = 18.5f;

// tanh for float32 that the compiler can vectorize (std::tanh is a library call it cannot: 33 ms
// over 4M floats on two Intel AVX-512 cores, 0.03x PyTorch's): tanh_small or tanh_big of |x|, e
// by exp_f32's reduction and polynomial, and x's sign put back on the result's bits (so -0 stays
// -0 and NaN stays NaN). Within 1 ulp of tanh over every 97th float from 1e-30 to 20
// (tests/test_cpu_kernels.cpp checks 2). simd::tanh takes the same steps on vectors, with the
// same bits.
TG_HD inline float tanh_f32(float x) {
  const uint32_t sign = half_bits::float_bits(x) & 0x80000000u;
  const float a = half_bits::bits_float(half_bits::float_bits(x) ^ sign);
  float r;
  if (a < kTanhSmall) {
    r = tanh_small(a);
  } else {
    const float t = 2.0f * a;
    float nb, n;
    const float p = exp_taylor(exp_reduction(t > kTanhTwiceMax ? kTanhTwiceMax : t, nb, n));
    r = tanh_big(p * half_bits::bits_float((half_bits::float_bits(nb) << 23) + (127u << 23)));
  }
  return half_bits::bits_float(half_bits::float_bits(r) | sign);
}
TG_MATH_ANY(tanh)
#undef TG_MATH_ANY

// x^(1/2) as pow gives it, by a correctly rounded sqrt (so the bits of a correctly rounded pow):
// pow(-0, 1/2) is +0 (sqrt: -0) and pow(-inf, 1/2) is +inf (sqrt: NaN). T a float, a double or a
// vector of floats.
template <class T>
TG_HD inline T pow_half(T x) {
  return x == -__builtin_inff() ? -x : sqrt_any(x) + 0.0f;
}

// x^p: std::pow, but for the exponents that PyTorch computes by one or two correctly rounded
// operations, computed so (without a library call per element the CPU kernel's loop vectorizes:
// pow(x, 2) over 4M float32 on two Intel AVX-512 cores took 17.3 ms by std::pow, 0.04x
// PyTorch's; pow(x, 3) 19 ms, pow(x, 0.5) 11): x * x for 2, x for 1, 1 / x for -1, 1 for 0
// (pow(NaN, 0) is 1 too) and pow_half for 1/2, correctly rounded; x * x * x for 3 and
// 1 / pow_half(x) for -1/2, within an ulp. Special values come out as std::pow's. (Not -2 as
// 1 / (x * x), as PyTorch has it: that is 0 where x * x overflows and x^-2 is subnormal.)
template <class T>
TG_HD inline T pow_of(T x, T p) {
  if (p == T(2)) return x * x;
  if (p == T(1)) return x;
  if (p == T(-1)) return T(1) / x;
  if (p == T(0)) return T(1);
  if (p == T(3)) return x * x * x;
  if (p == T(0.5)) return pow_half(x);
  if (p == T(-0.5)) return T(1) / pow_half(x);
  return std::pow(x, p);
}

// log(e^a + e^b) as max(a, b) + log1p(exp(-|a - b|)), equal arguments (infinite ones included)
// adding log1p(1) = log 2, a NaN giving NaN: the steps of the composite that logaddexp was (and
// that its gradient follows), with the same bits, in one pass. T a float, a double or a vector
// of floats.
template <class T>
TG_HD inline T logaddexp_of(T a, T b) {
  const T m = ((a != a) | (a > b)) ? a : b;  // maximum's rule: a NaN wins
  const T d = a - b;
  const T gap = a == b ? T{} : (d < T{} ? d : -d);
  return m + log1p_any(exp_any(gap));
}

// 1 / (1 + e^-x); T a float, a double or a vector of floats (1.0f: a vector takes no T(1)).
template <class T>
TG_HD inline T sigmoid(T x) {
  return 1.0f / (1.0f + exp_any(-x));
}

// silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x) (T a scalar or a GCC float vector).
template <class T>
TG_HD inline T silu_grad_from_sigmoid(T x, T s) {
  return s * (1.0f + x * (1.0f - s));
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

// a / b, never undefined for integers: div refuses an integer 0 divisor before any kernel runs
// (0 here all the same), and INT64_MIN / -1 wraps to INT64_MIN as two's complement does.
template <class T>
TG_HD inline T quotient(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    if (b == T(0)) return T(0);
    if (b == T(-1)) return static_cast<T>(U(0) - static_cast<U>(a));
  }
  return a / b;
}

// |x|, with abs(-0.0) = +0.0 for the floats.
template <class T>
TG_HD inline T abs_of(T x) {
  if constexpr (std::is_integral_v<T>) {
    return x < T(0) ? -x : x;
  } else {
    return std::abs(x);
  }
}

template <class T>
TG_HD inline bool is_finite(T x) {
#ifdef __CUDA_ARCH__
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

// --- the ops of elementwise_ops.def: one functor each, and the dispatch to it

// The input types an op's kernels instantiate (its domain in the list).
namespace domain {
template <class T>
constexpr bool is_float = std::is_same_v<T, float> || std::is_same_v<T, double> || is_half_v<T>;
struct Float {
  template <class T>
  static constexpr bool accepts = is_float<T>;
  using sample = float;
};
struct Numeric {
  template <class T>
  static constexpr bool accepts = is_float<T> || std::is_same_v<T, int64_t>;
  using sample = float;
};
struct Any {
  template <class T>
  static constexpr bool accepts = true;
  using sample = float;
};
struct Bool {
  template <class T>
  static constexpr bool accepts = std::is_same_v<T, bool>;
  using sample = bool;
};
}  // namespace domain

// unary_fn::Exp{}(x, p) and binary_fn::Add{}(a, b): the list's expressions as functors.
namespace unary_fn {
#define TG_UNARY(Name, Domain, expr)                         \
  struct Name {                                              \
    using domain = domain::Domain;                           \
    template <class T>                                       \
    TG_HD auto operator()(T x, [[maybe_unused]] T p) const { \
      return expr;                                           \
    }                                                        \
  };
#define TG_BINARY(Name, Domain, expr)
#include "backends/elementwise_ops.def"
}  // namespace unary_fn

namespace binary_fn {
#define TG_UNARY(Name, Domain, expr)
#define TG_BINARY(Name, Domain, expr)       \
  struct Name {                             \
    using domain = domain::Domain;          \
    template <class T>                      \
    TG_HD auto operator()(T a, T b) const { \
      return expr;                          \
    }                                       \
  };
#include "backends/elementwise_ops.def"
}  // namespace binary_fn

// What a kernel stores for op Fn on inputs of type T: bool for the comparisons, logic and
// isfinite, else T itself.
template <class Fn, class T>
using stored_t =
    std::conditional_t<std::is_same_v<decltype(Fn{}(compute_t<T>{}, compute_t<T>{})), bool>, bool,
                       T>;

// The op on stored values: computed in compute_t<T> (float for the 16-bit types), rounded once
// into what is stored. p, a unary op's parameter, stays in the compute type.
template <class Fn, class T>
TG_HD stored_t<Fn, T> apply_unary(Fn fn, T x, compute_t<T> p) {
  return static_cast<stored_t<Fn, T>>(fn(static_cast<compute_t<T>>(x), p));
}
template <class Fn, class T>
TG_HD stored_t<Fn, T> apply_binary(Fn fn, T a, T b) {
  using C = compute_t<T>;
  return static_cast<stored_t<Fn, T>>(fn(static_cast<C>(a), static_cast<C>(b)));
}

[[noreturn]] inline void unknown_op() {
  fail("elementwise", "unknown op code (corrupt UnaryOp or BinaryOp)");
}

// Calls f(fn) with the functor of op: its type is a constant, so a kernel written once is
// instantiated per op. The switches list every op (-Werror=switch): none can be missed.
template <class F>
decltype(auto) visit(UnaryOp op, F&& f) {
  switch (op) {
#define TG_UNARY(Name, Domain, expr) \
  case UnaryOp::Name:                \
    return f(unary_fn::Name{});
#define TG_BINARY(Name, Domain, expr)
#include "backends/elementwise_ops.def"
  }
  unknown_op();
}
template <class F>
decltype(auto) visit(BinaryOp op, F&& f) {
  switch (op) {
#define TG_UNARY(Name, Domain, expr)
#define TG_BINARY(Name, Domain, expr) \
  case BinaryOp::Name:                \
    return f(binary_fn::Name{});
#include "backends/elementwise_ops.def"
  }
  unknown_op();
}

// Calls f(fn, T{}) with the op's functor and the C++ type of dtype t when t is in the op's
// domain: the one place the kernels' (op, dtype) instantiations come from. A dtype outside the
// domain (the ops check before they call a kernel) is an error, never a silent no-op.
template <class Op, class F>
void visit_typed(Op op, DType t, const char* kernel, F&& f) {
  visit(op, [&](auto fn) {
    using Fn = decltype(fn);
    dispatch(t, [&](auto v) {
      if constexpr (Fn::domain::template accepts<decltype(v)>) {
        f(fn, v);
      } else {
        fail(kernel, "dtype ", t, " is outside this op's domain");
      }
    });
  });
}

// Whether the op's kernels take inputs of dtype t (its domain in the list).
template <class Op>
bool accepts(Op op, DType t) {
  return visit(op, [t](auto fn) {
    return dispatch(t, [](auto v) { return decltype(fn)::domain::template accepts<decltype(v)>; });
  });
}

// Whether the op's result is bool (comparisons, logic, isfinite) rather than its input's type.
template <class Op>
bool gives_bool(Op op) {
  return visit(op, [](auto fn) {
    using S = typename decltype(fn)::domain::sample;
    return std::is_same_v<decltype(fn(S{}, S{})), bool>;
  });
}

}  // namespace tg::scalar
