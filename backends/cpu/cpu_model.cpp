// Fused kernels of the transformer's own ops: RMSNorm forward and backward, RoPE, SwiGLU,
// AdamW and the sum of squares of gradient clipping.
// Each replaces a chain of elementwise passes by one pass over memory.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "backends/dispatch.h"
#include "backends/fused_math.h"
#include "backends/half_kernels.h"

namespace tg::cpu {

namespace {
constexpr int64_t kParallelMin = 32768;  // elements below which threads cost more than they save
}

bool CpuBackend::rms_norm_forward(const View& x, const View& w, double eps, const View& y,
                                  const View& rstd) {
  if (half_kernels::rms_norm_forward(*this, kCPU, x, w, eps, y, rstd)) return true;
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    const int64_t d = x.sizes.back(), rows = d ? x.numel() / d : 0;
    const T* xp = static_cast<const T*>(x.data);
    const T* wp = static_cast<const T*>(w.data);
    T* yp = static_cast<T*>(y.data);
    T* rp = static_cast<T*>(rstd.data);
#pragma omp parallel for schedule(static) if (rows * d > kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = xp + r * d;
      double ss = 0;  // vector lanes of partial sums: a fixed order, the same on any thread count
#pragma omp simd reduction(+ : ss)
      for (int64_t c = 0; c < d; ++c) ss += static_cast<double>(xr[c]) * xr[c];
      const T rs = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
      rp[r] = rs;
      T* yr = yp + r * d;
      if (wp) {
        for (int64_t c = 0; c < d; ++c) yr[c] = xr[c] * rs * wp[c];
      } else {
        for (int64_t c = 0; c < d; ++c) yr[c] = xr[c] * rs;
      }
    }
  });
  return true;
}

bool CpuBackend::rms_norm_backward(const View& dy, const View& x, const View& w, const View& rstd,
                                   const View& dx, const View& dw) {
  if (half_kernels::rms_norm_backward(*this, kCPU, dy, x, w, rstd, dx, dw)) return true;
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    const int64_t d = x.sizes.back(), rows = d ? x.numel() / d : 0;
    const T* gp = static_cast<const T*>(dy.data);
    const T* xp = static_cast<const T*>(x.data);
    const T* wp = static_cast<const T*>(w.data);
    const T* rp = static_cast<const T*>(rstd.data);
    T* dxp = static_cast<T*>(dx.data);
    // dw's column sums come from the same pass as dx, while a row of dy and x is in cache: each
    // of at most kChunks fixed runs of rows sums its columns in row order, in its own row of
    // partial sums, and the runs' sums are added in run order after. The runs depend on the
    // shape alone, so dw is the same for any thread count. (It was a second pass over dy and x,
    // a block of columns a thread down every row: 60% of the backward's samples at the reference
    // model's (2048, 256) on two Intel AVX-512 cores, 0.47-0.49 ms a call against 0.26-0.27 now.)
    constexpr int64_t kChunks = 64;
    const int64_t chunks = std::min(rows, kChunks);
    const int64_t chunk_rows = chunks ? (rows + chunks - 1) / chunks : 0;
    std::vector<double> partial(dw.data ? static_cast<size_t>(chunks * d) : 0, 0.0);
#pragma omp parallel for schedule(static) if (rows * d > kParallelMin && chunks > 1)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      double* acc = dw.data ? partial.data() + ch * d : nullptr;
      for (int64_t r = ch * chunk_rows; r < std::min(rows, (ch + 1) * chunk_rows); ++r) {
        const T* g = gp + r * d;
        const T* xr = xp + r * d;
        double dot = 0;  // the weight's factor is exactly 1 without one (the loop is unswitched)
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < d; ++c)
          dot += static_cast<double>(g[c]) * (wp ? wp[c] : T(1)) * xr[c];
        const T rs = rp[r];
        const T k =
            static_cast<T>(static_cast<double>(rs) * rs * rs * dot / static_cast<double>(d));
        T* o = dxp + r * d;
        if (wp) {
          for (int64_t c = 0; c < d; ++c) o[c] = rs * g[c] * wp[c] - k * xr[c];
        } else {
          for (int64_t c = 0; c < d; ++c) o[c] = rs * g[c] - k * xr[c];
        }
        if (acc) {
          const double rsd = rs;
          for (int64_t c = 0; c < d; ++c) acc[c] += static_cast<double>(g[c]) * xr[c] * rsd;
        }
      }
    }
    if (!dw.data) return;
    T* dwp = static_cast<T*>(dw.data);
#pragma omp parallel for schedule(static) if (chunks * d > kParallelMin)
    for (int64_t c = 0; c < d; ++c) {
      double sum = 0;
      for (int64_t ch = 0; ch < chunks; ++ch) sum += partial[ch * d + c];
      dwp[c] = static_cast<T>(sum);
    }
  });
  return true;
}

