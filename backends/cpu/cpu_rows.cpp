// Row gather and its scatter-add (embedding forward and backward).
#include <cstring>

#include "backends/cpu/cpu_backend.h"

namespace tg::cpu {

void CpuBackend::gather_rows(const View& weight, const View& ids, const View& out) {
  const int64_t n = ids.numel(), d = weight.sizes[1];
  const int64_t* id = static_cast<const int64_t*>(ids.data);
  const size_t row_bytes = d * dtype_size(weight.dtype);
  const char* w = static_cast<const char*>(weight.data);
  char* o = static_cast<char*>(out.data);
#pragma omp parallel for schedule(static) if (n * d > 32768)
  for (int64_t i = 0; i < n; ++i) std::memcpy(o + i * row_bytes, w + id[i] * row_bytes, row_bytes);
}

// Parallel over columns, rows in index order: no races and a fixed summation order.
void CpuBackend::scatter_add_rows(const View& grad, const View& ids, const View& grad_weight) {
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
