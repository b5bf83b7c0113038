// Philox-driven kernels: uniform, normal, dropout. Element n reads stream position
// offset + n through the same philox_uniform as the CPU, so the values are bit-identical
// across devices (DESIGN.md §5).
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/dispatch.h"
#include "core/philox.h"

namespace tg::cuda {
namespace {

// out[i] = value(i) for the row-major index i of a contiguous out.
template <class T, class F>
__global__ void generate_kernel(T* out, F value, int64_t n) {
  TG_GRID_STRIDE(i, n) { out[i] = static_cast<T>(value(i)); }
}

struct Uniform {
  uint64_t seed, offset;
  __device__ float operator()(int64_t i) const { return philox_uniform(seed, offset + i); }
};
struct Normal {
  uint64_t seed, offset;
  __device__ double operator()(int64_t i) const { return philox_normal(seed, offset, i); }
};

template <class F>
void generate(int device, const View& dst, F value, const char* what) {
  cudaStream_t s = enter(device);
  const int64_t n = dst.numel();
  if (!n) return;
  dispatch_floating(dst.dtype, [&](auto t) {
    using T = decltype(t);
    generate_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(dst.data), value, n);
  });
  check_launch(what);
}

template <class T>
__global__ void dropout_kernel(const T* x, T* out, float p, compute_t<T> scale, uint64_t seed,
                               uint64_t offset, int64_t n) {
  TG_GRID_STRIDE(i, n) {
    out[i] =
        philox_uniform(seed, offset + i) > p ? static_cast<T>(compute_t<T>(x[i]) * scale) : T(0);
  }
}

}  // namespace

void CudaBackend::rand_uniform(const View& dst, uint64_t seed, uint64_t offset) {
  generate(device, dst, Uniform{seed, offset}, "rand_uniform kernel");
}

void CudaBackend::rand_normal(const View& dst, uint64_t seed, uint64_t offset) {
  generate(device, dst, Normal{seed, offset}, "rand_normal kernel");
}

void CudaBackend::dropout(const View& x, const View& out, double p, uint64_t seed,
                          uint64_t offset) {
  cudaStream_t s = enter(device);
  const int64_t n = out.numel();
  if (!n) return;
  dispatch_floating(out.dtype, [&](auto t) {
    using T = decltype(t);
    dropout_kernel<<<grid_for(n), kThreads, 0, s>>>(
        static_cast<const T*>(x.data), static_cast<T*>(out.data), static_cast<float>(p),
        static_cast<compute_t<T>>(1.0 / (1.0 - p)), seed, offset, n);
  });
  check_launch("dropout kernel");
}

}  // namespace tg::cuda
