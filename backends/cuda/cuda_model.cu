// Fused kernels of the transformer's own ops on CUDA: RMSNorm forward and backward, RoPE,
// SwiGLU, AdamW. Same formulas as backends/cpu/cpu_model.cpp (row statistics in double),
// a warp per row where a row needs a sum, a thread per element otherwise.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/dispatch.h"
#include "backends/fused_math.h"
#include "backends/half_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

template <class T>
__global__ void rms_forward_kernel(const T* x, const T* w, double eps, T* y, T* rstd, int64_t rows,
                                   int64_t d) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const T* xr = x + r * d;
  double ss = 0;
  for (int64_t c = lane; c < d; c += 32) ss += static_cast<double>(xr[c]) * xr[c];
  ss = warp_sum(ss);
  const T rs = static_cast<T>(1.0 / sqrt(ss / static_cast<double>(d) + eps));
  if (lane == 0) rstd[r] = rs;
  T* yr = y + r * d;
  for (int64_t c = lane; c < d; c += 32) yr[c] = w ? xr[c] * rs * w[c] : xr[c] * rs;
}

template <class T>
__global__ void rms_backward_dx_kernel(const T* dy, const T* x, const T* w, const T* rstd, T* dx,
                                       int64_t rows, int64_t d) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const T* g = dy + r * d;
  const T* xr = x + r * d;
  double dot = 0;
  for (int64_t c = lane; c < d; c += 32)
    dot += static_cast<double>(g[c]) * (w ? static_cast<double>(w[c]) : 1.0) * xr[c];
  dot = warp_sum(dot);
  const T rs = rstd[r];
  const T k = static_cast<T>(static_cast<double>(rs) * rs * rs * dot / static_cast<double>(d));
  T* o = dx + r * d;
  for (int64_t c = lane; c < d; c += 32)
    o[c] = w ? rs * g[c] * w[c] - k * xr[c] : rs * g[c] - k * xr[c];
}

// dw in two fixed-order passes: partial[chunk, c] over kRowChunk rows, then over the chunks.
constexpr int64_t kRowChunk = 64;

template <class T>
__global__ void rms_backward_dw_partial(const T* dy, const T* x, const T* rstd, double* partial,
                                        int64_t rows, int64_t d) {
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  TG_GRID_STRIDE(e, chunks * d) {
    const int64_t ch = e / d, c = e % d;
    const int64_t r1 = (ch + 1) * kRowChunk < rows ? (ch + 1) * kRowChunk : rows;
    double acc = 0;
    for (int64_t r = ch * kRowChunk; r < r1; ++r)
      acc += static_cast<double>(dy[r * d + c]) * x[r * d + c] * static_cast<double>(rstd[r]);
    partial[e] = acc;
  }
}

template <class T>
__global__ void rms_backward_dw_final(const double* partial, int64_t chunks, int64_t d, T* dw) {
  TG_GRID_STRIDE(c, d) {
    double acc = 0;
    for (int64_t ch = 0; ch < chunks; ++ch) acc += partial[ch * d + c];
    dw[c] = static_cast<T>(acc);
  }
}

template <class T>
__global__ void rope_kernel(const T* x, Offsets<1> rows, const T* cs, const T* sn, T* out,
                            int64_t pairs, int64_t half, int64_t per_pos, int64_t len) {
  TG_GRID_STRIDE(e, pairs) {
    const int64_t r = e / half, i = e % half;
    const int64_t pos = (r / per_pos) % len;
    int64_t at[1];  // x's rows may have any strides; out is contiguous
    rows.at(r, at);
    const T c = cs[pos * half + i], s = sn[pos * half + i];
    fused::rope_rotate(x[at[0] + 2 * i], x[at[0] + 2 * i + 1], c, s, out[2 * e], out[2 * e + 1]);
  }
}

template <class T>
__global__ void swiglu_forward_kernel(const T* x, T* out, int64_t n, int64_t f) {
  TG_GRID_STRIDE(e, n) {
    const int64_t r = e / f, c = e % f;
    out[e] = fused::swiglu(x[r * 2 * f + c], x[r * 2 * f + f + c]);
  }
}

template <class T>
__global__ void swiglu_backward_kernel(const T* dout, const T* x, T* dx, int64_t n, int64_t f) {
  TG_GRID_STRIDE(e, n) {
    const int64_t r = e / f, c = e % f;
    fused::swiglu_grad(x[r * 2 * f + c], x[r * 2 * f + f + c], dout[e], dx[r * 2 * f + c],
                       dx[r * 2 * f + f + c]);
  }
}

template <class T>
__global__ void adamw_kernel(T* p, const T* g, T* m, T* v, int64_t n, fused::AdamWConstants<T> c) {
  TG_GRID_STRIDE(i, n) { fused::adamw_update(p[i], g[i], m[i], v[i], c); }
}

}  // namespace

