// Fused kernels of the transformer's own ops on CUDA: RMSNorm forward and backward, RoPE,
// SwiGLU, AdamW. Same formulas as backends/cpu/cpu_model.cpp (row statistics in double),
// a warp per row where a row needs a sum, a thread per element otherwise.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/dispatch.h"
#include "backends/scalar_ops.h"

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
__global__ void rope_kernel(const T* x, const T* cs, const T* sn, T* out, int64_t pairs,
                            int64_t half, int64_t per_pos, int64_t len) {
  TG_GRID_STRIDE(e, pairs) {
    const int64_t r = e / half, i = e % half;
    const int64_t pos = (r / per_pos) % len;
    const T c = cs[pos * half + i], s = sn[pos * half + i];
    const T ev = x[2 * e], od = x[2 * e + 1];
    out[2 * e] = ev * c - od * s;
    out[2 * e + 1] = ev * s + od * c;
  }
}

template <class T>
__global__ void swiglu_forward_kernel(const T* x, T* out, int64_t n, int64_t f) {
  TG_GRID_STRIDE(e, n) {
    const int64_t r = e / f, c = e % f;
    const T gate = x[r * 2 * f + c], up = x[r * 2 * f + f + c];
    out[e] = gate * scalar::sigmoid(gate) * up;
  }
}

template <class T>
__global__ void swiglu_backward_kernel(const T* dout, const T* x, T* dx, int64_t n, int64_t f) {
  TG_GRID_STRIDE(e, n) {
    const int64_t r = e / f, c = e % f;
    const T a = x[r * 2 * f + c], up = x[r * 2 * f + f + c], g = dout[e];
    const T s = scalar::sigmoid(a), silu = a * s;
    dx[r * 2 * f + c] = g * up * (s + silu * (T(1) - s));
    dx[r * 2 * f + f + c] = g * silu;
  }
}

template <class T>
__global__ void adamw_kernel(T* p, const T* g, T* m, T* v, int64_t n, T decay, T b1, T b2, T a1,
                             T a2, T inv_sqrt_bc2, T step, T eps) {
  TG_GRID_STRIDE(i, n) {
    const T gi = g[i];
    const T mi = b1 * m[i] + a1 * gi;
    const T vi = b2 * v[i] + a2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step * mi / (sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

}  // namespace

void CudaBackend::rms_norm_forward(const View& x, const View& w, double eps, const View& y,
                                   const View& rstd) {
  cudaStream_t s = enter(device);
  const int64_t d = x.sizes.back(), rows = d ? x.numel() / d : 0;
  if (!rows) return;
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    rms_forward_kernel<<<row_blocks(rows), kThreads, 0, s>>>(
        static_cast<const T*>(x.data), static_cast<const T*>(w.data), eps, static_cast<T*>(y.data),
        static_cast<T*>(rstd.data), rows, d);
  });
  check_launch("rms_norm kernel");
}

void CudaBackend::rms_norm_backward(const View& dy, const View& x, const View& w, const View& rstd,
                                    const View& dx, const View& dw) {
  cudaStream_t s = enter(device);
  const int64_t d = x.sizes.back(), rows = d ? x.numel() / d : 0;
  if (!rows) return;
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
}

void CudaBackend::rope(const View& x, const View& cos, const View& sin, int64_t seq_dim,
                       const View& out) {
  cudaStream_t s = enter(device);
  const int64_t n = static_cast<int64_t>(x.sizes.size());
  const int64_t d = x.sizes.back(), half = d / 2, rows = d ? x.numel() / d : 0;
  if (!rows || !half) return;
  int64_t per_pos = 1;  // rows between consecutive positions
  for (int64_t i = seq_dim + 1; i < n - 1; ++i) per_pos *= x.sizes[i];
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    rope_kernel<<<grid_for(rows * half), kThreads, 0, s>>>(
        static_cast<const T*>(x.data), static_cast<const T*>(cos.data),
        static_cast<const T*>(sin.data), static_cast<T*>(out.data), rows * half, half, per_pos,
        x.sizes[seq_dim]);
  });
  check_launch("rope kernel");
}

void CudaBackend::swiglu_forward(const View& x, const View& out) {
  cudaStream_t s = enter(device);
  const int64_t f = out.sizes.back(), n = out.numel();
  if (!n) return;
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    swiglu_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(x.data),
                                                           static_cast<T*>(out.data), n, f);
  });
  check_launch("swiglu kernel");
}

void CudaBackend::swiglu_backward(const View& dout, const View& x, const View& dx) {
  cudaStream_t s = enter(device);
  const int64_t f = dout.sizes.back(), n = dout.numel();
  if (!n) return;
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    swiglu_backward_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(dout.data),
                                                            static_cast<const T*>(x.data),
                                                            static_cast<T*>(dx.data), n, f);
  });
  check_launch("swiglu backward kernel");
}

void CudaBackend::adamw_step(const View& p, const View& g, const View& m, const View& v,
                             const AdamWStep& st) {
  cudaStream_t s = enter(device);
  const int64_t n = p.numel();
  if (!n) return;
  dispatch_float(p.dtype, [&](auto t) {
    using T = decltype(t);
    adamw_kernel<<<grid_for(n), kThreads, 0, s>>>(
        static_cast<T*>(p.data), static_cast<const T*>(g.data), static_cast<T*>(m.data),
        static_cast<T*>(v.data), n, static_cast<T>(1 - st.lr * st.weight_decay),
        static_cast<T>(st.beta1), static_cast<T>(st.beta2), static_cast<T>(1 - st.beta1),
        static_cast<T>(1 - st.beta2), static_cast<T>(1 / std::sqrt(st.bias_correction2)),
        static_cast<T>(st.lr / st.bias_correction1), static_cast<T>(st.eps));
  });
  check_launch("adamw kernel");
}

}  // namespace tg::cuda
