// The loops of the elementwise kernels (cpu_elementwise.cpp, cpu_binary.cpp) over strided CPU
// views: unit-stride runs given to a loop the compiler vectorizes (or to a functor on whole
// vectors), transposed operands read a tile at a time, 16-bit runs a block at a time through
// float. Templates for those two files only.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include <immintrin.h>

#include "backends/backend.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/strided_loop.h"
#include "core/half.h"

namespace tg::cpu::elementwise_loops {

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
    if (!bs) std::fill(yb, yb + std::min(n, kHalfBlock), static_cast<float>(*y));
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

}  // namespace tg::cpu::elementwise_loops
