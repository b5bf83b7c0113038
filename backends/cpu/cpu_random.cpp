// Philox-driven kernels: uniform, normal, dropout. Position n of the stream is a pure
// function of (seed, offset + n), so any split of the loop gives the same values; the
// uniforms are drawn a chunk at a time by philox_uniforms (each Philox block computed once,
// several at a time in vector lanes).
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/philox_fill.h"
#include "core/philox.h"

namespace tg::cpu {

namespace {
constexpr int64_t kChunk = 1024;  // elements a thread draws and writes at a time

// For each chunk [i0, i0 + n) of the n_total elements (in parallel when there are many):
// body(i0, n, u) with u holding the `per` * n uniforms at stream positions
// offset + per * i0, ...
template <class F>
void by_chunks(int64_t n_total, uint64_t seed, uint64_t offset, int per, F body) {
  const int64_t chunks = (n_total + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n_total > 16384)
  for (int64_t c = 0; c < chunks; ++c) {
    float u[2 * kChunk];
    const int64_t i0 = c * kChunk, n = std::min(kChunk, n_total - i0);
    philox_uniforms(seed, offset + static_cast<uint64_t>(per * i0), per * n, u);
    body(i0, n, u);
  }
}
}  // namespace

void CpuBackend::rand_uniform(const View& dst, uint64_t seed, uint64_t offset) {
  dispatch_floating(dst.dtype, [&](auto t) {
    using T = decltype(t);
    T* p = static_cast<T*>(dst.data);
    by_chunks(dst.numel(), seed, offset, 1, [&](int64_t i0, int64_t n, const float* u) {
      for (int64_t i = 0; i < n; ++i) p[i0 + i] = static_cast<T>(u[i]);
    });
  });
}

void CpuBackend::rand_normal(const View& dst, uint64_t seed, uint64_t offset) {
  dispatch_floating(dst.dtype, [&](auto t) {
    using T = decltype(t);
    T* p = static_cast<T*>(dst.data);
    by_chunks(dst.numel(), seed, offset, 2, [&](int64_t i0, int64_t n, const float* u) {
      for (int64_t i = 0; i < n; ++i)
        p[i0 + i] = static_cast<T>(philox_box_muller(u[2 * i], u[2 * i + 1]));
    });
  });
}

void CpuBackend::dropout(const View& x, const View& out, double p, uint64_t seed, uint64_t offset) {
  dispatch_floating(out.dtype, [&](auto t) {
    using T = decltype(t);
    using C = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data);
    T* op = static_cast<T*>(out.data);
    const float pf = static_cast<float>(p);
    const C scale = static_cast<C>(1.0 / (1.0 - p));
    by_chunks(out.numel(), seed, offset, 1, [&](int64_t i0, int64_t n, const float* u) {
      for (int64_t i = i0; i < i0 + n; ++i)
        op[i] = u[i - i0] > pf ? static_cast<T>(C(xp[i]) * scale) : T(0);
    });
  });
}

}  // namespace tg::cpu
