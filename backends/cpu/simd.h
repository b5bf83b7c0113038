// Portable SIMD for the CPU kernels, through GCC's vector extensions: one vector of the widest
// registers the build targets (64 bytes with AVX-512, 32 with AVX/AVX2, 16 otherwise), so the
// same source compiles to zmm, ymm or xmm code with -march=native or without it.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "backends/scalar_ops.h"

namespace tg::cpu::simd {

#if defined(__AVX512F__)
inline constexpr int kBytes = 64;
inline constexpr int kRegisters = 32;
#elif defined(__AVX__)
inline constexpr int kBytes = 32;
inline constexpr int kRegisters = 16;
#else
inline constexpr int kBytes = 16;
inline constexpr int kRegisters = 16;
#endif

// The instruction set the vectors compile to, for benchmark headers.
inline const char* isa_name() {
#if defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__)
  return "AVX2";
#elif defined(__AVX__)
  return "AVX";
#else
  return "SSE2";
#endif
}

template <class T>
struct VecOf {
  typedef T type __attribute__((vector_size(kBytes)));
};
template <class T>
using Vec = typename VecOf<T>::type;
// Lanes of a vector of T.
template <class T>
inline constexpr int kLanes = kBytes / static_cast<int>(sizeof(T));

namespace detail {
template <class T, size_t... I>
inline Vec<T> splat(T x, std::index_sequence<I...>) {
  return Vec<T>{((void)I, x)...};
}
}  // namespace detail
// x in every lane: one vbroadcastss/sd (`Vec<T>{} + x` would add first, as 0 + -0 is +0).
template <class T>
inline Vec<T> splat(T x) {
  return detail::splat(x, std::make_index_sequence<kLanes<T>>{});
}
// Unaligned load and store (memcpy compiles to one vmovups).
template <class T>
inline Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store(T* p, Vec<T> v) {
  std::memcpy(p, &v, sizeof v);
}
// The helpers below take the vector type itself (Vec<T> is not deducible from an argument).
template <class V>
inline V max(V a, V b) {
  return a > b ? a : b;
}
template <class V>
inline auto reduce_max(V v) {
  auto m = v[0];
  for (size_t i = 1; i < sizeof(V) / sizeof(m); ++i) m = v[i] > m ? v[i] : m;
  return m;
}
template <class V>
inline auto reduce_sum(V v) {
  auto s = v[0];
  for (size_t i = 1; i < sizeof(V) / sizeof(s); ++i) s += v[i];
  return s;
}
// The square root lane by lane, correctly rounded as std::sqrt's (one vsqrtps/pd; std::sqrt in a
// loop stays a scalar call where errno may be set, so the compiler does not vectorize it).
template <class T>
inline Vec<T> sqrt(Vec<T> x) {
#if defined(__AVX512F__)
  // The masked forms with every lane set (g++ 12 warns that _mm512_sqrt_ps's undefined pass-
  // through may be used uninitialized; it compiles to the same vsqrtps).
  if constexpr (sizeof(T) == 4) {
    const __m512 v = reinterpret_cast<__m512>(x);
    return reinterpret_cast<Vec<T>>(_mm512_mask_sqrt_ps(v, static_cast<__mmask16>(0xffff), v));
  } else {
    const __m512d v = reinterpret_cast<__m512d>(x);
    return reinterpret_cast<Vec<T>>(_mm512_mask_sqrt_pd(v, static_cast<__mmask8>(0xff), v));
  }
#elif defined(__AVX__)
  if constexpr (sizeof(T) == 4) {
    return reinterpret_cast<Vec<T>>(_mm256_sqrt_ps(reinterpret_cast<__m256>(x)));
  } else {
    return reinterpret_cast<Vec<T>>(_mm256_sqrt_pd(reinterpret_cast<__m256d>(x)));
  }
#elif defined(__SSE2__)
  if constexpr (sizeof(T) == 4) {
    return reinterpret_cast<Vec<T>>(_mm_sqrt_ps(reinterpret_cast<__m128>(x)));
  } else {
    return reinterpret_cast<Vec<T>>(_mm_sqrt_pd(reinterpret_cast<__m128d>(x)));
  }
#else
  Vec<T> y;
  for (int i = 0; i < kLanes<T>; ++i) y[i] = std::sqrt(x[i]);
  return y;
#endif
}

// Whether every lane of a comparison's result (all ones or zero per lane) is true.
inline bool all_lanes(Vec<int32_t> m) {
#if defined(__AVX512F__)
  const __m512i v = reinterpret_cast<__m512i>(m);
  return _mm512_test_epi32_mask(v, v) == static_cast<__mmask16>(0xffff);
#elif defined(__AVX__)
  return _mm256_movemask_ps(reinterpret_cast<__m256>(m)) == 0xff;
#elif defined(__SSE2__)
  return _mm_movemask_ps(reinterpret_cast<__m128>(m)) == 0xf;
#else
  for (int i = 0; i < kLanes<int32_t>; ++i) {
    if (m[i] == 0) return false;
  }
  return true;
#endif
}

// scalar::log_split and log_specials on vectors.
inline Vec<float> log_split(Vec<int32_t> bits, Vec<int32_t> e, Vec<float>& ef) {
  using V = Vec<float>;
  V m = reinterpret_cast<V>((bits & 0x7fffff) | 0x3f800000);
  const Vec<int32_t> big = m > splat(scalar::kLogSqrt2);
  m = big ? m * splat(0.5f) : m;
  ef = __builtin_convertvector(big ? e + 1 : e, V);
  return m - splat(1.0f);
}
inline Vec<float> log_specials(Vec<float> y, Vec<float> r) {
  using V = Vec<float>;
  r = y == splat(__builtin_inff()) ? y : r;
  r = y == V{} ? splat(-__builtin_inff()) : r;
  return y < V{} ? reinterpret_cast<V>(Vec<int32_t>{} + 0x7fc00000) : r;
}

// log lane by lane: scalar::log_f32's steps on vectors, with its bits (float32 only). When every
// lane is a positive normal float, as nearly always, the steps for subnormal x and the special
// values are skipped: they do not change those lanes' bits (4M floats on two Intel AVX-512 cores:
// 0.83-0.90 ms -> 0.73-0.75).
inline Vec<float> log(Vec<float> x) {
  using V = Vec<float>;
  using VI = Vec<int32_t>;
  V e;
  if (all_lanes((x >= splat(1.17549435e-38f)) & (x < splat(__builtin_inff())))) {
    const VI bits = reinterpret_cast<VI>(x);
    const V f = log_split(bits, (bits >> 23) - 127, e);
    return scalar::log_reduced(f, e);
  }
  const VI subnormal = x < splat(1.17549435e-38f);
  const VI bits = reinterpret_cast<VI>(subnormal ? x * splat(8388608.0f) : x);
  const V f = log_split(bits, ((bits >> 23) & 0xff) - (subnormal ? 150 : 127), e);
  const V r = log_specials(x, scalar::log_reduced(f, e));
  return x != x ? x : r;
}

// log1p lane by lane: scalar::log1p_f32's steps on vectors, with its bits.
inline Vec<float> log1p(Vec<float> x) {
  using V = Vec<float>;
  using VI = Vec<int32_t>;
  const V one = splat(1.0f), u = one + x;
  const VI above = x > one;
  const V a = above ? x : one, b = above ? one : x;
  const V c = b - (u - a);
  const VI bits = reinterpret_cast<VI>(u);
  V e;
  const V f = log_split(bits, ((bits >> 23) & 0xff) - 127, e);
  const VI direct = (x >= splat(scalar::kLog1pLo)) & (x < splat(scalar::kLog1pHi));
  V r = log_specials(u,
                     scalar::log1p_reduced(direct ? x : f, direct ? V{} : e, direct ? V{} : c / u));
  r = x == V{} ? x : r;
  return x != x ? x : r;
}

// expm1 lane by lane: scalar::expm1_f32's steps on vectors, with its bits (z 2^n in one vscalefps
// with AVX-512, exact as the two halves are).
inline Vec<float> expm1(Vec<float> x) {
  using V = Vec<float>;
  using VI = Vec<int32_t>;
  const V lo = splat(scalar::kExpm1Lo), top = splat(scalar::kExpm1Hi);
  V xc = x < lo ? lo : x;
  xc = xc > top ? top : xc;
  V nb, n, rh, rl;
  scalar::expm1_reduction(xc, nb, n, rh, rl);
  const VI ni = reinterpret_cast<VI>(nb) - reinterpret_cast<VI>(splat(scalar::kExpShifter));
  const VI hundred = VI{} + 100;
  const V two_mn = reinterpret_cast<V>((127 - (ni < hundred ? ni : hundred)) << 23);
  const V z = scalar::expm1_reduced(rh, rl, two_mn);
#if defined(__AVX512F__)
  // (every lane masked in: g++ 12 warns that the unmasked form's pass-through is uninitialized)
  V y = reinterpret_cast<V>(_mm512_maskz_scalef_ps(
      static_cast<__mmask16>(0xffff), reinterpret_cast<__m512>(z), reinterpret_cast<__m512>(n)));
#else
  const VI n1 = ni / 2, n2 = ni - n1;
  V y = z * reinterpret_cast<V>((n1 + 127) << 23) * reinterpret_cast<V>((n2 + 127) << 23);
#endif
  y = x == V{} ? x : y;
  return x != x ? x : y;
}

// tanh lane by lane: scalar::tanh_f32's steps on vectors, both branches and a select, with its
// bits (p 2^n in one vscalefps with AVX-512). Its division is most of its time.
inline Vec<float> tanh(Vec<float> x) {
  using V = Vec<float>;
  using VU = Vec<uint32_t>;
  const VU sign = reinterpret_cast<VU>(x) & 0x80000000u;
  const V a = reinterpret_cast<V>(reinterpret_cast<VU>(x) ^ sign);
  const V small = scalar::tanh_small(a);
  V t = 2.0f * a;
  t = t > splat(scalar::kTanhTwiceMax) ? splat(scalar::kTanhTwiceMax) : t;
  V nb, n;
  const V p = scalar::exp_taylor(scalar::exp_reduction(t, nb, n));
#if defined(__AVX512F__)
  const V e = reinterpret_cast<V>(_mm512_maskz_scalef_ps(
      static_cast<__mmask16>(0xffff), reinterpret_cast<__m512>(p), reinterpret_cast<__m512>(n)));
#else
  const V e = p * reinterpret_cast<V>((reinterpret_cast<VU>(nb) << 23) + (127u << 23));
#endif
  const V r = a < splat(scalar::kTanhSmall) ? small : scalar::tanh_big(e);
  return reinterpret_cast<V>(reinterpret_cast<VU>(r) | sign);
}

// exp lane by lane: for float32 scalar::exp_f32 bit for bit when both are compiled alike (its
// clamp, scalar::exp_reduced, and p 2^n; test_float32_math compares the elementwise kernel's
// loops), exact 0 below -104, inf above 88.7, NaN stays NaN; for float64 std::exp per lane (float64
// is for tests and gradchecks). With AVX-512, 2^n is one vscalefps, rounded once as exp_f32's two
// exact halves are, and the selects after it two masks: 3.4-3.6 ns a 16-lane vector from L1 on an
// Intel AVX-512 core, against 4.9 for exp_f32's steps on vectors.
template <class T>
inline Vec<T> exp(Vec<T> x) {
  if constexpr (sizeof(T) == 4) {
    constexpr float kLo = -103.97208f;
#if defined(__AVX512F__)
    // Above 88.72283 (exp_f32's clamp) n is 128 and p > 1 up to 89 (this clamp), so p 2^n
    // overflows to inf as exp_f32's select gives; below kLo the mask gives 0. A NaN x comes out
    // as x itself, as from exp_f32 (a signaling NaN too, which the arithmetic would quiet).
    const Vec<float> lo = splat(kLo), top = splat(89.0f);
    Vec<float> xc = x < lo ? lo : x;
    xc = xc > top ? top : xc;
    Vec<float> n;
    const Vec<float> p = scalar::exp_reduced(xc, n);
    const __m512 xv = reinterpret_cast<__m512>(x);
    const __mmask16 keep = _mm512_cmp_ps_mask(xv, reinterpret_cast<__m512>(lo), _CMP_NLT_UQ);
    const __m512 y =
        _mm512_maskz_scalef_ps(keep, reinterpret_cast<__m512>(p), reinterpret_cast<__m512>(n));
    return reinterpret_cast<Vec<float>>(
        _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(xv, xv, _CMP_UNORD_Q), xv));
#else
    using VI = Vec<int32_t>;
    const Vec<float> lo = splat(kLo), hi = splat(88.72283f);
    const Vec<float> xc = x < lo ? lo : (x > hi ? hi : x);
    Vec<float> n;
    const Vec<float> p = scalar::exp_reduced(xc, n);
    const VI ni = __builtin_convertvector(n, VI);
    const VI n1 = ni / 2, n2 = ni - n1;
    const Vec<float> s1 = reinterpret_cast<Vec<float>>((n1 + 127) << 23);
    const Vec<float> s2 = reinterpret_cast<Vec<float>>((n2 + 127) << 23);
    Vec<float> y = p * s1 * s2;
    y = x < lo ? splat(0.0f) : y;
    y = x > hi ? splat(__builtin_inff()) : y;
    return x != x ? x : y;
#endif
  } else {
    Vec<T> y;
    for (int i = 0; i < kLanes<T>; ++i) y[i] = std::exp(x[i]);
    return y;
  }
}

