// Copy, fill, arange, unary, binary and where on strided CPU views.
#include <algorithm>
#include <cstring>

#include <immintrin.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/strided_loop.h"
#include "backends/scalar_ops.h"

namespace tg::cpu {
namespace {

template <class T>
T* at(const View& v) {
  return static_cast<T*>(v.data);
}

// out = f(x) elementwise: run(n, dst, src) takes the unit-stride runs, f the elements of the
// others, and a transposed x is read a tile at a time (for_each_transposed_tile).
template <class To, class Ti, class F, class Run>
void map1_runs(const View& x, const View& out, F f, Run run) {
  const Ti* xp = at<const Ti>(x);
  To* op = at<To>(out);
  using Offs = std::array<int64_t, 2>;
  auto tile = [&](int64_t rows, int64_t cols, Offs o, Offs rs, Offs cs) {
    for (int64_t i = 0; i < rows; ++i) {
      To* dst = op + o[0] + i * rs[0];
      const Ti* src = xp + o[1] + i * rs[1];
      for (int64_t j = 0; j < cols; ++j) dst[j] = f(src[j * cs[1]]);
    }
  };
  if (for_each_transposed_tile<2>(out.sizes, {&out.strides, &x.strides}, tile)) return;
  for_each_run<2>(out.sizes, {&out.strides, &x.strides},
                  [&](int64_t n, std::array<int64_t, 2> o, std::array<int64_t, 2> s) {
                    To* dst = op + o[0];
                    const Ti* src = xp + o[1];
                    if (s[0] == 1 && s[1] == 1) {
                      run(n, dst, src);
                    } else {
                      for (int64_t i = 0; i < n; ++i) dst[i * s[0]] = f(src[i * s[1]]);
                    }
                  });
}

// map1 with a plain loop over unit-stride runs, which the compiler vectorizes, or vf's (f on a
// whole vector of Ti) where given.
template <class To, class Ti, class F, class VF = std::nullptr_t>
void map1(const View& x, const View& out, F f, VF vf = nullptr) {
  map1_runs<To, Ti>(x, out, f, [&](int64_t n, To* dst, const Ti* src) {
    int64_t i = 0;
    if constexpr (!std::is_same_v<VF, std::nullptr_t>) {
      constexpr int64_t W = simd::kLanes<Ti>;
      for (; i + W <= n; i += W) simd::store(dst + i, vf(simd::load(src + i)));
    }
    for (; i < n; ++i) dst[i] = f(src[i]);
  });
}

// out = f(a, b) elementwise, as map1_runs: run(n, dst, a, b, bs) takes the unit-stride runs of
// out and a where b's run has unit stride (bs = 1) or is one element (bs = 0: broadcast).
template <class To, class Ti, class F, class Run>
void map2_runs(const View& a, const View& b, const View& out, F f, Run run) {
  const Ti* ap = at<const Ti>(a);
  const Ti* bp = at<const Ti>(b);
  To* op = at<To>(out);
  using Offs = std::array<int64_t, 3>;
  auto tile = [&](int64_t rows, int64_t cols, Offs o, Offs rs, Offs cs) {
    for (int64_t i = 0; i < rows; ++i) {
      To* dst = op + o[0] + i * rs[0];
      const Ti* x = ap + o[1] + i * rs[1];
      const Ti* y = bp + o[2] + i * rs[2];
      for (int64_t j = 0; j < cols; ++j) dst[j] = f(x[j * cs[1]], y[j * cs[2]]);
    }
  };
  if (for_each_transposed_tile<3>(out.sizes, {&out.strides, &a.strides, &b.strides}, tile)) return;
  for_each_run<3>(out.sizes, {&out.strides, &a.strides, &b.strides},
                  [&](int64_t n, std::array<int64_t, 3> o, std::array<int64_t, 3> s) {
                    To* dst = op + o[0];
                    const Ti* x = ap + o[1];
                    const Ti* y = bp + o[2];
                    if (s[0] == 1 && s[1] == 1 && (s[2] == 1 || s[2] == 0)) {
                      run(n, dst, x, y, s[2]);
                    } else {
                      for (int64_t i = 0; i < n; ++i) dst[i * s[0]] = f(x[i * s[1]], y[i * s[2]]);
                    }
                  });
}

// map2 with plain loops over unit-stride runs, or vf's where given (b's one element splatted
// where it is broadcast along the run).
template <class To, class Ti, class F, class VF = std::nullptr_t>
void map2(const View& a, const View& b, const View& out, F f, VF vf = nullptr) {
  map2_runs<To, Ti>(a, b, out, f, [&](int64_t n, To* dst, const Ti* x, const Ti* y, int64_t bs) {
    int64_t i = 0;
    if constexpr (!std::is_same_v<VF, std::nullptr_t>) {
      constexpr int64_t W = simd::kLanes<Ti>;
      const simd::Vec<Ti> one = simd::splat(*y);
      for (; i + W <= n; i += W)
        simd::store(dst + i, vf(simd::load(x + i), bs ? simd::load(y + i) : one));
    }
    if (bs == 1) {
      for (; i < n; ++i) dst[i] = f(x[i], y[i]);
    } else {
      const Ti yv = *y;
      for (; i < n; ++i) dst[i] = f(x[i], yv);
    }
  });
}

// 16-bit inputs' unit-stride runs a block at a time: widened into floats, the float op's own
// loop run on them (vf on whole vectors where given, else ff, the op on floats), the results
// rounded back once. Element by element, as f does it (widen, compute in float, round once),
// the compiler vectorized neither the conversions nor the op (4M float16 on two Intel AVX-512
// cores: exp 12.1 ms, PyTorch 1.1; sqrt 4.6, PyTorch 0.55; a product 1.9, PyTorch 0.52). The
// bits are f's: the same conversions and the same float op.
inline constexpr int64_t kHalfBlock = 256;

// m 16-bit values widened into floats, and m floats rounded into 16-bit values (or copied, for
// results that are not floats). bfloat16's conversions vectorize as written; float16's, with
// their subnormal and overflow cases, do not, so F16C's vcvtph2ps and vcvtps2ph (to nearest,
// ties to even) take them eight at a time where the build has it: the same values, NaNs still
// NaN (the float widened from a signaling float16 NaN has its quiet bit set; it rounds back to
// the same float16).
template <class Ti>
void widen(const Ti* src, float* dst, int64_t m) {
  int64_t j = 0;
#if defined(__F16C__)
  if constexpr (std::is_same_v<Ti, float16>) {
    for (; j + 8 <= m; j += 8)
      _mm256_storeu_ps(dst + j,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j))));
  }
