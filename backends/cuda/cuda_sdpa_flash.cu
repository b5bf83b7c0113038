// SDPA on CUDA in the manner of FlashAttention-2, float32 on the SIMT cores: a block of 256
// threads takes a 64-row tile of queries (forward, and the backward's dQ pass) or of keys
// (the backward's dK/dV pass) and walks the tiles of the other side through shared memory.
// Thread (ty, tx) of the 16 x 16 grid owns tile rows 4 ty .. 4 ty + 3 and columns
// tx + 16 c, so the 16 threads of a row are one half-warp and row reductions are shuffles.
// Scores go through Args::score, the same per-element rules as the CPU and the simple
// kernels; tiles that causal, window or padding remove entirely are never visited. In the
// ragged layout the grid covers the longest sequence and a block whose tile starts past its
// sequence's rows returns at once; tiles are loaded from the sequence's first row (and keys,
// for tg::sdpa_paged, through Args::kv_rows).
//
// The backward is deterministic: dK and dV are summed by the block that owns the key tile,
// over the query heads of its group and the query tiles in order; dQ has its own pass over
// the key tiles in order (it recomputes S and dP: 7 tile products instead of 5, and no
// floating-point atomics anywhere).
#include <algorithm>

#include "backends/cuda/cuda_sdpa_args.cuh"
#include "backends/scalar_ops.h"

namespace tg::cuda {
namespace {

constexpr int kB = 64;        // rows of every tile
constexpr int kT = 256;       // threads per block: 16 x 16
constexpr int kR = 4;         // tile rows per thread
constexpr int kC = 4;         // tile columns per thread in a score tile (tx + 16 c)
constexpr int kLdp = kB + 1;  // padded row of a score tile in shared memory

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// kB rows x kD of a (B, H, S, D) row view, rows row0 .. row0 + kB - 1, times `factor`, into
// dst (row stride kD + 1); zeros from row `row_end` on and past `width`, so the products need
// no bounds. With `at`, row r of the view is row at[r] (the paged layout's key rows).
template <int kD>
__device__ void load_tile(float* dst, const float* src, const int64_t* st, int64_t b, int64_t h,
                          int64_t row0, int64_t row_end, int64_t width, float factor,
                          const int64_t* at = nullptr) {
  const float* base = src + b * st[0] + h * st[1];
  for (int idx = threadIdx.x; idx < kB * kD; idx += kT) {
    const int r = idx / kD, d = idx % kD;
    const int64_t row = row0 + r;
    float v = 0;
    if (row < row_end && d < width) v = base[(at ? at[row] : row) * st[2] + d * st[3]] * factor;
    dst[r * (kD + 1) + d] = v;
  }
}

// acc[r][c] += sum_d A[4 ty + r][d] * B[tx + 16 c][d]: a tile of A B^T, both row-major.
template <int kD>
__device__ __forceinline__ void tile_abt(const float* A, const float* B, float (&acc)[kR][kC]) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll 4
  for (int d = 0; d < kD; ++d) {
    float x[kR], y[kC];
#pragma unroll
    for (int r = 0; r < kR; ++r) x[r] = A[(4 * ty + r) * (kD + 1) + d];
#pragma unroll
    for (int c = 0; c < kC; ++c) y[c] = B[(tx + 16 * c) * (kD + 1) + d];
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int c = 0; c < kC; ++c) acc[r][c] += x[r] * y[c];
  }
}

// acc[r][e] += sum_k P[4 ty + r][k] * M[k][tx + 16 e] for k < n: a score tile (row stride
// kLdp) times a row-major kD-wide tile.
template <int kD>
__device__ __forceinline__ void tile_pm(const float* P, const float* M, int n,
                                        float (&acc)[kR][kD / 16]) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll 4
  for (int k = 0; k < n; ++k) {
    float x[kR], y[kD / 16];
#pragma unroll
    for (int r = 0; r < kR; ++r) x[r] = P[(4 * ty + r) * kLdp + k];
#pragma unroll
    for (int e = 0; e < kD / 16; ++e) y[e] = M[k * (kD + 1) + tx + 16 * e];
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int e = 0; e < kD / 16; ++e) acc[r][e] += x[r] * y[e];
  }
}

