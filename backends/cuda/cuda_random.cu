// Philox-driven kernels: uniform, normal, dropout. Element n reads stream position
// offset + n through the same philox_uniform as the CPU, so the values are bit-identical
// across devices (DESIGN.md §5).
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/dispatch.h"
#include "core/philox.h"

namespace tg::cuda {
namespace {

template <class T>
__global__ void uniform_kernel(T* out, uint64_t seed, uint64_t offset, int64_t n) {
  TG_GRID_STRIDE(i, n) { out[i] = static_cast<T>(philox_uniform(seed, offset + i)); }
}

// Box-Muller in double, as on the CPU: element i uses positions 2i and 2i+1.
template <class T>
__global__ void normal_kernel(T* out, uint64_t seed, uint64_t offset, int64_t n) {
  TG_GRID_STRIDE(i, n) {
    const double u1 = philox_uniform(seed, offset + 2 * i);
    const double u2 = philox_uniform(seed, offset + 2 * i + 1);
    out[i] = static_cast<T>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  }
}

template <class T>
__global__ void dropout_kernel(const T* x, T* out, float p, T scale, uint64_t seed, uint64_t offset,
                               int64_t n) {
  TG_GRID_STRIDE(i, n) { out[i] = philox_uniform(seed, offset + i) > p ? x[i] * scale : T(0); }
}

}  // namespace

void CudaBackend::rand_uniform(const View& dst, uint64_t seed, uint64_t offset) {
  cudaStream_t s = enter(device);
  const int64_t n = dst.numel();
  if (!n) return;
  dispatch_float(dst.dtype, [&](auto t) {
    using T = decltype(t);
    uniform_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(dst.data), seed, offset, n);
  });
  check_launch("rand_uniform kernel");
}

void CudaBackend::rand_normal(const View& dst, uint64_t seed, uint64_t offset) {
  cudaStream_t s = enter(device);
  const int64_t n = dst.numel();
  if (!n) return;
  dispatch_float(dst.dtype, [&](auto t) {
    using T = decltype(t);
    normal_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(dst.data), seed, offset, n);
  });
  check_launch("rand_normal kernel");
}

void CudaBackend::dropout(const View& x, const View& out, double p, uint64_t seed,
                          uint64_t offset) {
  cudaStream_t s = enter(device);
  const int64_t n = out.numel();
  if (!n) return;
  dispatch_float(out.dtype, [&](auto t) {
    using T = decltype(t);
    dropout_kernel<<<grid_for(n), kThreads, 0, s>>>(
        static_cast<const T*>(x.data), static_cast<T*>(out.data), static_cast<float>(p),
        static_cast<T>(1.0 / (1.0 - p)), seed, offset, n);
  });
  check_launch("dropout kernel");
}

}  // namespace tg::cuda
