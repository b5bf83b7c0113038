// Row-wise kernels: softmax (a warp per row), and the row gather and scatter-add of embedding
// forward and backward. The scatter-add is
// deterministic without atomics: ids are ranked by (id, position) (a stable counting of
// smaller keys, O(n^2) comparisons through shared memory, cheap for the token counts of a
// batch), then one thread per (distinct id, column) adds that id's rows in index order, the
// same additions in the same order as the CPU's loop, so the results are bitwise equal.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/dispatch.h"
#include "backends/half_kernels.h"
#include "backends/scalar_ops.h"

namespace tg::cuda {
namespace {

template <class T>
__global__ void softmax_kernel(const T* x, T* out, int64_t rows, int64_t c, bool log) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const T* xr = x + r * c;
  T* o = out + r * c;
  T m = -INFINITY;
  for (int64_t i = lane; i < c; i += 32) m = xr[i] > m ? xr[i] : m;
  for (int s = 16; s > 0; s /= 2) {
    const T u = __shfl_xor_sync(0xffffffffu, m, s);
    m = u > m ? u : m;
  }
  if (!isfinite(m)) m = 0;
  T sum = 0;
  for (int64_t i = lane; i < c; i += 32) sum += scalar::exp_any(xr[i] - m);
  for (int s = 16; s > 0; s /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, s);
  const T lse = ::log(sum) + m;
  for (int64_t i = lane; i < c; i += 32) o[i] = log ? xr[i] - lse : scalar::exp_any(xr[i] - lse);
}

template <class T>
__global__ void gather_kernel(const T* w, const int64_t* ids, T* out, int64_t n, int64_t d) {
  TG_GRID_STRIDE(e, n * d) {
    const int64_t i = e / d, c = e % d;
    out[e] = w[ids[i] * d + c];
  }
}

template <class T>
__global__ void scatter_kernel(const T* src, const int64_t* ids, T* dst, int64_t n, int64_t d) {
  TG_GRID_STRIDE(e, n * d) {
    const int64_t i = e / d, c = e % d;
    dst[ids[i] * d + c] = src[e];
  }
}

// order[rank(i)] = i, rank(i) = #{j : (id[j], j) < (id[i], i)}.
__global__ void rank_kernel(const int64_t* ids, int64_t n, int64_t* order) {
  __shared__ int64_t tile[kThreads];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t mine = i < n ? ids[i] : 0;
  int64_t rank = 0;
  for (int64_t t0 = 0; t0 < n; t0 += kThreads) {
    if (t0 + threadIdx.x < n) tile[threadIdx.x] = ids[t0 + threadIdx.x];
    __syncthreads();
    const int64_t len = n - t0 < kThreads ? n - t0 : kThreads;
    for (int64_t t = 0; t < len; ++t) {
      const int64_t other = tile[t], j = t0 + t;
      rank += (other < mine) || (other == mine && j < i);
    }
    __syncthreads();
  }
  if (i < n) order[rank] = i;
}

template <class T>
__global__ void scatter_add_kernel(const T* g, const int64_t* ids, const int64_t* order, int64_t n,
                                   int64_t d, T* gw) {
  TG_GRID_STRIDE(e, n * d) {
    const int64_t p = e / d, c = e % d;
    const int64_t id = ids[order[p]];
    if (p > 0 && ids[order[p - 1]] == id) continue;  // not the first of its id's run
    T acc = gw[id * d + c];
    for (int64_t q = p; q < n && ids[order[q]] == id; ++q) acc += g[order[q] * d + c];
    gw[id * d + c] = acc;
  }
}

}  // namespace

void CudaBackend::softmax(const View& x, const View& out, bool log) {
  if (half_kernels::softmax(*this, here(), x, out, log)) return;
  cudaStream_t s = enter(device);
  const int64_t c = x.sizes.back(), rows = c ? x.numel() / c : 0;
  if (!rows) return;
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    softmax_kernel<<<static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32)), kThreads,
                     0, s>>>(static_cast<const T*>(x.data), static_cast<T*>(out.data), rows, c,
                             log);
  });
  check_launch("softmax kernel");
}

void CudaBackend::gather_rows(const View& weight, const View& ids, const View& out) {
  cudaStream_t s = enter(device);
  const int64_t n = ids.numel(), d = weight.sizes[1];
  if (!n || !d) return;
  dispatch(weight.dtype, [&](auto t) {
    using T = decltype(t);
    gather_kernel<<<grid_for(n * d), kThreads, 0, s>>>(static_cast<const T*>(weight.data),
                                                       static_cast<const int64_t*>(ids.data),
                                                       static_cast<T*>(out.data), n, d);
  });
  check_launch("gather_rows kernel");
}

void CudaBackend::scatter_rows(const View& src, const View& ids, const View& dst) {
  cudaStream_t s = enter(device);
  const int64_t n = ids.numel(), d = dst.sizes[1];
  if (!n || !d) return;
  dispatch(dst.dtype, [&](auto t) {
    using T = decltype(t);
    scatter_kernel<<<grid_for(n * d), kThreads, 0, s>>>(static_cast<const T*>(src.data),
                                                        static_cast<const int64_t*>(ids.data),
                                                        static_cast<T*>(dst.data), n, d);
  });
  check_launch("scatter_rows kernel");
}

void CudaBackend::scatter_add_rows(const View& grad, const View& ids, const View& grad_weight) {
  if (half_kernels::scatter_add_rows(*this, here(), grad, ids, grad_weight)) return;
  cudaStream_t s = enter(device);
  const int64_t n = ids.numel(), d = grad_weight.sizes[1];
  if (!n || !d) return;
  Scratch order(n * sizeof(int64_t), device);
  const auto* id = static_cast<const int64_t*>(ids.data);
  rank_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      id, n, order.as<int64_t>());
  check_launch("scatter_add_rows rank kernel");
  dispatch_float(grad.dtype, [&](auto t) {
    using T = decltype(t);
    scatter_add_kernel<<<grid_for(n * d), kThreads, 0, s>>>(static_cast<const T*>(grad.data), id,
                                                            order.as<int64_t>(), n, d,
                                                            static_cast<T*>(grad_weight.data));
  });
  check_launch("scatter_add_rows kernel");
}

// Not written for CUDA yet: logsumexp, softmax's backward and cross_entropy run their composite
// formulas here.
bool CudaBackend::logsumexp_rows(const View&, const View&) { return false; }
bool CudaBackend::softmax_backward(const View&, const View&, const View&, bool) { return false; }
bool CudaBackend::cross_entropy_forward(const View&, const View&, int64_t, const View&,
                                        const View&) {
  return false;
}
bool CudaBackend::cross_entropy_backward(const View&, const View&, const View&, const View&,
                                         int64_t, const View&) {
  return false;
}

}  // namespace tg::cuda
