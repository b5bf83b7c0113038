// Copy, fill, arange, unary, binary and where on strided CPU views.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided_loop.h"
#include "backends/scalar_ops.h"

namespace tg::cpu {
namespace {

template <class T>
T* at(const View& v) {
  return static_cast<T*>(v.data);
}

// out = f(x) elementwise; unit-stride runs get their own loop so the compiler vectorizes it.
template <class To, class Ti, class F>
void map1(const View& x, const View& out, F f) {
  const Ti* xp = at<const Ti>(x);
  To* op = at<To>(out);
  for_each_run<2>(out.sizes, {&out.strides, &x.strides},
                  [&](int64_t n, std::array<int64_t, 2> o, std::array<int64_t, 2> s) {
                    To* dst = op + o[0];
                    const Ti* src = xp + o[1];
                    if (s[0] == 1 && s[1] == 1) {
                      for (int64_t i = 0; i < n; ++i) dst[i] = f(src[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i) dst[i * s[0]] = f(src[i * s[1]]);
                    }
                  });
}

template <class To, class Ti, class F>
void map2(const View& a, const View& b, const View& out, F f) {
  const Ti* ap = at<const Ti>(a);
  const Ti* bp = at<const Ti>(b);
  To* op = at<To>(out);
  for_each_run<3>(out.sizes, {&out.strides, &a.strides, &b.strides},
                  [&](int64_t n, std::array<int64_t, 3> o, std::array<int64_t, 3> s) {
                    To* dst = op + o[0];
                    const Ti* x = ap + o[1];
                    const Ti* y = bp + o[2];
                    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
                      for (int64_t i = 0; i < n; ++i) dst[i] = f(x[i], y[i]);
                    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
                      const Ti yv = *y;
                      for (int64_t i = 0; i < n; ++i) dst[i] = f(x[i], yv);
                    } else {
                      for (int64_t i = 0; i < n; ++i) dst[i * s[0]] = f(x[i * s[1]], y[i * s[2]]);
                    }
                  });
}

// Instantiates `fn` with the op as a compile-time constant so the switch in the scalar
// functor folds away inside the loop.
#define TG_UNARY_CASES(X)                                                                    \
  X(Neg)                                                                                     \
  X(Exp)                                                                                     \
  X(Log)                                                                                     \
  X(Sqrt)                                                                                    \
  X(Rsqrt) X(Abs) X(Sign) X(Tanh) X(Sigmoid) X(Relu) X(Silu) X(Gelu) X(SiluGrad) X(GeluGrad) \
      X(Pow)
#define TG_ARITH_CASES(X) X(Add) X(Sub) X(Mul) X(Div) X(Maximum) X(Minimum)
#define TG_COMPARE_CASES(X) X(Eq) X(Ne) X(Lt) X(Le) X(Gt) X(Ge) X(LogicalAnd) X(LogicalOr)

template <class T>
void unary_float(UnaryOp op, const View& x, const View& out, double param) {
  const T p = static_cast<T>(param);
  switch (op) {
#define X(name)                                                                     \
  case UnaryOp::name:                                                               \
    map1<T, T>(x, out, [p](T v) { return scalar::unary<T>(UnaryOp::name, v, p); }); \
    break;
    TG_UNARY_CASES(X)
#undef X
    case UnaryOp::IsFinite:
      map1<bool, T>(x, out, [](T v) { return std::isfinite(v); });
      break;
    default:
      break;
  }
}

template <class T>
void binary_typed(BinaryOp op, const View& a, const View& b, const View& out) {
  switch (op) {  // NOLINT(bugprone-branch-clone): the cases differ in their constant op
#define X(name)                                                                               \
  case BinaryOp::name:                                                                        \
    if constexpr (!std::is_same_v<T, bool>)                                                   \
      map2<T, T>(a, b, out, [](T x, T y) { return scalar::arith<T>(BinaryOp::name, x, y); }); \
    break;
    TG_ARITH_CASES(X)
#undef X
#define X(name)                                                                                  \
  case BinaryOp::name:                                                                           \
    map2<bool, T>(a, b, out, [](T x, T y) { return scalar::compare<T>(BinaryOp::name, x, y); }); \
    break;
    TG_COMPARE_CASES(X)
#undef X
  }
}

}  // namespace

void CpuBackend::copy(const View& src, const View& dst) {
  dispatch(dst.dtype, [&](auto to) {
    using To = decltype(to);
    dispatch(src.dtype, [&](auto ti) {
      using Ti = decltype(ti);
      map1<To, Ti>(src, dst, [](Ti v) { return static_cast<To>(v); });
    });
  });
}

void CpuBackend::fill(const View& dst, double value) {
  dispatch(dst.dtype, [&](auto t) {
    using T = decltype(t);
    const T v = static_cast<T>(value);
    T* p = at<T>(dst);
    for_each_run<1>(dst.sizes, {&dst.strides},
                    [&](int64_t n, std::array<int64_t, 1> o, std::array<int64_t, 1> s) {
                      T* d = p + o[0];
                      if (s[0] == 1) {
                        std::fill(d, d + n, v);
                      } else {
                        for (int64_t i = 0; i < n; ++i) d[i * s[0]] = v;
                      }
                    });
  });
}

void CpuBackend::arange(const View& dst, double start, double step) {
  dispatch(dst.dtype, [&](auto t) {
    using T = decltype(t);
    T* p = at<T>(dst);
    const int64_t n = dst.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
}

void CpuBackend::unary(UnaryOp op, const View& x, const View& out, double param) {
  if (op == UnaryOp::LogicalNot) {
    map1<bool, bool>(x, out, [](bool v) { return !v; });
  } else if (x.dtype == kInt64) {  // the few integer unaries: neg, abs, sign
    map1<int64_t, int64_t>(x, out, [op](int64_t v) -> int64_t {
      return op == UnaryOp::Neg ? -v : op == UnaryOp::Abs ? (v < 0 ? -v : v) : (v > 0) - (v < 0);
    });
  } else {
    dispatch_float(x.dtype, [&](auto t) { unary_float<decltype(t)>(op, x, out, param); });
  }
}

void CpuBackend::binary(BinaryOp op, const View& a, const View& b, const View& out) {
  dispatch(a.dtype, [&](auto t) { binary_typed<decltype(t)>(op, a, b, out); });
}

void CpuBackend::where(const View& cond, const View& a, const View& b, const View& out) {
  dispatch(out.dtype, [&](auto t) {
    using T = decltype(t);
    const bool* cp = at<const bool>(cond);
    const T* ap = at<const T>(a);
    const T* bp = at<const T>(b);
    T* op = at<T>(out);
    for_each_run<4>(out.sizes, {&out.strides, &cond.strides, &a.strides, &b.strides},
                    [&](int64_t n, std::array<int64_t, 4> o, std::array<int64_t, 4> s) {
                      for (int64_t i = 0; i < n; ++i)
                        op[o[0] + i * s[0]] =
                            cp[o[1] + i * s[1]] ? ap[o[2] + i * s[2]] : bp[o[3] + i * s[3]];
                    });
  });
}

void CpuBackend::to_host(const void* src, void* dst, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void CpuBackend::from_host(const void* src, void* dst, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

}  // namespace tg::cpu
