// Copy, fill, arange, unary and where on strided CPU views (binary ops: cpu_binary.cpp).
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise_loops.h"
#include "backends/cpu/simd.h"
#include "backends/scalar_ops.h"

namespace tg::cpu {
namespace {

using namespace elementwise_loops;

// The ops whose float32 unit-stride runs (and 16-bit blocks, elementwise_loops.h) evaluate their
// functors on whole simd vectors of floats: their expressions take vectors as they are (exp
// through scalar::VectorMath, simd::exp) and give the same bits as lane by lane, in fewer
// instructions than the compiler makes of the scalar code (AVX-512: 2^n in one vscalefps). Over 4M float32 on two Intel AVX-512 cores: exp 0.89 ms ->
// 0.78 (the memory-bound pow(x, 2): 0.74), tanh 1.62 -> 1.15-1.21 (its division's share stays),
// sigmoid 1.06-1.08 -> 0.67-0.68, silu 1.12 -> 0.67-0.69; sqrt 1.98-2.10 -> 0.69-0.74 and rsqrt
// 3.55-3.68 -> 0.91-1.01 (std::sqrt may set errno, so their loops of scalars never vectorized);
// log 4.47-4.64 -> 0.85-0.86 (glibc's logf per element before scalar::log_f32); expm1 22.6 ->
// 0.91-0.99 and log1p 15.5 -> 1.04-1.15 (glibc's, before expm1_f32 and log1p_f32).
template <class Fn>
constexpr bool kVectorUnary =
    (std::is_same_v<Fn, scalar::unary_fn::Exp> || std::is_same_v<Fn, scalar::unary_fn::Log> ||
     std::is_same_v<Fn, scalar::unary_fn::Expm1> || std::is_same_v<Fn, scalar::unary_fn::Log1p> ||
     std::is_same_v<Fn, scalar::unary_fn::Sqrt> || std::is_same_v<Fn, scalar::unary_fn::Rsqrt> ||
     std::is_same_v<Fn, scalar::unary_fn::Tanh> || std::is_same_v<Fn, scalar::unary_fn::Sigmoid> ||
     std::is_same_v<Fn, scalar::unary_fn::Silu> || std::is_same_v<Fn, scalar::unary_fn::SiluGrad> ||
     std::is_same_v<Fn, scalar::unary_fn::Softplus> ||
     std::is_same_v<Fn, scalar::unary_fn::LogSigmoid>);

// where's runs of 4- and 8-byte elements a vector at a time, the condition's bytes widened to
// lane masks: unit-stride runs, where a side may also be one element (stride 0: masked_fill, a
// scalar's side). The plain loop compiles to a branch on the condition, which a random one
// mispredicts half the time (4M float32 on two Intel AVX-512 cores: 8.3 ms, against about 1.1
// this way).
template <bool kXOne, bool kYOne, class T>
void select_run(int64_t n, T* d, const bool* c, const T* x, const T* y) {
  int64_t i = 0;
  if constexpr (sizeof(T) == 4 || sizeof(T) == 8) {
    using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
    using VI = simd::Vec<I>;
    constexpr int W = simd::kLanes<I>;
    typedef uint8_t VB __attribute__((vector_size(W)));
    const auto side = [](const T* p, int64_t at, bool one) {
      I e;
      VI v;
      if (one) {
        std::memcpy(&e, p, sizeof e);
        v = simd::splat(e);
      } else {
        std::memcpy(&v, p + at, sizeof v);
      }
      return v;
    };
    for (; i + W <= n; i += W) {
      VB b;
      std::memcpy(&b, c + i, sizeof b);
      const VI r = __builtin_convertvector(b, VI) != 0 ? side(x, i, kXOne) : side(y, i, kYOne);
      std::memcpy(d + i, &r, sizeof r);
    }
  }
  for (; i < n; ++i) d[i] = c[i] ? x[kXOne ? 0 : i] : y[kYOne ? 0 : i];
}

// pow's exponents +-1/2 as types, as std::integral_constant gives the integers.
struct Half {
  static constexpr double value = 0.5;
};
struct MinusHalf {
  static constexpr double value = -0.5;
};

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

// One loop per op of elementwise_ops.def and input dtype of its domain (scalar::visit_typed).
void CpuBackend::unary(UnaryOp op, const View& x, const View& out, double param) {
  scalar::visit_typed(op, x.dtype, "unary", [&](auto fn, auto t) {
    using T = decltype(t);
    using C = compute_t<T>;
    using To = scalar::stored_t<decltype(fn), T>;
    const auto p = static_cast<C>(param);
    // f on stored elements; ff, the op on floats, and vf, on float vectors (or nullptr), for the
    // float32 loops and the 16-bit blocks.
    const auto run = [&](auto f, auto ff, auto vf) {
      if constexpr (kHalfBlocks<T, decltype(vf)>) {
        map1_half<To, T>(x, out, f, ff, vf);
      } else if constexpr (std::is_same_v<T, float>) {
        map1<To, T>(x, out, f, vf);
      } else {
        map1<To, T>(x, out, f);
      }
    };
    if constexpr (std::is_same_v<decltype(fn), scalar::unary_fn::Pow>) {
      // pow's exponents without std::pow (scalar::pow_of) as constants, so that the loop holds
      // no library call and vectorizes (pow(x, 2) over 4M float32 on two Intel AVX-512 cores:
      // 17.3 ms by std::pow, 1.37 with the exponent tested in the loop, 0.54-0.57 with it a
      // constant; PyTorch 0.75). The square roots' take whole float32 vectors (simd::sqrt: a
      // std::sqrt in a loop stays a call).
      auto with = [&](auto c, auto vf) {
        constexpr auto pc = static_cast<C>(decltype(c)::value);
        run([fn](T v) { return scalar::apply_unary(fn, v, pc); }, [fn](C v) { return fn(v, pc); },
            vf);
      };
      using V = simd::Vec<float>;
      const std::nullptr_t none = nullptr;
      if (p == 2) return with(std::integral_constant<int, 2>{}, none);
      if (p == 1) return with(std::integral_constant<int, 1>{}, none);
      if (p == -1) return with(std::integral_constant<int, -1>{}, none);
      if (p == 0) return with(std::integral_constant<int, 0>{}, none);
      if (p == 3) return with(std::integral_constant<int, 3>{}, none);
      if (p == 0.5) return with(Half{}, [](V v) { return scalar::pow_half(v); });
      if (p == -0.5) return with(MinusHalf{}, [](V v) { return 1.0f / scalar::pow_half(v); });
    }
    const auto f = [fn, p](T v) { return scalar::apply_unary(fn, v, p); };
    const auto ff = [fn, p](C v) { return fn(v, p); };
    if constexpr (kVectorUnary<decltype(fn)>) {
      run(f, ff, [fn](simd::Vec<float> v) { return fn(v, v); });
    } else {
      run(f, ff, nullptr);
    }
  });
}

void CpuBackend::where(const View& cond, const View& a, const View& b, const View& out) {
  dispatch(out.dtype, [&](auto t) {
    using T = decltype(t);
    const bool* cp = at<const bool>(cond);
    const T* ap = at<const T>(a);
    const T* bp = at<const T>(b);
    T* op = at<T>(out);
    for_each_run<4>(
        out.sizes, {&out.strides, &cond.strides, &a.strides, &b.strides},
        [&](int64_t n, std::array<int64_t, 4> o, std::array<int64_t, 4> s) {
          T* d = op + o[0];
          const bool* c = cp + o[1];
          const T* x = ap + o[2];
          const T* y = bp + o[3];
          if (s[0] == 1 && s[1] == 1 && (s[2] == 0 || s[2] == 1) && (s[3] == 0 || s[3] == 1)) {
            if (s[2] == 1) {
              s[3] == 1 ? select_run<false, false>(n, d, c, x, y)
                        : select_run<false, true>(n, d, c, x, y);
            } else {
              s[3] == 1 ? select_run<true, false>(n, d, c, x, y)
                        : select_run<true, true>(n, d, c, x, y);
            }
          } else {
            for (int64_t i = 0; i < n; ++i) d[i * s[0]] = c[i * s[1]] ? x[i * s[2]] : y[i * s[3]];
          }
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
