// Row-wise kernels: softmax, cross-entropy forward and backward, and the row gather and
// scatter-add of embedding forward and backward.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/half_kernels.h"
#include "backends/scalar_ops.h"

namespace tg::cpu {

namespace {
// log(sum(exp(x - m))) + m over a row, m its max (0 when not finite): a row of -inf gives
// NaN, as the composed formula does.
template <class T>
T row_logsumexp(const T* x, int64_t c) {
  T m = -INFINITY;
  for (int64_t i = 0; i < c; ++i) m = x[i] > m ? x[i] : m;
  if (!std::isfinite(m)) m = 0;
  T sum = 0;
  for (int64_t i = 0; i < c; ++i) sum += scalar::exp_any(x[i] - m);
  return std::log(sum) + m;
}
}  // namespace

void CpuBackend::softmax(const View& x, const View& out, bool log) {
  if (half_kernels::softmax(*this, kCPU, x, out, log)) return;
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    const int64_t c = x.sizes.back(), rows = c ? x.numel() / c : 0;
    const T* xp = static_cast<const T*>(x.data);
    T* op = static_cast<T*>(out.data);
#pragma omp parallel for schedule(static) if (rows * c > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = xp + r * c;
      T* o = op + r * c;
      const T lse = row_logsumexp(xr, c);
      if (log) {
        for (int64_t i = 0; i < c; ++i) o[i] = xr[i] - lse;
      } else {
        for (int64_t i = 0; i < c; ++i) o[i] = scalar::exp_any(xr[i] - lse);
      }
    }
  });
}

bool CpuBackend::cross_entropy_forward(const View& logits, const View& targets,
                                       int64_t ignore_index, const View& loss, const View& lse) {
  dispatch_float(logits.dtype, [&](auto t) {
    using T = decltype(t);
    const int64_t c = logits.sizes.back(), rows = loss.numel();
    const T* xp = static_cast<const T*>(logits.data);
    const int64_t* tp = static_cast<const int64_t*>(targets.data);
    T* lp = static_cast<T*>(loss.data);
    T* sp = static_cast<T*>(lse.data);
#pragma omp parallel for schedule(static) if (rows * c > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = xp + r * c;
      sp[r] = row_logsumexp(xr, c);
      lp[r] = tp[r] == ignore_index ? T(0) : sp[r] - xr[tp[r]];
    }
  });
  return true;
}

bool CpuBackend::cross_entropy_backward(const View& dloss, const View& logits, const View& targets,
                                        const View& lse, int64_t ignore_index,
                                        const View& dlogits) {
  dispatch_float(logits.dtype, [&](auto t) {
    using T = decltype(t);
    const int64_t c = logits.sizes.back(), rows = dloss.numel();
    const T* gp = static_cast<const T*>(dloss.data);
    const T* xp = static_cast<const T*>(logits.data);
    const int64_t* tp = static_cast<const int64_t*>(targets.data);
    const T* sp = static_cast<const T*>(lse.data);
    T* dp = static_cast<T*>(dlogits.data);
#pragma omp parallel for schedule(static) if (rows * c > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      const T* __restrict xr = xp + r * c;
      T* __restrict d = dp + r * c;
      if (tp[r] == ignore_index) {
        std::fill(d, d + c, T(0));
        continue;
      }
      const T g = gp[r], l = sp[r];
      for (int64_t i = 0; i < c; ++i) d[i] = g * scalar::exp_any(xr[i] - l);
      d[tp[r]] -= g;
    }
  });
  return true;
}

void CpuBackend::gather_rows(const View& weight, const View& ids, const View& out) {
  const int64_t n = ids.numel(), d = weight.sizes[1];
  const int64_t* id = static_cast<const int64_t*>(ids.data);
  const size_t row_bytes = d * dtype_size(weight.dtype);
  const char* w = static_cast<const char*>(weight.data);
  char* o = static_cast<char*>(out.data);
#pragma omp parallel for schedule(static) if (n * d > 32768)
  for (int64_t i = 0; i < n; ++i) std::memcpy(o + i * row_bytes, w + id[i] * row_bytes, row_bytes);
}

void CpuBackend::scatter_rows(const View& src, const View& ids, const View& dst) {
  const int64_t n = ids.numel(), d = dst.sizes[1];
  const int64_t* id = static_cast<const int64_t*>(ids.data);
  const size_t row_bytes = d * dtype_size(dst.dtype);
  const char* s = static_cast<const char*>(src.data);
  char* o = static_cast<char*>(dst.data);
#pragma omp parallel for schedule(static) if (n * d > 32768)
  for (int64_t i = 0; i < n; ++i) std::memcpy(o + id[i] * row_bytes, s + i * row_bytes, row_bytes);
}

// Parallel over columns, rows in index order: no races and a fixed summation order.
void CpuBackend::scatter_add_rows(const View& grad, const View& ids, const View& grad_weight) {
  if (half_kernels::scatter_add_rows(*this, kCPU, grad, ids, grad_weight)) return;
  dispatch_float(grad.dtype, [&](auto t) {
    using T = decltype(t);
    const int64_t n = ids.numel(), d = grad_weight.sizes[1];
    const int64_t* id = static_cast<const int64_t*>(ids.data);
    const T* g = static_cast<const T*>(grad.data);
    T* gw = static_cast<T*>(grad_weight.data);
    constexpr int64_t kCols = 64;
    const int64_t blocks = (d + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (n * d > 32768 && blocks > 1)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kCols, c1 = c0 + kCols < d ? c0 + kCols : d;
      for (int64_t i = 0; i < n; ++i) {
        T* dst = gw + id[i] * d;
        const T* src = g + i * d;
        for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
      }
    }
  });
}

}  // namespace tg::cpu