namespace exp_detail {
// exp_nonpositive's lower bound: ln of the smallest normal float.
inline constexpr float kMin = -87.33654f;
// e^r on [-ln2/2, ln2/2]: a degree-6 minimax polynomial (relative error 1.7e-8 with these float
// coefficients, fitted by Lawson's algorithm).
inline Vec<float> exp_polynomial(Vec<float> r) {
  using V = Vec<float>;
  V p = r * splat(1.384365372e-03f) + splat(8.374155499e-03f);
  p = p * r + splat(4.166800156e-02f);
  p = p * r + splat(1.666643173e-01f);
  p = p * r + splat(4.999999404e-01f);
  p = p * r + splat(1.0f);
  return p * r + splat(1.0f);
}
}  // namespace exp_detail

// e^x for the arguments of a softmax, x <= 0 (s - max, s - logsumexp; a rounding-level
// positive x is fine too): where float32 results would be subnormal (x < -87.34, ln of the
// smallest normal float: < 1.2e-38 next to a row sum of at least 1) the result is 0, and so for
// -inf (masked scores). Within 1.05 ulp of exp on [-87.34, 0], 1.35 where the build has no FMA
// (every float checked against a double exp; the test samples 30000). The online softmax runs it on
// every score in the forward and again in the backward, so it is written for few vector
// operations: scalar::exp_reduction, whose n is shifted from nb's bits into the exponent field
// of 2^n without a conversion, and exp_detail::exp_polynomial (degree 6; exp keeps its degree-7
// Taylor series). Three vector operations fewer than exp's algorithm: the exp pass 1.10-1.13x as
// fast on AVX2 code, 1.35-1.41x with AVX-512 (bench_softmax_exp, Zen 4). float64: std::exp.
#if defined(__AVX512F__)
template <class T>
inline Vec<T> exp_nonpositive(Vec<T> x) {
  if constexpr (sizeof(T) == 4) {
    using V = Vec<float>;
    V nb, n;
    const V p = exp_detail::exp_polynomial(scalar::exp_reduction(x, nb, n));
    // p 2^n in one vscalefps, which zeroes the lanes below -87.34 (not NaN) by its mask: no
    // clamp, no blend.
    const __mmask16 keep = _mm512_cmp_ps_mask(x, splat(exp_detail::kMin), _CMP_NLT_UQ);
    return reinterpret_cast<V>(
        _mm512_maskz_scalef_ps(keep, reinterpret_cast<__m512>(p), reinterpret_cast<__m512>(n)));
  } else {
    return exp<T>(x);
  }
}
#else
// Without AVX-512 it also comes in two halves, exp_nonpositive_finish(exp_nonpositive_reduce(x,
// scale), scale): the reduction, which returns r and sets scale (2^n, or 0 below -87.34), and the
// polynomial times the scale. The kernels run them as two passes over a row of scores, with r and
// the scales in memory between them (sdpa_tiles::exp_row): each half is a chain of about half the
// dependent operations, so the out-of-order core, which holds a fixed number of operations
// waiting on their inputs, keeps more of the row's vectors in flight. One pass ran at 10.0-10.4
// cycles per 8-lane vector on Zen 4, bound by that rather than by the operations issued (an
// Estrin-ordered polynomial, a shorter chain of more operations, was no faster); two at 9.5. (With
// AVX-512 the passes' extra stores and loads of 64-byte vectors cost more than they save: 21
// cycles per 16-lane vector against 12.8.)
template <class T>
inline Vec<T> exp_nonpositive_reduce(Vec<T> x, Vec<T>& scale) {
  if constexpr (sizeof(T) == 4) {
    using V = Vec<float>;
    const V lo = splat(exp_detail::kMin);
    const auto below = x < lo;  // not NaN: a NaN x gives a NaN r
    V nb, n;
    const V r = scalar::exp_reduction(below ? lo : x, nb, n);
    // n << 23 is the low bits of nb shifted (the shifter's own bits shift out); + 127 << 23
    // makes it 2^n's bit pattern (unsigned: the sums wrap as they should), n >= -126 after the
    // clamp.
    using VU = Vec<uint32_t>;
    const VU two_n = (reinterpret_cast<VU>(nb) << 23) + (127u << 23);
    scale = below ? splat(0.0f) : reinterpret_cast<V>(two_n);
    return r;
  } else {
    scale = Vec<T>{};
    return x;
  }
}