__device__ __forceinline__ float half_warp_max(float v) {
  for (int o = 8; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float half_warp_sum(float v) {
  for (int o = 8; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int kD>
__global__ void __launch_bounds__(kT) forward_kernel(Args<float> a) {
  extern __shared__ float smem[];
  constexpr int ld = kD + 1;
  float *Qs = smem, *Ks = Qs + kB * ld, *Vs = Ks + kB * ld, *Ps = Vs + kB * ld;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t tiles = (a.Sq + kB - 1) / kB, blk = blockIdx.x;
  const int64_t i0 = (blk % tiles) * kB, h = (blk / tiles) % a.Hq, b = blk / (tiles * a.Hq);
  const SdpaSequence sq = a.seq(b);
  if (i0 >= sq.rows_q) return;  // past a ragged sequence's rows (the whole block)
  const int64_t hk = h / (a.Hq / a.Hk), q_end = sq.q0 + sq.rows_q, kv_end = sq.kv0 + sq.rows_kv;
  const float slope = a.slope_of(h);
  load_tile<kD>(Qs, a.q, a.qs, b, h, sq.q0 + i0, q_end, a.Dqk, a.scale);
  int64_t lo, hi;
  key_range(a, sq, i0, kB, lo, hi);
  float m[kR], l[kR], o[kR][kD / 16];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    m[r] = kNegInf;
    l[r] = 0;
#pragma unroll
    for (int e = 0; e < kD / 16; ++e) o[r][e] = 0;
  }
  for (int64_t j0 = lo; j0 < hi; j0 += kB) {
    __syncthreads();  // the last tile's reads are done
    load_tile<kD>(Ks, a.k, a.ks, b, hk, sq.kv0 + j0, kv_end, a.Dqk, 1.0f, a.kv_rows);
    load_tile<kD>(Vs, a.v, a.vs, b, hk, sq.kv0 + j0, kv_end, a.Dv, 1.0f, a.kv_rows);
    __syncthreads();
    float s[kR][kC] = {};
    tile_abt<kD>(Qs, Ks, s);
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int64_t i = i0 + 4 * ty + r;
      float mx = kNegInf;
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int64_t j = j0 + tx + 16 * c;
        float t = 0;
        s[r][c] = i < sq.rows_q && j < hi ? a.score(b, h, i, j, s[r][c], slope, sq, &t) : kNegInf;
        mx = fmaxf(mx, s[r][c]);
      }
      const float m_new = fmaxf(m[r], half_warp_max(mx));
      float alpha = 1, sum = 0;
      if (m_new != kNegInf) {
        alpha = scalar::exp_f32(m[r] - m_new);  // 0 while m was -inf
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          const float p = s[r][c] == kNegInf ? 0.0f : scalar::exp_f32(s[r][c] - m_new);
          sum += p;
          s[r][c] = p;
        }
      } else {
#pragma unroll
        for (int c = 0; c < kC; ++c) s[r][c] = 0;
      }
      l[r] = l[r] * alpha + half_warp_sum(sum);
      m[r] = m_new;
#pragma unroll
      for (int e = 0; e < kD / 16; ++e) o[r][e] *= alpha;
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        float p = s[r][c];
        if (a.dropout_p > 0 && p != 0.0f)
          p = a.keep(b, h, i, j0 + tx + 16 * c) ? p * a.keep_scale : 0.0f;
        Ps[(4 * ty + r) * kLdp + tx + 16 * c] = p;
      }
    }
    __syncthreads();
    tile_pm<kD>(Ps, Vs, static_cast<int>(min(static_cast<int64_t>(kB), hi - j0)), o);
  }
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t i = i0 + 4 * ty + r;
    if (i >= sq.rows_q) continue;
    const bool any = l[r] > 0;
    const float inv = any ? 1.0f / l[r] : 0.0f;