bool CpuBackend::rope(const View& x, const View& cos, const View& sin, int64_t seq_dim,
                      const View& out) {
  // 16-bit x is read and written in place, each pair rotated in float32 against the float32
  // tables: no float32 copies of the tensors.
  dispatch_floating(x.dtype, [&](auto t) {
    using T = decltype(t);
    using C = compute_t<T>;
    const int64_t n = static_cast<int64_t>(x.sizes.size());
    const int64_t d = x.sizes.back(), half = d / 2, rows = d ? x.numel() / d : 0;
    const int64_t len = x.sizes[seq_dim];
    int64_t per_pos = 1;  // rows between consecutive positions
    for (int64_t i = seq_dim + 1; i < n - 1; ++i) per_pos *= x.sizes[i];
    const T* xp = static_cast<const T*>(x.data);
    const C* cp = static_cast<const C*>(cos.data);
    const C* sp = static_cast<const C*>(sin.data);
    T* op = static_cast<T*>(out.data);
#pragma omp parallel for schedule(static) if (rows * d > kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pos = (r / per_pos) % len;
      int64_t at = 0;  // x's rows may have any strides (a head view of a packed projection)
      for (int64_t k = n - 2, rest = r; k >= 0; --k) {
        at += (rest % x.sizes[k]) * x.strides[k];
        rest /= x.sizes[k];
      }
      const T* xr = xp + at;
      const C* c = cp + pos * half;
      const C* s = sp + pos * half;
      T* o = op + r * d;
      for (int64_t i = 0; i < half; ++i) {
        C even, odd;
        fused::rope_rotate(C(xr[2 * i]), C(xr[2 * i + 1]), c[i], s[i], even, odd);
        o[2 * i] = T(even);
        o[2 * i + 1] = T(odd);
      }
    }
  });
  return true;
}

namespace {

// Rows of a 16-bit tensor are widened into float32 row buffers (one set per thread) so that
// the float32 loops vectorize, and the results rounded back once; float32 and float64 rows
// are used in place.
template <class T>
class RowStage {
 public:
  using C = compute_t<T>;
  explicit RowStage(int64_t n) : buf_(is_half_v<T> ? static_cast<size_t>(n) : 0) {}
  // The n values at src as C, staged at buf_[at, at + n) when T is 16-bit.
  const C* in(const T* src, int64_t n, int64_t at) {
    if constexpr (!is_half_v<T>) {
      return src;
    } else {
      C* d = buf_.data() + at;
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<C>(src[i]);
      return d;
    }
  }
  // Where a kernel writes n results bound for dst; done() rounds them into dst.
  C* out(T* dst, int64_t at) {
    if constexpr (!is_half_v<T>) {
      return dst;
    } else {
      (void)dst;
      return buf_.data() + at;
    }
  }
  void done(const C* staged, T* dst, int64_t n) {
    if constexpr (is_half_v<T>) {
      for (int64_t i = 0; i < n; ++i) dst[i] = T(staged[i]);
    } else {
      (void)staged, (void)dst, (void)n;
    }
  }

 private:
  std::vector<C> buf_;
};

// SwiGLU's rows: float32 a vector at a time through the same formulas (fused_math.h; their exp is
// simd::exp, scalar::VectorMath: the same bits), then lane by lane for the rest. The reference
// model's (2048, 2 x 768) on two Intel AVX-512 cores: forward 0.54 -> 0.46-0.50 ms, backward
// 0.68 -> 0.62-0.64; the training step's eight calls 11.2-11.9 -> 9.3-9.9 ms.
template <class C>
void swiglu_row(const C* __restrict gate, const C* __restrict up, C* __restrict o, int64_t f) {
  int64_t c = 0;
  if constexpr (std::is_same_v<C, float>) {
    for (; c + simd::kLanes<C> <= f; c += simd::kLanes<C>)
      simd::store(o + c, fused::swiglu(simd::load(gate + c), simd::load(up + c)));
  }
  for (; c < f; ++c) o[c] = fused::swiglu(gate[c], up[c]);
}

template <class C>
void swiglu_grad_row(const C* __restrict gate, const C* __restrict up, const C* __restrict g,
                     C* __restrict dgate, C* __restrict dup, int64_t f) {
  int64_t c = 0;
  if constexpr (std::is_same_v<C, float>) {
    for (; c + simd::kLanes<C> <= f; c += simd::kLanes<C>) {
      simd::Vec<C> dg, du;
      fused::swiglu_grad(simd::load(gate + c), simd::load(up + c), simd::load(g + c), dg, du);
      simd::store(dgate + c, dg);
      simd::store(dup + c, du);
    }
  }
  for (; c < f; ++c) fused::swiglu_grad(gate[c], up[c], g[c], dgate[c], dup[c]);
}

}  // namespace