#endif
  for (; j < m; ++j) dst[j] = static_cast<float>(src[j]);
}
template <class R, class To>
void round_into(const R* res, To* dst, int64_t m) {
  int64_t j = 0;
#if defined(__F16C__)
  if constexpr (std::is_same_v<To, float16> && std::is_same_v<R, float>) {
    for (; j + 8 <= m; j += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j),
                       _mm256_cvtps_ph(_mm256_loadu_ps(res + j), _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; j < m; ++j) dst[j] = static_cast<To>(res[j]);
}

// The block's results: lanes(j) for whole vectors from j (where the op has one), lane(j) for
// the rest, each rounded into dst[j].
template <class R, class To, class Lanes, class Lane>
void half_results(int64_t m, To* dst, Lanes lanes, Lane lane) {
  alignas(64) R res[kHalfBlock];
  int64_t j = 0;
  if constexpr (!std::is_same_v<Lanes, std::nullptr_t>) {
    for (; j + simd::kLanes<float> <= m; j += simd::kLanes<float>) simd::store(res + j, lanes(j));
  }
  for (; j < m; ++j) res[j] = lane(j);
  round_into(res, dst, m);
}

// Which 16-bit ops take blocks: float16's all, bfloat16's where the op has a vector form (the
// compiler vectorizes bfloat16's plain loops of arithmetic, whose widening is a shift: a product
// over 4M took 0.49 ms so, 0.53-0.54 in blocks).
template <class T, class VF>
constexpr bool kHalfBlocks = std::is_same_v<T, float16> ||
                             (std::is_same_v<T, bfloat16> && !std::is_same_v<VF, std::nullptr_t>);

template <class To, class Ti, class F, class FF, class VF = std::nullptr_t>
void map1_half(const View& x, const View& out, F f, FF ff, VF vf = nullptr) {
  map1_runs<To, Ti>(x, out, f, [&](int64_t n, To* dst, const Ti* src) {
    alignas(64) float xb[kHalfBlock];
    for (int64_t i0 = 0; i0 < n; i0 += kHalfBlock) {
      const int64_t m = std::min(kHalfBlock, n - i0);
      widen(src + i0, xb, m);
      const auto lane = [&](int64_t j) { return ff(xb[j]); };
      if constexpr (std::is_same_v<VF, std::nullptr_t>) {
        half_results<decltype(ff(0.0f))>(m, dst + i0, nullptr, lane);
      } else {
        half_results<decltype(ff(0.0f))>(
            m, dst + i0, [&](int64_t j) { return vf(simd::load(xb + j)); }, lane);
      }
    }
  });
}

// Binary: a's and b's blocks widened (b's one element repeated where it is broadcast).
template <class To, class Ti, class F, class FF, class VF = std::nullptr_t>
void map2_half(const View& a, const View& b, const View& out, F f, FF ff, VF vf = nullptr) {
  map2_runs<To, Ti>(a, b, out, f, [&](int64_t n, To* dst, const Ti* x, const Ti* y, int64_t bs) {
    alignas(64) float xb[kHalfBlock], yb[kHalfBlock];
    if (!bs) std::fill(yb, yb + kHalfBlock, static_cast<float>(*y));
    for (int64_t i0 = 0; i0 < n; i0 += kHalfBlock) {
      const int64_t m = std::min(kHalfBlock, n - i0);
      widen(x + i0, xb, m);
      if (bs) widen(y + i0, yb, m);
      const auto lane = [&](int64_t j) { return ff(xb[j], yb[j]); };
      if constexpr (std::is_same_v<VF, std::nullptr_t>) {
        half_results<decltype(ff(0.0f, 0.0f))>(m, dst + i0, nullptr, lane);
      } else {
        half_results<decltype(ff(0.0f, 0.0f))>(
            m, dst + i0, [&](int64_t j) { return vf(simd::load(xb + j), simd::load(yb + j)); },
            lane);
      }
    }
  });
}

// The float32 ops whose unit-stride runs evaluate their functors on whole simd vectors: their
// expressions take vectors as they are (exp through scalar::VectorMath, simd::exp) and give the
// same bits as lane by lane, in fewer instructions than the compiler makes of the scalar code
// (AVX-512: 2^n in one vscalefps). Over 4M float32 on two Intel AVX-512 cores: exp 0.89 ms ->
// 0.78 (the memory-bound pow(x, 2): 0.74), tanh 1.62 -> 1.15-1.21 (its division's share stays),
// sigmoid 1.06-1.08 -> 0.67-0.68, silu 1.12 -> 0.67-0.69; sqrt 1.98-2.10 -> 0.69-0.74 and rsqrt
// 3.55-3.68 -> 0.91-1.01 (std::sqrt may set errno, so their loops of scalars never vectorized);
// log 4.47-4.64 -> 0.85-0.86 (glibc's logf per element before scalar::log_f32); expm1 22.6 ->
// 0.91-0.99 and log1p 15.5 -> 1.04-1.15 (glibc's, before expm1_f32 and log1p_f32).
template <class Fn, class T>
constexpr bool kVectorUnary =
    std::is_same_v<T, float> &&
    (std::is_same_v<Fn, scalar::unary_fn::Exp> || std::is_same_v<Fn, scalar::unary_fn::Log> ||
     std::is_same_v<Fn, scalar::unary_fn::Expm1> || std::is_same_v<Fn, scalar::unary_fn::Log1p> ||
     std::is_same_v<Fn, scalar::unary_fn::Sqrt> || std::is_same_v<Fn, scalar::unary_fn::Rsqrt> ||
     std::is_same_v<Fn, scalar::unary_fn::Tanh> || std::is_same_v<Fn, scalar::unary_fn::Sigmoid> ||
     std::is_same_v<Fn, scalar::unary_fn::Silu> || std::is_same_v<Fn, scalar::unary_fn::SiluGrad> ||
     std::is_same_v<Fn, scalar::unary_fn::Softplus> ||
     std::is_same_v<Fn, scalar::unary_fn::LogSigmoid>);

// The same for binary ops: logaddexp (its composite's nine passes took 10.1-12.3 ms over 4M
// float32 on two Intel AVX-512 cores, one pass 2.1) and the backward formulas that hold an exp.
template <class Fn, class T>
constexpr bool kVectorBinary = std::is_same_v<T, float> &&
                               (std::is_same_v<Fn, scalar::binary_fn::LogAddExp> ||
                                std::is_same_v<Fn, scalar::binary_fn::SiluBackward> ||
                                std::is_same_v<Fn, scalar::binary_fn::SoftplusBackward> ||
                                std::is_same_v<Fn, scalar::binary_fn::LogSigmoidBackward>);

// The binary op on float vectors where it has that form (kVectorBinary), else nullptr: for the
// float32 loops and the 16-bit blocks.
template <class Fn>
auto binary_on_vectors(Fn fn) {
  if constexpr (kVectorBinary<Fn, float>) {
    return [fn](simd::Vec<float> u, simd::Vec<float> v) { return fn(u, v); };
  } else {
    (void)fn;
    return nullptr;
  }
}

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
    if constexpr (kVectorUnary<decltype(fn), float>) {
      run(f, ff, [fn](simd::Vec<float> v) { return fn(v, v); });
    } else {
      run(f, ff, nullptr);
    }
  });
}

void CpuBackend::binary(BinaryOp op, const View& a, const View& b, const View& out) {
  scalar::visit_typed(op, a.dtype, "binary", [&](auto fn, auto t) {
    using T = decltype(t);
    using C = compute_t<T>;
    using To = scalar::stored_t<decltype(fn), T>;
    const auto f = [fn](T u, T v) { return scalar::apply_binary(fn, u, v); };
    const auto ff = [fn](C u, C v) { return fn(u, v); };
    const auto vf = binary_on_vectors(fn);
    if constexpr (kHalfBlocks<T, decltype(vf)>) {
      map2_half<To, T>(a, b, out, f, ff, vf);
    } else if constexpr (std::is_same_v<T, float>) {
      map2<To, T>(a, b, out, f, vf);
    } else {
      map2<To, T>(a, b, out, f);
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