#pragma unroll
    for (int e = 0; e < kD / 16; ++e) {
      const int64_t d = tx + 16 * e;
      if (d < a.Dv) a.out[at4(a.outs, b, h, sq.q0 + i, d)] = o[r][e] * inv;
    }
    if (tx == 0) a.stat(b, h, sq.q0 + i) = any ? m[r] + logf(l[r]) : kNegInf;
  }
}

// D = rowsum(dO * O) per query row, a warp per row.
__global__ void delta_kernel(Args<float> a) {
  delta_row(a, static_cast<int64_t>(blockIdx.x) * (kT / 32) + threadIdx.x / 32, threadIdx.x % 32);
}

template <int kD>
__global__ void __launch_bounds__(kT) backward_dkv_kernel(Args<float> a) {
  extern __shared__ float smem[];
  constexpr int ld = kD + 1;
  float *Ks = smem, *Vs = Ks + kB * ld, *Qs = Vs + kB * ld, *dOs = Qs + kB * ld;
  float *PdT = dOs + kB * ld, *dST = PdT + kB * kLdp, *lse_s = dST + kB * kLdp, *dl_s = lse_s + kB;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t tiles = (a.Skv + kB - 1) / kB, blk = blockIdx.x;
  const int64_t j0 = (blk % tiles) * kB, hk = (blk / tiles) % a.Hk, b = blk / (tiles * a.Hk);
  const SdpaSequence sq = a.seq(b);
  if (j0 >= sq.rows_kv) return;  // past a ragged sequence's keys (the whole block)
  const int64_t G = a.Hq / a.Hk, q_end = sq.q0 + sq.rows_q, kv_end = sq.kv0 + sq.rows_kv;
  load_tile<kD>(Ks, a.k, a.ks, b, hk, sq.kv0 + j0, kv_end, a.Dqk, 1.0f);
  load_tile<kD>(Vs, a.v, a.vs, b, hk, sq.kv0 + j0, kv_end, a.Dv, 1.0f);
  // Query rows that can see some key of [j0, j_last].
  const int64_t j_last = min(j0 + kB, sq.rows_kv) - 1;
  const IndexRange rows =
      sdpa_query_range(a.causal, a.window, sq.shift, j0, j_last, j0 < sq.len_kv ? sq.len_q : 0);
  const int64_t i_lo = rows.lo, i_hi = rows.hi;
  float dk[kR][kD / 16] = {}, dv[kR][kD / 16] = {};
  for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
    const float slope = a.slope_of(h);
    const int64_t row_base = (b * a.Hq + h) * a.Sq;
    for (int64_t i0 = i_lo; i0 < i_hi; i0 += kB) {
      __syncthreads();
      load_tile<kD>(Qs, a.q, a.qs, b, h, sq.q0 + i0, q_end, a.Dqk, a.scale);
      load_tile<kD>(dOs, a.dout, a.dos, b, h, sq.q0 + i0, q_end, a.Dv, 1.0f);
      for (int r = threadIdx.x; r < kB; r += kT) {
        const bool in = i0 + r < sq.rows_q;
        lse_s[r] = in ? a.stat(b, h, sq.q0 + i0 + r) : kNegInf;
        dl_s[r] = in ? a.delta[row_base + i0 + r] : 0.0f;
      }
      __syncthreads();
      float st[kR][kC] = {}, dpt[kR][kC] = {};
      tile_abt<kD>(Ks, Qs, st);    // S^T: keys x queries
      tile_abt<kD>(Vs, dOs, dpt);  // dP^T
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int64_t j = j0 + 4 * ty + r;
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          const int q = tx + 16 * c;
          const int64_t i = i0 + q;
          float pd, raw;
          const float ds = score_grad(a, b, h, i, j, i < i_hi && j < sq.rows_kv, st[r][c],
                                      dpt[r][c], lse_s[q], dl_s[q], slope, sq, &pd, &raw);
          PdT[(4 * ty + r) * kLdp + q] = pd;
          dST[(4 * ty + r) * kLdp + q] = ds;
        }
      }
      __syncthreads();
      const int n = static_cast<int>(min(static_cast<int64_t>(kB), i_hi - i0));
      tile_pm<kD>(PdT, dOs, n, dv);  // dV += Pd^T dO
      tile_pm<kD>(dST, Qs, n, dk);   // dK += dS^T Q (q pre-scaled)
    }
  }
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t j = j0 + 4 * ty + r;
    if (j >= sq.rows_kv) continue;