bool CpuBackend::swiglu_forward(const View& x, const View& out) {
  dispatch_floating(x.dtype, [&](auto t) {
    using T = decltype(t);
    const int64_t f = out.sizes.back(), rows = f ? out.numel() / f : 0;
    const T* xp = static_cast<const T*>(x.data);
    T* op = static_cast<T*>(out.data);
#pragma omp parallel if (rows * f > kParallelMin)
    {
      RowStage<T> stage(3 * f);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const auto* gate = stage.in(xp + r * 2 * f, 2 * f, 0);
        auto* o = stage.out(op + r * f, 2 * f);
        swiglu_row(gate, gate + f, o, f);
        stage.done(o, op + r * f, f);
      }
    }
  });
  return true;
}

bool CpuBackend::swiglu_backward(const View& dout, const View& x, const View& dx) {
  dispatch_floating(x.dtype, [&](auto t) {
    using T = decltype(t);
    const int64_t f = dout.sizes.back(), rows = f ? dout.numel() / f : 0;
    const T* gp = static_cast<const T*>(dout.data);
    const T* xp = static_cast<const T*>(x.data);
    T* dp = static_cast<T*>(dx.data);
#pragma omp parallel if (rows * f > kParallelMin)
    {
      RowStage<T> stage(5 * f);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const auto* gate = stage.in(xp + r * 2 * f, 2 * f, 0);
        const auto* g = stage.in(gp + r * f, f, 2 * f);
        auto* d = stage.out(dp + r * 2 * f, 3 * f);
        swiglu_grad_row(gate, gate + f, g, d, d + f, f);
        stage.done(d, dp + r * 2 * f, 2 * f);
      }
    }
  });
  return true;
}

bool CpuBackend::adamw_step(const View& p, const View& g, const View& m, const View& v,
                            const AdamWStep& s) {
  if (half_kernels::adamw_step(*this, kCPU, p, g, m, v, s)) return true;
  dispatch_float(p.dtype, [&](auto t) {
    using T = decltype(t);
    const int64_t n = p.numel();
    T* pp = static_cast<T*>(p.data);
    const T* gp = static_cast<const T*>(g.data);
    T* mp = static_cast<T*>(m.data);
    T* vp = static_cast<T*>(v.data);
    const fused::AdamWConstants<T> c(s);
    // Whole vectors through the formula (the loop of scalars was not vectorized: std::sqrt may
    // set errno, and the stores might alias the constants; the reference model's 27 updates a
    // step took 5.2-6.1 ms), the last partial vector too, padded with zeros, so that every
    // element takes the same instructions.
    using V = simd::Vec<T>;
    constexpr int64_t W = simd::kLanes<T>;
    const auto update = [&](T* p0, const T* g0, T* m0, T* v0) {
      V pv = simd::load(p0), mv = simd::load(m0), vv = simd::load(v0);
      fused::adamw_update(pv, simd::load(g0), mv, vv, c);
      simd::store(p0, pv);
      simd::store(m0, mv);
      simd::store(v0, vv);
    };
    const int64_t whole = n / W * W;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < whole; i += W) update(pp + i, gp + i, mp + i, vp + i);
    if (whole < n) {
      const int64_t r = n - whole;
      T tp[W] = {}, tg[W] = {}, tm[W] = {}, tv[W] = {};
      std::copy(pp + whole, pp + n, tp);
      std::copy(gp + whole, gp + n, tg);
      std::copy(mp + whole, mp + n, tm);
      std::copy(vp + whole, vp + n, tv);
      update(tp, tg, tm, tv);
      std::copy(tp, tp + r, pp + whole);
      std::copy(tm, tm + r, mp + whole);
      std::copy(tv, tv + r, vp + whole);
    }
  });
  return true;
}

bool CpuBackend::sum_squares(const View& x, const View& acc) {
  dispatch_floating(x.dtype, [&](auto t) {
    using T = decltype(t);
    // Fixed chunks summed in chunk order: the same result on any number of threads.
    constexpr int64_t kChunk = 16384;
    const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
    const T* xp = static_cast<const T*>(x.data);
    std::vector<double> part(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t end = std::min(n, (c + 1) * kChunk);
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = c * kChunk; i < end; ++i) {
        const double v = static_cast<double>(static_cast<compute_t<T>>(xp[i]));
        s += v * v;
      }
      part[static_cast<size_t>(c)] = s;
    }
    double total = 0;
    for (double s : part) total += s;
    *static_cast<double*>(acc.data) += total;
  });
  return true;
}

}  // namespace tg::cpu
