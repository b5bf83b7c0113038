// SDPA on CUDA. float32 with head dims up to 128 runs the tiled kernels of
// cuda_sdpa_flash.cu; the rest (float64, larger heads) runs the simple exact version here: a
// warp per query row (forward, and the backward's dQ pass) or per key row (the backward's
// dK/dV pass), keys or queries taken 32 at a time, one per lane, with the online softmax of
// the forward and P rebuilt from the saved logsumexp in the backward. Every option of
// DESIGN.md §4 through the same per-element rules as the CPU (sdpa_params.h), in the dense
// and the ragged layout (the grid covers the longest sequence; the rows past a sequence's own
// return at once); nothing of size Sq x Skv is held, no atomics, so the backward is
// deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_sdpa_args.cuh"
#include "backends/cuda/cuda_util.cuh"
#include "backends/half_kernels.h"
#include "backends/scalar_ops.h"

namespace tg::cuda {

namespace {

constexpr int kWarps = 4;         // warps (rows) per block
constexpr int kMaxHeadDim = 256;  // head dims up to 8 values per lane

// A warp's query or key row (kWarps rows to a block over the B x heads x len rows,
// row-major), its lane, and its slice of the block's shared memory.
template <class T>
struct WarpRow {
  int lane;
  int64_t row, b, head, pos;
  T* smem;
};
// This warp's row with `per_warp` shared values; false past the last row (the whole warp
// returns).
template <class T>
__device__ __forceinline__ bool warp_row(unsigned char* smem, int64_t per_warp, int64_t B,
                                         int64_t heads, int64_t len, WarpRow<T>& w) {
  const int warp = static_cast<int>(threadIdx.x / 32);
  w.lane = static_cast<int>(threadIdx.x % 32);
  w.row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  w.smem = reinterpret_cast<T*>(smem) + warp * per_warp;
  w.pos = w.row % len;
  w.head = (w.row / len) % heads;
  w.b = w.row / (len * heads);
  return w.row < B * heads * len;
}

// The lane's elements d = lane + 32 c (c < kPer) of a row of n values at `stride`:
// acc[c] += s * row[d], and row[d] = acc[c] * s.
template <class T, int kPer>
__device__ __forceinline__ void lane_axpy(T (&acc)[kPer], T s, const T* row, int64_t stride,
                                          int64_t n, int lane) {
  for (int c = 0; c < kPer; ++c) {
    const int64_t d = lane + 32 * c;
    if (d < n) acc[c] += s * row[d * stride];
  }
}
template <class T, int kPer>
__device__ __forceinline__ void lane_store(const T (&acc)[kPer], T s, T* row, int64_t stride,
                                           int64_t n, int lane) {
  for (int c = 0; c < kPer; ++c) {
    const int64_t d = lane + 32 * c;
    if (d < n) row[d * stride] = acc[c] * s;
  }
}

// Forward: out row and logsumexp of query row (b, h, i). Lane l owns out dims l, l+32, ...
template <class T, int kPer>
__global__ void forward_kernel(Args<T> a) {
  extern __shared__ unsigned char smem_raw[];
  WarpRow<T> w;
  if (!warp_row(smem_raw, a.Dqk, a.B, a.Hq, a.Sq, w)) return;
  const int64_t i = w.pos, h = w.head, b = w.b;
  const SdpaSequence sq = a.seq(b);
  if (i >= sq.rows_q) return;  // past a ragged sequence's rows (the whole warp)
  T* qs = w.smem;
  const int lane = w.lane;
  const int64_t qi = sq.q0 + i;  // the row in the row views
  const int64_t hk = h / (a.Hq / a.Hk);
  const T ninf = -std::numeric_limits<T>::infinity(), slope = a.slope_of(h);
  for (int64_t d = lane; d < a.Dqk; d += 32) qs[d] = a.q[at4(a.qs, b, h, qi, d)] * a.scale;
  __syncwarp();
  const int64_t ia = i + sq.shift;
  const IndexRange keys = sdpa_key_range(a.causal, a.window, ia, ia, i < sq.len_q ? sq.len_kv : 0);
  const int64_t lo = keys.lo, hi = keys.hi;
  T m = ninf, l = 0, acc[kPer];
  for (int c = 0; c < kPer; ++c) acc[c] = 0;
  for (int64_t j0 = lo; j0 < hi; j0 += 32) {
    const int64_t j = j0 + lane;
    T s = ninf, t = 0;
    if (j < hi) {
      const T* kr = a.k + at4(a.ks, b, hk, a.key_row(sq, j), 0);
      T dot = 0;
      for (int64_t d = 0; d < a.Dqk; ++d) dot += qs[d] * kr[d * a.ks[3]];
      s = a.score(b, h, i, j, dot, slope, sq, &t);
    }
    const T m_new = max(m, warp_max(s));
    if (m_new == ninf) continue;  // nothing visible yet (the same on every lane)
    const T alpha = scalar::exp_any(m - m_new);
    const T p = s == ninf ? T(0) : scalar::exp_any(s - m_new);
    l = l * alpha + warp_sum(p);
    m = m_new;
    for (int c = 0; c < kPer; ++c) acc[c] *= alpha;
    T pd = p;
    if (a.dropout_p > 0 && p != T(0)) pd = a.keep(b, h, i, j) ? p * a.keep_scale : T(0);
    const int n = hi - j0 < 32 ? static_cast<int>(hi - j0) : 32;
    for (int u = 0; u < n; ++u) {
      const T pj = __shfl_sync(0xffffffffu, pd, u);
      if (pj == T(0)) continue;
      lane_axpy(acc, pj, a.v + at4(a.vs, b, hk, a.key_row(sq, j0 + u), 0), a.vs[3], a.Dv, lane);
    }
  }
  const bool any = l > T(0);
  const T inv = any ? T(1) / l : T(0);
  lane_store(acc, inv, a.out + at4(a.outs, b, h, qi, 0), a.outs[3], a.Dv, lane);
  if (lane == 0) a.stat(b, h, qi) = any ? m + log(l) : ninf;
}

// Backward, pass 1 (a warp per query row): D = rowsum(dO * O), dQ, and the score gradient.
template <class T, int kPer>
__global__ void backward_dq_kernel(Args<T> a) {
  extern __shared__ unsigned char smem_raw[];
  WarpRow<T> w;
  if (!warp_row(smem_raw, a.Dqk + a.Dv, a.B, a.Hq, a.Sq, w)) return;
  const int64_t row = w.row, i = w.pos, h = w.head, b = w.b;
  const SdpaSequence sq = a.seq(b);
  if (i >= sq.rows_q) return;  // past a ragged sequence's rows (the whole warp)
  T *qs = w.smem, *dos = w.smem + a.Dqk;
  const int lane = w.lane;
  const int64_t qi = sq.q0 + i;  // the row in the row views
  const int64_t hk = h / (a.Hq / a.Hk);
  const T ninf = -std::numeric_limits<T>::infinity(), slope = a.slope_of(h);
  for (int64_t d = lane; d < a.Dqk; d += 32) qs[d] = a.q[at4(a.qs, b, h, qi, d)] * a.scale;
  T dsum = 0;
  for (int64_t d = lane; d < a.Dv; d += 32) {
    dos[d] = a.dout[at4(a.dos, b, h, qi, d)];
    dsum += dos[d] * a.o[at4(a.os, b, h, qi, d)];
  }
  const T delta = warp_sum(dsum);
  if (lane == 0) a.delta[row] = delta;
  __syncwarp();
  const T lse = a.stat(b, h, qi);
  const int64_t ia = i + sq.shift;
  const IndexRange keys =
      sdpa_key_range(a.causal, a.window, ia, ia, i < sq.len_q && lse != ninf ? sq.len_kv : 0);
  const int64_t lo = keys.lo, hi = keys.hi;
  T acc[kPer];
  for (int c = 0; c < kPer; ++c) acc[c] = 0;
  for (int64_t j0 = lo; j0 < hi; j0 += 32) {
    const int64_t j = j0 + lane;
    T ds = 0;
    if (j < hi) {
      const T* kr = a.k + at4(a.ks, b, hk, sq.kv0 + j, 0);
      const T* vr = a.v + at4(a.vs, b, hk, sq.kv0 + j, 0);
      T dot = 0, dp = 0, t = 0;
      for (int64_t d = 0; d < a.Dqk; ++d) dot += qs[d] * kr[d * a.ks[3]];
      for (int64_t d = 0; d < a.Dv; ++d) dp += dos[d] * vr[d * a.vs[3]];
      const T s = a.score(b, h, i, j, dot, slope, sq, &t);
      const T p = s == ninf ? T(0) : scalar::exp_any(s - lse);
      if (a.dropout_p > 0) dp = a.keep(b, h, i, j) ? dp * a.keep_scale : T(0);
      ds = p * (dp - delta);
      if (a.dscores) a.dscores[row * a.Skv + j] = ds;
      if (a.softcap > T(0)) ds *= sdpa_softcap_grad(t);
    }
    const int n = hi - j0 < 32 ? static_cast<int>(hi - j0) : 32;
    for (int u = 0; u < n; ++u) {
      const T dsj = __shfl_sync(0xffffffffu, ds, u);
      if (dsj == T(0)) continue;
      lane_axpy(acc, dsj, a.k + at4(a.ks, b, hk, sq.kv0 + j0 + u, 0), a.ks[3], a.Dqk, lane);
    }
  }
  lane_store(acc, a.scale, a.dq + at4(a.dqs, b, h, qi, 0), a.dqs[3], a.Dqk, lane);
}

// Backward, pass 2 (a warp per key row of a key/value head): dK and dV summed over the
// query heads that share it and the query rows that see it, in a fixed order.
template <class T, int kPer>
__global__ void backward_dkv_kernel(Args<T> a) {
  extern __shared__ unsigned char smem_raw[];
  WarpRow<T> w;
  if (!warp_row(smem_raw, a.Dqk + a.Dv, a.B, a.Hk, a.Skv, w)) return;
  const int64_t j = w.pos, hk = w.head, b = w.b;  // key j of kv head hk
  const SdpaSequence sq = a.seq(b);
  if (j >= sq.rows_kv) return;    // past a ragged sequence's keys (the whole warp)
  const int64_t kj = sq.kv0 + j;  // the row in the row views
  const int lane = w.lane;
  T *ks = w.smem, *vs = w.smem + a.Dqk;
  for (int64_t d = lane; d < a.Dqk; d += 32) ks[d] = a.k[at4(a.ks, b, hk, kj, d)];
  for (int64_t d = lane; d < a.Dv; d += 32) vs[d] = a.v[at4(a.vs, b, hk, kj, d)];
  __syncwarp();
  // Query rows that can see key j.
  const IndexRange rows =
      sdpa_query_range(a.causal, a.window, sq.shift, j, j, j < sq.len_kv ? sq.len_q : 0);
  const int64_t i_lo = rows.lo, i_hi = rows.hi;
  const T ninf = -std::numeric_limits<T>::infinity();
  T dk[kPer], dv[kPer];
  for (int c = 0; c < kPer; ++c) dk[c] = dv[c] = 0;
  const int64_t G = a.Hq / a.Hk;  // the query heads of kv head hk: [hk G, (hk + 1) G)
  for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
    const T slope = a.slope_of(h);
    for (int64_t i0 = i_lo; i0 < i_hi; i0 += 32) {
      const int64_t i = i0 + lane;
      T pd = 0, ds = 0;
      if (i < i_hi) {
        const int64_t r = (b * a.Hq + h) * a.Sq + i;  // delta's padded row
        const T lse = a.stat(b, h, sq.q0 + i);
        const T* qr = a.q + at4(a.qs, b, h, sq.q0 + i, 0);
        const T* dr = a.dout + at4(a.dos, b, h, sq.q0 + i, 0);
        T dot = 0, dp = 0, t = 0;
        for (int64_t d = 0; d < a.Dqk; ++d) dot += (qr[d * a.qs[3]] * a.scale) * ks[d];
        for (int64_t d = 0; d < a.Dv; ++d) dp += dr[d * a.dos[3]] * vs[d];
        const T s = a.score(b, h, i, j, dot, slope, sq, &t);
        const T p = s == ninf || lse == ninf ? T(0) : scalar::exp_any(s - lse);
        pd = p;
        if (a.dropout_p > 0) {
          const bool kept = a.keep(b, h, i, j);
          pd = kept ? p * a.keep_scale : T(0);
          dp = kept ? dp * a.keep_scale : T(0);
        }
        ds = p * (dp - a.delta[r]);
        if (a.softcap > T(0)) ds *= sdpa_softcap_grad(t);
      }
      const int n = i_hi - i0 < 32 ? static_cast<int>(i_hi - i0) : 32;
      for (int u = 0; u < n; ++u) {
        const T pu = __shfl_sync(0xffffffffu, pd, u), du = __shfl_sync(0xffffffffu, ds, u);
        const int64_t qu = sq.q0 + i0 + u;
        if (pu != T(0)) lane_axpy(dv, pu, a.dout + at4(a.dos, b, h, qu, 0), a.dos[3], a.Dv, lane);
        if (du != T(0)) lane_axpy(dk, du, a.q + at4(a.qs, b, h, qu, 0), a.qs[3], a.Dqk, lane);
      }
    }
  }
  lane_store(dk, a.scale, a.dk + at4(a.dks, b, hk, kj, 0), a.dks[3], a.Dqk, lane);
  lane_store(dv, T(1), a.dv + at4(a.dvs, b, hk, kj, 0), a.dvs[3], a.Dv, lane);
}

// Calls f(std::integral_constant<int, values per lane>) for the larger head dim.
template <class F>
void with_per_lane(int64_t dim, F&& f) {
  TG_CHECK(dim <= kMaxHeadDim, "sdpa", "the CUDA kernels take head dims up to ", kMaxHeadDim,
           ", got ", dim);
  with_head_width(
      dim, [&](auto width) { f(std::integral_constant<int, decltype(width)::value / 32>{}); });
}

unsigned blocks_for_rows(int64_t rows) {
  return static_cast<unsigned>((rows + kWarps - 1) / kWarps);
}

template <class T>
void forward_typed(int device, const SdpaParams& p) {
  cudaStream_t s = enter(device);
  Args<T> a = make_args<T>(p);
  if constexpr (std::is_same_v<T, float>) {
    if (sdpa_flash_forward(device, a)) return;
  }
  const int64_t rows = a.B * a.Hq * a.Sq;
  if (!rows) return;
  const size_t smem = kWarps * a.Dqk * sizeof(T);
  with_per_lane(a.Dv, [&](auto per) {
    forward_kernel<T, decltype(per)::value><<<blocks_for_rows(rows), kWarps * 32, smem, s>>>(a);
  });
  check_launch("sdpa forward kernel");
}

template <class T>
void backward_typed(int device, const SdpaParams& p, const View& dout, const SdpaGradViews& g) {
  cudaStream_t s = enter(device);
  Args<T> a = make_args<T>(p);
  set_grad_args(a, dout, g);
  if constexpr (std::is_same_v<T, float>) {
    if (sdpa_flash_backward(device, a)) return;
  }
  const int64_t rows_q = a.B * a.Hq * a.Sq, rows_kv = a.B * a.Hk * a.Skv;
  Scratch delta(std::max<int64_t>(rows_q, 1) * sizeof(T), device);
  a.delta = delta.as<T>();
  const size_t smem = kWarps * (a.Dqk + a.Dv) * sizeof(T);
  if (rows_q) {
    with_per_lane(a.Dqk, [&](auto per) {
      backward_dq_kernel<T, decltype(per)::value>
          <<<blocks_for_rows(rows_q), kWarps * 32, smem, s>>>(a);
    });
    check_launch("sdpa backward dq kernel");
  }
  if (rows_kv) {
    with_per_lane(std::max(a.Dqk, a.Dv), [&](auto per) {
      backward_dkv_kernel<T, decltype(per)::value>
          <<<blocks_for_rows(rows_kv), kWarps * 32, smem, s>>>(a);
    });
    check_launch("sdpa backward dk/dv kernel");
  }
}

}  // namespace

void CudaBackend::sdpa_forward(const SdpaParams& p) {
  if (sdpa_mma_forward(device, p)) return;
  if (half_kernels::sdpa_forward(*this, here(), p)) return;
  if (p.q.dtype == kFloat64) {
    forward_typed<double>(device, p);
  } else {
    forward_typed<float>(device, p);
  }
}

void CudaBackend::sdpa_backward(const SdpaParams& p, const View& dout, const SdpaGradViews& g) {
  if (sdpa_mma_backward(device, p, dout, g)) return;
  if (half_kernels::sdpa_backward(*this, here(), p, dout, g)) return;
  if (p.q.dtype == kFloat64) {
    backward_typed<double>(device, p, dout, g);
  } else {
    backward_typed<float>(device, p, dout, g);
  }
}

// No tiled double backward on the GPU yet: the op composes it from ops (cuBLAS products and
// elementwise kernels over the (B, Hq, Sq, Skv) scores).
bool CudaBackend::sdpa_double_backward(const SdpaParams& /*p*/, const SdpaDoubleGradViews& /*g*/) {
  return false;
}

}  // namespace tg::cuda