#pragma unroll
    for (int e = 0; e < kD / 16; ++e) {
      const int64_t d = tx + 16 * e;
      if (d < a.Dqk) a.dk[at4(a.dks, b, hk, sq.kv0 + j, d)] = dk[r][e];
      if (d < a.Dv) a.dv[at4(a.dvs, b, hk, sq.kv0 + j, d)] = dv[r][e];
    }
  }
}

template <int kD>
__global__ void __launch_bounds__(kT) backward_dq_kernel(Args<float> a) {
  extern __shared__ float smem[];
  constexpr int ld = kD + 1;
  float *Qs = smem, *dOs = Qs + kB * ld, *Ks = dOs + kB * ld, *Vs = Ks + kB * ld;
  float* dSs = Vs + kB * ld;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t tiles = (a.Sq + kB - 1) / kB, blk = blockIdx.x;
  const int64_t i0 = (blk % tiles) * kB, h = (blk / tiles) % a.Hq, b = blk / (tiles * a.Hq);
  const SdpaSequence sq = a.seq(b);
  if (i0 >= sq.rows_q) return;  // past a ragged sequence's rows (the whole block)
  const int64_t hk = h / (a.Hq / a.Hk), q_end = sq.q0 + sq.rows_q, kv_end = sq.kv0 + sq.rows_kv;
  const int64_t row_base = (b * a.Hq + h) * a.Sq;  // delta's and the score gradient's rows
  const float slope = a.slope_of(h);
  load_tile<kD>(Qs, a.q, a.qs, b, h, sq.q0 + i0, q_end, a.Dqk, a.scale);
  load_tile<kD>(dOs, a.dout, a.dos, b, h, sq.q0 + i0, q_end, a.Dv, 1.0f);
  float lse[kR], dl[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t i = i0 + 4 * ty + r;
    lse[r] = i < sq.rows_q ? a.stat(b, h, sq.q0 + i) : kNegInf;
    dl[r] = i < sq.rows_q ? a.delta[row_base + i] : 0.0f;
  }
  int64_t lo, hi;
  key_range(a, sq, i0, kB, lo, hi);
  float dq[kR][kD / 16] = {};
  for (int64_t j0 = lo; j0 < hi; j0 += kB) {
    __syncthreads();
    load_tile<kD>(Ks, a.k, a.ks, b, hk, sq.kv0 + j0, kv_end, a.Dqk, 1.0f);
    load_tile<kD>(Vs, a.v, a.vs, b, hk, sq.kv0 + j0, kv_end, a.Dv, 1.0f);
    __syncthreads();
    float s[kR][kC] = {}, dp[kR][kC] = {};
    tile_abt<kD>(Qs, Ks, s);
    tile_abt<kD>(dOs, Vs, dp);
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int64_t i = i0 + 4 * ty + r;
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int64_t j = j0 + tx + 16 * c;
        const bool valid = i < sq.rows_q && j < hi;
        float pd, raw;
        const float ds = score_grad(a, b, h, i, j, valid, s[r][c], dp[r][c], lse[r], dl[r], slope,
                                    sq, &pd, &raw);
        if (a.dscores && valid) a.dscores[(row_base + i) * a.Skv + j] = raw;
        dSs[(4 * ty + r) * kLdp + tx + 16 * c] = ds;
      }
    }
    __syncthreads();
    tile_pm<kD>(dSs, Ks, static_cast<int>(min(static_cast<int64_t>(kB), hi - j0)), dq);
  }
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t i = i0 + 4 * ty + r;
    if (i >= sq.rows_q) continue;