bool CudaBackend::rms_norm_forward(const View& x, const View& w, double eps, const View& y,
                                   const View& rstd) {
  if (half_kernels::rms_norm_forward(*this, here(), x, w, eps, y, rstd)) return true;
  cudaStream_t s = enter(device);
  const int64_t d = x.sizes.back(), rows = d ? x.numel() / d : 0;
  if (!rows) return true;
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    rms_forward_kernel<<<row_blocks(rows), kThreads, 0, s>>>(
        static_cast<const T*>(x.data), static_cast<const T*>(w.data), eps, static_cast<T*>(y.data),
        static_cast<T*>(rstd.data), rows, d);
  });
  check_launch("rms_norm kernel");
  return true;
}

bool CudaBackend::rms_norm_backward(const View& dy, const View& x, const View& w, const View& rstd,
                                    const View& dx, const View& dw) {
  if (half_kernels::rms_norm_backward(*this, here(), dy, x, w, rstd, dx, dw)) return true;
  cudaStream_t s = enter(device);
  const int64_t d = x.sizes.back(), rows = d ? x.numel() / d : 0;
  if (!rows) return true;
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    const T* g = static_cast<const T*>(dy.data);
    const T* xp = static_cast<const T*>(x.data);
    const T* rs = static_cast<const T*>(rstd.data);
    rms_backward_dx_kernel<<<row_blocks(rows), kThreads, 0, s>>>(
        g, xp, static_cast<const T*>(w.data), rs, static_cast<T*>(dx.data), rows, d);
    check_launch("rms_norm backward kernel");
    if (!dw.data) return;
    const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
    Scratch partial(chunks * d * sizeof(double), device);
    rms_backward_dw_partial<<<grid_for(chunks * d), kThreads, 0, s>>>(
        g, xp, rs, partial.as<double>(), rows, d);
    rms_backward_dw_final<<<grid_for(d), kThreads, 0, s>>>(partial.as<double>(), chunks, d,
                                                           static_cast<T*>(dw.data));
    check_launch("rms_norm weight-gradient kernels");
  });
  return true;
}

bool CudaBackend::rope(const View& x, const View& cos, const View& sin, int64_t seq_dim,
                       const View& out) {
  if (half_kernels::rope(*this, here(), x, cos, sin, seq_dim, out)) return true;
  cudaStream_t s = enter(device);
  const int64_t n = static_cast<int64_t>(x.sizes.size());
  const int64_t d = x.sizes.back(), half = d / 2, rows = d ? x.numel() / d : 0;
  if (!rows || !half) return true;
  int64_t per_pos = 1;  // rows between consecutive positions
  for (int64_t i = seq_dim + 1; i < n - 1; ++i) per_pos *= x.sizes[i];
  const Shape row_sizes(x.sizes.begin(), x.sizes.end() - 1);
  const Shape row_strides(x.strides.begin(), x.strides.end() - 1);
  const Offsets<1> row_offsets = make_offsets<1>(row_sizes, {&row_strides});
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    rope_kernel<<<grid_for(rows * half), kThreads, 0, s>>>(
        static_cast<const T*>(x.data), row_offsets, static_cast<const T*>(cos.data),
        static_cast<const T*>(sin.data), static_cast<T*>(out.data), rows * half, half, per_pos,
        x.sizes[seq_dim]);
  });
  check_launch("rope kernel");
  return true;
}

bool CudaBackend::swiglu_forward(const View& x, const View& out) {
  if (half_kernels::swiglu_forward(*this, here(), x, out)) return true;
  cudaStream_t s = enter(device);
  const int64_t f = out.sizes.back(), n = out.numel();
  if (!n) return true;
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    swiglu_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(x.data),
                                                           static_cast<T*>(out.data), n, f);
  });
  check_launch("swiglu kernel");
  return true;
}

bool CudaBackend::swiglu_backward(const View& dout, const View& x, const View& dx) {
  if (half_kernels::swiglu_backward(*this, here(), dout, x, dx)) return true;
  cudaStream_t s = enter(device);
  const int64_t f = dout.sizes.back(), n = dout.numel();
  if (!n) return true;
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    swiglu_backward_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(dout.data),
                                                            static_cast<const T*>(x.data),
                                                            static_cast<T*>(dx.data), n, f);
  });
  check_launch("swiglu backward kernel");
  return true;
}

bool CudaBackend::adamw_step(const View& p, const View& g, const View& m, const View& v,
                             const AdamWStep& st) {
  if (half_kernels::adamw_step(*this, here(), p, g, m, v, st)) return true;
  cudaStream_t s = enter(device);
  const int64_t n = p.numel();
  if (!n) return true;
  dispatch_float(p.dtype, [&](auto t) {
    using T = decltype(t);
    adamw_kernel<<<grid_for(n), kThreads, 0, s>>>(
        static_cast<T*>(p.data), static_cast<const T*>(g.data), static_cast<T*>(m.data),
        static_cast<T*>(v.data), n, fused::AdamWConstants<T>(st));
  });
  check_launch("adamw kernel");
  return true;
}

// Not written for CUDA yet: clip_grad_norm runs its composite (square, widen, sum) here.
bool CudaBackend::sum_squares(const View&, const View&) { return false; }

}  // namespace tg::cuda