template <class T>
inline Vec<T> exp_nonpositive_finish(Vec<T> r, Vec<T> scale) {
  if constexpr (sizeof(T) == 4) {
    return exp_detail::exp_polynomial(r) * scale;
  } else {
    (void)scale;
    return exp<T>(r);
  }
}

template <class T>
inline Vec<T> exp_nonpositive(Vec<T> x) {
  Vec<T> scale;
  const Vec<T> r = exp_nonpositive_reduce<T>(x, scale);
  return exp_nonpositive_finish<T>(r, scale);
}
#endif

}  // namespace tg::cpu::simd

// scalar::exp_any, log_any, log1p_any, expm1_any, tanh_any and sqrt_any of a vector: simd's
// functions, so
// that the scalar functors' expressions run a vector at a time with the same bits as lane by lane.
template <>
struct tg::scalar::VectorMath<tg::cpu::simd::Vec<float>> {
  using V = tg::cpu::simd::Vec<float>;
  static V exp(V x) { return tg::cpu::simd::exp<float>(x); }
  static V log(V x) { return tg::cpu::simd::log(x); }
  static V log1p(V x) { return tg::cpu::simd::log1p(x); }
  static V expm1(V x) { return tg::cpu::simd::expm1(x); }
  static V tanh(V x) { return tg::cpu::simd::tanh(x); }
  static V sqrt(V x) { return tg::cpu::simd::sqrt<float>(x); }
};
template <>
struct tg::scalar::VectorMath<tg::cpu::simd::Vec<double>> {
  using V = tg::cpu::simd::Vec<double>;
  static V sqrt(V x) { return tg::cpu::simd::sqrt<double>(x); }
};
