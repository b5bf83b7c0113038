// Philox-driven kernels: uniform, normal, dropout. Position n of the stream is a pure
// function of (seed, offset + n), so any split of the loop gives the same values.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "core/philox.h"

namespace tg::cpu {

namespace {
// dst[i] = value(i) for the row-major index i of a contiguous floating dst.
template <class F>
void generate(const View& dst, F value) {
  dispatch_floating(dst.dtype, [&](auto t) {
    using T = decltype(t);
    T* p = static_cast<T*>(dst.data);
    const int64_t n = dst.numel();
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(value(i));
  });
}
}  // namespace

void CpuBackend::rand_uniform(const View& dst, uint64_t seed, uint64_t offset) {
  generate(dst, [=](int64_t i) { return philox_uniform(seed, offset + i); });
}

void CpuBackend::rand_normal(const View& dst, uint64_t seed, uint64_t offset) {
  generate(dst, [=](int64_t i) { return philox_normal(seed, offset, i); });
}

void CpuBackend::dropout(const View& x, const View& out, double p, uint64_t seed, uint64_t offset) {
  dispatch_floating(out.dtype, [&](auto t) {
    using T = decltype(t);
    using C = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data);
    T* op = static_cast<T*>(out.data);
    const float pf = static_cast<float>(p);
    const C scale = static_cast<C>(1.0 / (1.0 - p));
    const int64_t n = out.numel();
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i)
      op[i] = philox_uniform(seed, offset + i) > pf ? static_cast<T>(C(xp[i]) * scale) : T(0);
  });
}

}  // namespace tg::cpu
