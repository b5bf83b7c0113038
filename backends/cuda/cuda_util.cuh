// What every CUDA kernel file shares: error checks that throw tg::Error with CUDA's own
// message, the per-device stream and cuBLAS handle, launch sizes, and the offset calculator
// that turns a linear element index into per-operand offsets of a strided view.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>

#include "backends/backend.h"
#include "backends/strided_coalesce.h"
#include "core/error.h"

namespace tg::cuda {

// Throws "[cuda] <what>: <CUDA's error string> (<error name>)" unless e == cudaSuccess.
void check(cudaError_t e, const char* what);
void check_cublas(cublasStatus_t s, const char* what);
// After a launch: a bad configuration shows up here, a fault in the kernel at the next sync.
void check_launch(const char* kernel);

#define TG_CUDA(call) ::tg::cuda::check((call), #call)

// Makes `device` current and returns its stream; every kernel of that device runs on it, so
// kernels, copies and the caching allocator's reuse of freed blocks are ordered.
cudaStream_t enter(int device);
cublasHandle_t cublas_handle(int device);

// Scratch device memory for one kernel call, from the caching allocator; freed (back to the
// cache, stream-ordered) when it goes out of scope.
class Scratch {
 public:
  Scratch(size_t bytes, int device);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_;
  size_t bytes_;
  int device_;
};

constexpr int kThreads = 256;
// Blocks for a grid-stride loop over n items: enough to fill the device, never more than
// the items need.
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  const int64_t cap = 132 * 16;  // a few waves on the largest current chips
  if (blocks > cap) blocks = cap;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

constexpr int kMaxDims = 10;

// Offsets of N operands for a linear (row-major) index into a coalesced index space.
template <int N>
struct Offsets {
  int nd = 0;
  bool contiguous = false;  // one dim with unit stride for every operand: offset == index
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  __device__ __forceinline__ void at(int64_t linear, int64_t (&off)[N]) const {
    if (contiguous) {
      for (int k = 0; k < N; ++k) off[k] = linear;
      return;
    }
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
  }
};

template <int N>
Offsets<N> make_offsets(const Shape& sizes, const std::array<const Shape*, N>& strides) {
  Loop<N> l = coalesce<N>(sizes, strides);
  TG_CHECK(static_cast<int>(l.sizes.size()) <= kMaxDims, "cuda", "views of rank up to ", kMaxDims,
           " after merging dims are supported, got ", l.sizes.size());
  Offsets<N> o;
  o.nd = static_cast<int>(l.sizes.size());
  o.contiguous = o.nd == 1;
  for (int d = 0; d < o.nd; ++d) {
    o.sizes[d] = l.sizes[d];
    for (int k = 0; k < N; ++k) {
      o.strides[k][d] = l.strides[k][d];
      if (l.strides[k][d] != 1) o.contiguous = false;
    }
  }
  return o;
}

// NOLINTBEGIN(bugprone-macro-parentheses): `i` is the name the loop declares
#define TG_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace tg::cuda