#pragma unroll
    for (int e = 0; e < kD / 16; ++e) {
      const int64_t d = tx + 16 * e;
      if (d < a.Dqk) a.dq[at4(a.dqs, b, h, sq.q0 + i, d)] = dq[r][e] * a.scale;
    }
  }
}

// Launches `kernel` with `smem` bytes of dynamic shared memory (raising the kernel's limit
// above the default 48 KB once).
template <class K>
void launch(K kernel, int64_t blocks, size_t smem, cudaStream_t s, const Args<float>& a,
            const char* name) {
  TG_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)));
  kernel<<<static_cast<unsigned>(blocks), kT, smem, s>>>(a);
  check_launch(name);
}

// Shared memory per block of each kernel for tile width kD, in bytes.
template <int kD>
constexpr size_t smem_forward = (3 * kB * (kD + 1) + kB * kLdp) * sizeof(float);
template <int kD>
constexpr size_t smem_dq = (4 * kB * (kD + 1) + kB * kLdp) * sizeof(float);
template <int kD>
constexpr size_t smem_dkv = (4 * kB * (kD + 1) + 2 * kB * kLdp + 2 * kB) * sizeof(float);

// Calls f(std::integral_constant<int, tile width>) when the head dims fit a tile and the
// device grants the shared memory (162 KB for the backward at width 128); false otherwise,
// and the simple kernels run.
template <class F>
bool with_tile_dim(int device, const Args<float>& a, F&& f) {
  int optin = 0;
  TG_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const auto fits = [&](size_t bytes) { return bytes <= static_cast<size_t>(optin); };
  const int64_t d = std::max(a.Dqk, a.Dv);
  if (d <= 64 && fits(smem_dkv<64>)) {
    f(std::integral_constant<int, 64>{});
  } else if (d <= 128 && fits(smem_dkv<128>)) {
    f(std::integral_constant<int, 128>{});
  } else {
    return false;
  }
  return true;
}

}  // namespace

bool sdpa_flash_forward(int device, const Args<float>& a) {
  cudaStream_t s = enter(device);
  const int64_t blocks = a.B * a.Hq * ((a.Sq + kB - 1) / kB);
  return with_tile_dim(device, a, [&](auto dim) {
    constexpr int kD = decltype(dim)::value;
    if (blocks)
      launch(forward_kernel<kD>, blocks, smem_forward<kD>, s, a, "sdpa flash forward kernel");
  });
}

bool sdpa_flash_backward(int device, const Args<float>& in) {
  cudaStream_t s = enter(device);
  Args<float> a = in;
  const int64_t rows = a.B * a.Hq * a.Sq;
  Scratch delta(std::max<int64_t>(rows, 1) * sizeof(float), device);
  a.delta = delta.as<float>();
  return with_tile_dim(device, a, [&](auto dim) {
    constexpr int kD = decltype(dim)::value;
    if (rows) {
      delta_kernel<<<static_cast<unsigned>((rows + kT / 32 - 1) / (kT / 32)), kT, 0, s>>>(a);
      check_launch("sdpa delta kernel");
      launch(backward_dq_kernel<kD>, a.B * a.Hq * ((a.Sq + kB - 1) / kB), smem_dq<kD>, s, a,
             "sdpa flash backward dq kernel");
    }
    const int64_t kv_blocks = a.B * a.Hk * ((a.Skv + kB - 1) / kB);
    if (kv_blocks)
      launch(backward_dkv_kernel<kD>, kv_blocks, smem_dkv<kD>, s, a,
             "sdpa flash backward dk/dv kernel");
  });
}

}  // namespace tg::cuda
