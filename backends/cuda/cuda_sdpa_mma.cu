// SDPA on the tensor cores for bfloat16 and float16, in the manner of FlashAttention-2 (Dao,
// 2023): 16-bit products with float32 sums (mma.sync m16n8k16, cuda_mma.cuh), float32
// statistics, the option rules of DESIGN §4 applied to the score fragments in registers
// through Args::score, the same per-element code as the CPU and the float32 kernels. float32
// runs the same kernels under set_float32_matmul_precision("high"): shared tiles of float, and
// each product split into three TF32 ones (m16n8k8, "3xTF32", about float32's accuracy).
//
// A block is four warps. Forward and the backward's dQ pass: the block takes 64 query rows,
// each warp 16 of them (or 128 and 32 under cuda_sdpa_warp_rows() == 32: two slices of 16 per
// warp sharing each K/V fragment), and walks the visible key tiles; no softmax reduction
// crosses warps.
// The dK/dV pass: the block takes 64 key rows, each warp 16, and walks the query tiles of
// every query head of its group in order, so dK and dV are summed without atomics and the
// backward is deterministic (dQ has its own pass: S and dP are recomputed there; above head
// dim 128 dV and dK have a pass each). Head dims up to 256, walked tiles of 32 rows above 128.
// The next tile of the walked side is copied into shared memory with cp.async while this one
// is multiplied; shared rows are padded by 16 bytes, so the eight rows an ldmatrix reads fall
// in distinct banks. Rows whose strides do not allow 16-byte copies are loaded element by
// element into the same layout. Tiles whose keys are all real and visible under options
// without per-element rules (interior()) skip Args::score; the rules run out of line.
//
// P (and dS) are rounded to the 16-bit type for the second product of each pair, as
// FlashAttention-2 does; the row sums use the float32 values. In float32 they are split like
// any other operand.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/cuda_sdpa_mma_tiles.cuh"
#include "backends/cuda_api.h"
#include "backends/float32_precision.h"

namespace tg::cuda {
namespace {

using namespace mma_sdpa;  // the tile pieces (cuda_sdpa_mma_tiles.cuh)

// Whether rows [row0, row0 + rows) and keys [j0, j0 + keys) of sequence sq are all real (not
// padding, keys below the visible range's end `hi`) and all visible to one another under
// options that are plain(): a tile whose scores are its scaled dot products, no rule applied.
template <class S>
__device__ __forceinline__ bool interior(const Args<float, S>& a, const SdpaSequence& sq,
                                         int64_t row0, int rows, int64_t hi, int64_t j0, int keys) {
  return a.plain() && row0 + rows <= sq.len_q && j0 + keys <= hi &&
         sdpa_all_visible(a.causal, a.window, row0 + sq.shift, row0 + rows - 1 + sq.shift, j0,
                          j0 + keys - 1);
}

// Blocks per multiprocessor for the forward and the dQ pass. With one slice per warp, three at
// head dims up to 64 (registers capped at 168): at two (193 and 242 registers) they ran 20%
// slower (H100: 12.5% occupancy against 18.5%). With two slices, two (up to 255 registers).
template <int kD, int kM>
constexpr int kBlocksPerSM = kD > 64   ? 1
                             : kM == 1 ? 3
                                       : 2;

template <class S, int kD, int kM>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSM<kD, kM>)
    forward_kernel(const __grid_constant__ Args<float, S> a, Vectorized vec) {
  constexpr int kN = kForwardKeys<kD, kM>, kP = kPitch<S, kD>, kBlockRows = kM * kRows;
  extern __shared__ __align__(16) unsigned char smem[];
  S* Qs = reinterpret_cast<S*>(smem);
  S* Ks = Qs + kBlockRows * kP;  // two buffers of kN rows
  S* Vs = Ks + 2 * kN * kP;
  const int warp = threadIdx.x / 32;
  const int64_t tiles = (a.Sq + kBlockRows - 1) / kBlockRows, blk = blockIdx.x;
  const int64_t i0 = (blk % tiles) * kBlockRows, h = (blk / tiles) % a.Hq, b = blk / (tiles * a.Hq);
  const SdpaSequence sq = a.seq(b);
  if (i0 >= sq.rows_q) return;  // past a ragged sequence's rows (the whole block)
  const int64_t hk = h / (a.Hq / a.Hk), kv_end = sq.kv0 + sq.rows_kv;
  const float slope = a.slope_of(h);
  const S* kbase = slice(a.k, a.ks, b, hk);
  const S* vbase = slice(a.v, a.vs, b, hk);
  load_rows<S, kD, kBlockRows>(Qs, slice(a.q, a.qs, b, h), a.qs, sq.q0 + i0, sq.q0 + sq.rows_q,
                               a.Dqk, nullptr, vec.q);
  int64_t lo, hi;
  key_range(a, sq, i0, kBlockRows, lo, hi);
  const auto load_kv = [&](int64_t it, int buf) {  // key tile `it`, from key lo + it kN
    const int64_t j0 = lo + it * kN;
    load_rows<S, kD, kN>(Ks + buf * kN * kP, kbase, a.ks, sq.kv0 + j0, kv_end, a.Dqk, a.kv_rows,
                         vec.k);
    load_rows<S, kD, kN>(Vs + buf * kN * kP, vbase, a.vs, sq.kv0 + j0, kv_end, a.Dv, a.kv_rows,
                         vec.v);
  };
  const int64_t n_tiles = (hi - lo + kN - 1) / kN;
  if (n_tiles > 0) load_kv(0, 0);
  mma::cp_async_commit();

  const int64_t row_w = i0 + 16 * kM * warp;  // this warp's first row; slice m from row_w + 16 m
  // Scores, maxima and statistics in log2 units (x log2 e), so that each probability is one
  // exp2_ftz of a difference; a row's maximum m is -inf until it sees a key.
  const float scale_log2 = a.scale * kLog2e;
  float o[kM][kD / 8][4] = {};
  float mr[kM][2], l[kM][2];
#pragma unroll
  for (int sl = 0; sl < kM; ++sl) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mr[sl][r] = kNegInf;
      l[sl][r] = 0.0f;
    }
  }
  for (int64_t it = 0; it < n_tiles; ++it) {
    const int buf = static_cast<int>(it & 1);
    const int64_t j0 = lo + it * kN;
    next_tile(it, n_tiles, load_kv);
    float s[kM][kN / 8][4] = {};
    warp_abt<S, kD, kN, kM>(Qs + 16 * kM * warp * kP, Ks + buf * kN * kP, s);
    float mx[kM][2];
    // Interior tiles with a positive scale keep the raw products: their largest is the largest
    // score, and each probability is one fused multiply-add and an exp2 from the product.
    const bool inner = a.scale > 0 && interior(a, sq, row_w, 16 * kM, hi, j0, kN);
#pragma unroll
    for (int sl = 0; sl < kM; ++sl) {
      mx[sl][0] = mx[sl][1] = kNegInf;
      if (inner) {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) mx[sl][e / 2] = fmaxf(mx[sl][e / 2], s[sl][nt][e]);
        }
        mx[sl][0] *= scale_log2;
        mx[sl][1] *= scale_log2;
      } else {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[sl][nt][e] =
                kLog2e * edge_score(a, b, h, row_w + 16 * sl + frag_row(e), j0 + frag_col(nt, e),
                                    s[sl][nt][e] * a.scale, slope, sq, hi);
            mx[sl][e / 2] = fmaxf(mx[sl][e / 2], s[sl][nt][e]);
          }
        }
      }
    }
    float alpha[kM][2], base[kM][2];
#pragma unroll
    for (int sl = 0; sl < kM; ++sl) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_new = fmaxf(mr[sl][r], quad_max(mx[sl][r]));
        alpha[sl][r] = m_new == kNegInf ? 1.0f : exp2_ftz(mr[sl][r] - m_new);  // 0 while m = -inf
        // 0 while m = -inf, so that a hidden key's exp2_ftz(-inf - base) is 0
        base[sl][r] = m_new == kNegInf ? 0.0f : m_new;
        mr[sl][r] = m_new;
        l[sl][r] *= alpha[sl][r];
      }
      if (inner) {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[sl][nt][e] = exp2_ftz(fmaf(s[sl][nt][e], scale_log2, -base[sl][e / 2]));
            l[sl][e / 2] += s[sl][nt][e];
          }
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[sl][nt][e] = exp2_ftz(s[sl][nt][e] - base[sl][e / 2]);
            l[sl][e / 2] += s[sl][nt][e];
          }
        }
      }
    }
    if (a.dropout_p > 0) {  // after the row sums: the statistics are dropout's input
#pragma unroll
      for (int sl = 0; sl < kM; ++sl) {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (s[sl][nt][e] == 0.0f) continue;
            const bool kept =
                dropout_keeps(a, b, h, row_w + 16 * sl + frag_row(e), j0 + frag_col(nt, e));
            s[sl][nt][e] = kept ? s[sl][nt][e] * a.keep_scale : 0.0f;
          }
        }
      }
    }
    AFragments<S, kN> pf[kM];
#pragma unroll
    for (int sl = 0; sl < kM; ++sl) {
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) to_a_fragment<S, kN>(pf[sl], nt, s[sl][nt]);
#pragma unroll
      for (int dt = 0; dt < kD / 8; ++dt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[sl][dt][e] *= alpha[sl][e / 2];
      }
    }
    warp_pv<S, kD, kN, kM>(pf, Vs + buf * kN * kP, o);
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  mma::cp_async_wait<0>();  // nothing left in flight when no key tile was visited

#pragma unroll
  for (int sl = 0; sl < kM; ++sl) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[sl][r] = quad_sum(l[sl][r]);
      inv[r] = l[sl][r] > 0 ? 1.0f / l[sl][r] : 0.0f;
    }
    const int64_t row_s = row_w + 16 * sl;
    store_rows<S, kD>(a.out, a.outs, b, h, sq.q0, row_s, sq.rows_q, a.Dv, o[sl], inv);
    if (threadIdx.x % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t i = row_s + frag_row(2 * r);
        if (i < sq.rows_q)
          a.stat(b, h, sq.q0 + i) = l[sl][r] > 0 ? mr[sl][r] * kLn2 + logf(l[sl][r]) : kNegInf;
      }
    }
  }
}

template <class S>
__global__ void delta_kernel(Args<float, S> a) {
  delta_row(a, static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32, threadIdx.x % 32);
}

// dQ: the block's kM kRows query rows against every visible key tile.
template <class S, int kD, int kM>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSM<kD, kM>)
    backward_dq_kernel(const __grid_constant__ Args<float, S> a, Vectorized vec) {
  constexpr int kN = kDqKeys<kD, kM>, kP = kPitch<S, kD>, kBlockRows = kM * kRows;
  extern __shared__ __align__(16) unsigned char smem[];
  S* Qs = reinterpret_cast<S*>(smem);
  S* dOs = Qs + kBlockRows * kP;
  S* Ks = dOs + kBlockRows * kP;  // two buffers of kN rows each
  S* Vs = Ks + 2 * kN * kP;
  const int warp = threadIdx.x / 32;
  const int64_t tiles = (a.Sq + kBlockRows - 1) / kBlockRows, blk = blockIdx.x;
  const int64_t i0 = (blk % tiles) * kBlockRows, h = (blk / tiles) % a.Hq, b = blk / (tiles * a.Hq);
  const SdpaSequence sq = a.seq(b);
  if (i0 >= sq.rows_q) return;
  const int64_t hk = h / (a.Hq / a.Hk), q_end = sq.q0 + sq.rows_q, kv_end = sq.kv0 + sq.rows_kv;
  const int64_t row_base = (b * a.Hq + h) * a.Sq;  // delta's and the score gradient's rows
  const float slope = a.slope_of(h);
  const S* kbase = slice(a.k, a.ks, b, hk);
  const S* vbase = slice(a.v, a.vs, b, hk);
  load_rows<S, kD, kBlockRows>(Qs, slice(a.q, a.qs, b, h), a.qs, sq.q0 + i0, q_end, a.Dqk, nullptr,
                               vec.q);
  load_rows<S, kD, kBlockRows>(dOs, slice(a.dout, a.dos, b, h), a.dos, sq.q0 + i0, q_end, a.Dv,
                               nullptr, vec.dout);
  int64_t lo, hi;
  key_range(a, sq, i0, kBlockRows, lo, hi);
  const auto load_kv = [&](int64_t it, int buf) {
    const int64_t j0 = lo + it * kN;
    load_rows<S, kD, kN>(Ks + buf * kN * kP, kbase, a.ks, sq.kv0 + j0, kv_end, a.Dqk, nullptr,
                         vec.k);
    load_rows<S, kD, kN>(Vs + buf * kN * kP, vbase, a.vs, sq.kv0 + j0, kv_end, a.Dv, nullptr,
                         vec.v);
  };
  const int64_t n_tiles = (hi - lo + kN - 1) / kN;
  if (n_tiles > 0) load_kv(0, 0);
  mma::cp_async_commit();

  const int64_t row_w = i0 + 16 * kM * warp;  // slice m from row_w + 16 m
  float lse[kM][2], dl[kM][2], lse_log2[kM][2];
#pragma unroll
  for (int sl = 0; sl < kM; ++sl) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = row_w + 16 * sl + frag_row(2 * r);
      lse[sl][r] = i < sq.rows_q ? a.stat(b, h, sq.q0 + i) : kNegInf;
      dl[sl][r] = i < sq.rows_q ? a.delta[row_base + i] : 0.0f;
      lse_log2[sl][r] = lse[sl][r] * kLog2e;
    }
  }
  const float scale_log2 = a.scale * kLog2e;
  float dq[kM][kD / 8][4] = {};
  for (int64_t it = 0; it < n_tiles; ++it) {
    const int buf = static_cast<int>(it & 1);
    const int64_t j0 = lo + it * kN;
    next_tile(it, n_tiles, load_kv);
    float s[kM][kN / 8][4] = {}, dp[kM][kN / 8][4] = {};
    warp_abt<S, kD, kN, kM>(Qs + 16 * kM * warp * kP, Ks + buf * kN * kP, s);
    warp_abt<S, kD, kN, kM>(dOs + 16 * kM * warp * kP, Vs + buf * kN * kP, dp);
    AFragments<S, kN> df[kM];
    const bool inner = interior(a, sq, row_w, 16 * kM, hi, j0, kN);
#pragma unroll
    for (int sl = 0; sl < kM; ++sl) {
      if (inner && !(a.dropout_p > 0)) {  // dS = P (dP - D), P = exp2(s scale log2 e - lse log2 e)
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float p = exp2_ftz(fmaf(s[sl][nt][e], scale_log2, -lse_log2[sl][e / 2]));
            s[sl][nt][e] = p * (dp[sl][nt][e] - dl[sl][e / 2]);
          }
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t i = row_w + 16 * sl + frag_row(e), j = j0 + frag_col(nt, e);
            if (inner) {
              float pd;
              s[sl][nt][e] = plain_score_grad(a, b, h, i, j, s[sl][nt][e] * a.scale, dp[sl][nt][e],
                                              lse[sl][e / 2], dl[sl][e / 2], &pd);
              continue;
            }
            const bool valid = i < sq.rows_q && j < hi;
            const ScoreGrad g =
                edge_score_grad(a, b, h, i, j, valid, s[sl][nt][e] * a.scale, dp[sl][nt][e],
                                lse[sl][e / 2], dl[sl][e / 2], slope, sq);
            s[sl][nt][e] = g.ds;
            if (a.dscores && valid) a.dscores[(row_base + i) * a.Skv + j] = g.raw;
          }
        }
      }
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) to_a_fragment<S, kN>(df[sl], nt, s[sl][nt]);
    }
    warp_pv<S, kD, kN, kM>(df, Ks + buf * kN * kP, dq);
    __syncthreads();
  }
  mma::cp_async_wait<0>();
  const float scale[2] = {a.scale, a.scale};
#pragma unroll
  for (int sl = 0; sl < kM; ++sl)
    store_rows<S, kD>(a.dq, a.dqs, b, h, sq.q0, row_w + 16 * sl, sq.rows_q, a.Dqk, dq[sl], scale);
}

// Which gradients a dK/dV pass sums: both, or at head dims above 128 one per pass (two
// accumulators of 256 columns per thread do not fit in registers).
enum DkvPart { kDkAndDv, kDvOnly, kDkOnly };

// dK and dV: the block's 64 key rows against every query tile of every query head of the
// group that sees one of them, in order.
// Uncapped (about 250 registers at D 64, two blocks per SM): capped at three blocks it
// spilled 224 bytes and ran 5% slower (H100, bfloat16, D 64).
template <class S, int kD, DkvPart kPart>
__global__ void __launch_bounds__(kBlockThreads)
    backward_dkv_kernel(const __grid_constant__ Args<float, S> a, Vectorized vec) {
  constexpr int kN = kBackwardWalk<kD>, kP = kPitch<S, kD>;
  constexpr bool kWantK = kPart != kDvOnly, kWantV = kPart != kDkOnly;
  extern __shared__ __align__(16) unsigned char smem[];
  S* Ks = reinterpret_cast<S*>(smem);
  S* Vs = Ks + kRows * kP;
  S* Qs = Vs + kRows * kP;  // two buffers of kN rows each
  S* dOs = Qs + 2 * kN * kP;
  float* lse_s = reinterpret_cast<float*>(dOs + 2 * kN * kP);  // two buffers of kN (log2 units)
  float* dl_s = lse_s + 2 * kN;
  const int warp = threadIdx.x / 32;
  const int64_t tiles = (a.Skv + kRows - 1) / kRows, blk = blockIdx.x;
  const int64_t j0 = (blk % tiles) * kRows, hk = (blk / tiles) % a.Hk, b = blk / (tiles * a.Hk);
  const SdpaSequence sq = a.seq(b);
  if (j0 >= sq.rows_kv) return;  // past a ragged sequence's keys (the whole block)
  const int64_t G = a.Hq / a.Hk, q_end = sq.q0 + sq.rows_q, kv_end = sq.kv0 + sq.rows_kv;
  load_rows<S, kD, kRows>(Ks, slice(a.k, a.ks, b, hk), a.ks, sq.kv0 + j0, kv_end, a.Dqk, nullptr,
                          vec.k);
  if constexpr (kWantK)  // V is read only for dP, which only dK needs
    load_rows<S, kD, kRows>(Vs, slice(a.v, a.vs, b, hk), a.vs, sq.kv0 + j0, kv_end, a.Dv, nullptr,
                            vec.v);
  // Query rows that can see some key of [j0, j_last].
  const int64_t j_last = min(j0 + kRows, sq.rows_kv) - 1;
  const IndexRange rows =
      sdpa_query_range(a.causal, a.window, sq.shift, j0, j_last, j0 < sq.len_kv ? sq.len_q : 0);
  const int64_t i_lo = rows.lo, i_hi = rows.hi;
  const int64_t per_head = i_hi > i_lo ? (i_hi - i_lo + kN - 1) / kN : 0;
  const int64_t n_tiles = G * per_head;
  // The walk: the query tiles of head hk G in order, then of hk G + 1, ...; each tile's
  // successor by an addition (dividing the tile's index by per_head took a 64-bit division
  // routine twice per tile).
  struct QueryTile {
    int64_t h, i0;  // head, first row
  };
  const int64_t i_end = i_lo + per_head * kN;
  const auto after = [&](QueryTile t) {
    return t.i0 + kN < i_end ? QueryTile{t.h, t.i0 + kN} : QueryTile{t.h + 1, i_lo};
  };
  const auto load_q = [&](QueryTile t, int buf) {
    const int64_t h = t.h, i0 = t.i0;
    load_rows<S, kD, kN>(Qs + buf * kN * kP, slice(a.q, a.qs, b, h), a.qs, sq.q0 + i0, q_end, a.Dqk,
                         nullptr, vec.q);
    load_rows<S, kD, kN>(dOs + buf * kN * kP, slice(a.dout, a.dos, b, h), a.dos, sq.q0 + i0, q_end,
                         a.Dv, nullptr, vec.dout);
    const int64_t row_base = (b * a.Hq + h) * a.Sq;
    static_assert(kN <= kBlockThreads);
    if (const int r = threadIdx.x; r < kN) {  // one row each
      const bool in = i0 + r < sq.rows_q;
      lse_s[buf * kN + r] = in ? a.stat(b, h, sq.q0 + i0 + r) * kLog2e : kNegInf;  // log2 units
      dl_s[buf * kN + r] = in ? a.delta[row_base + i0 + r] : 0.0f;
    }
  };
  QueryTile cur{hk * G, i_lo};
  if (n_tiles > 0) load_q(cur, 0);
  mma::cp_async_commit();

  const int64_t key_w = j0 + 16 * warp;  // this warp's first key
  const float scale_log2 = a.scale * kLog2e;
  float dk[kWantK ? kD / 8 : 1][4] = {}, dv[kWantV ? kD / 8 : 1][4] = {};
  for (int64_t it = 0; it < n_tiles; ++it) {
    const int buf = static_cast<int>(it & 1);
    const int64_t h = cur.h, i0 = cur.i0;
    const QueryTile next = after(cur);
    const float slope = a.slope_of(h);
    next_tile(it, n_tiles, [&](int64_t, int next_buf) { load_q(next, next_buf); });
    const S* Qb = Qs + buf * kN * kP;
    const S* dOb = dOs + buf * kN * kP;
    float st[kN / 8][4] = {}, dpt[kN / 8][4] = {};  // S^T and dP^T: keys x queries
    warp_abt<S, kD, kN>(Ks + 16 * warp * kP, Qb, st);
    if constexpr (kWantK) warp_abt<S, kD, kN>(Vs + 16 * warp * kP, dOb, dpt);
    AFragments<S, kN> pf, df;
    // Queries i0 .. i0 + kN - 1 against this warp's 16 keys (rows past i_hi see none of them,
    // so sdpa_all_visible fails for a tile holding one).
    const bool inner = interior(a, sq, i0, kN, sq.len_kv, key_w, 16);
    if (inner && !(a.dropout_p > 0)) {  // as in the dQ pass, transposed
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) {
        // Elements 0, 2 are query column q, elements 1, 3 column q + 1 (q even).
        const int q = frag_col(nt, 0);
        const float2 lse = *reinterpret_cast<const float2*>(lse_s + buf * kN + q);
        const float2 dl = *reinterpret_cast<const float2*>(dl_s + buf * kN + q);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = exp2_ftz(fmaf(st[nt][e], scale_log2, -(e % 2 ? lse.y : lse.x)));
          dpt[nt][e] = p * (dpt[nt][e] - (e % 2 ? dl.y : dl.x));
          st[nt][e] = p;
        }
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int q = frag_col(nt, e);
          const int64_t i = i0 + q, j = key_w + frag_row(e);
          const float lse = lse_s[buf * kN + q] * kLn2, dl = dl_s[buf * kN + q];
          float pd;
          if (inner) {
            dpt[nt][e] =
                plain_score_grad(a, b, h, i, j, st[nt][e] * a.scale, dpt[nt][e], lse, dl, &pd);
          } else {
            const ScoreGrad g =
                edge_score_grad(a, b, h, i, j, i < i_hi && j < sq.rows_kv, st[nt][e] * a.scale,
                                dpt[nt][e], lse, dl, slope, sq);
            dpt[nt][e] = g.ds;
            pd = g.pd;
          }
          st[nt][e] = pd;
        }
      }
    }
    if constexpr (kWantV) {  // dV += Pd^T dO
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) to_a_fragment<S, kN>(pf, nt, st[nt]);
      warp_pv<S, kD, kN>(pf, dOb, dv);
    }
    if constexpr (kWantK) {  // dK += dS^T Q (scaled at the end)
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) to_a_fragment<S, kN>(df, nt, dpt[nt]);
      warp_pv<S, kD, kN>(df, Qb, dk);
    }
    __syncthreads();
    cur = next;
  }
  mma::cp_async_wait<0>();
  const float one[2] = {1.0f, 1.0f}, scale[2] = {a.scale, a.scale};
  if constexpr (kWantK)
    store_rows<S, kD>(a.dk, a.dks, b, hk, sq.kv0, key_w, sq.rows_kv, a.Dqk, dk, scale);
  if constexpr (kWantV)
    store_rows<S, kD>(a.dv, a.dvs, b, hk, sq.kv0, key_w, sq.rows_kv, a.Dv, dv, one);
}

// Shared memory of each kernel at tile width kD (and kM slices per warp), in bytes.
template <class S, int kD, int kM>
constexpr size_t smem_forward = (kM * kRows + 4 * kForwardKeys<kD, kM>)*kPitch<S, kD> * sizeof(S);
template <class S, int kD, int kM>
constexpr size_t smem_dq = (2 * kM * kRows + 4 * kDqKeys<kD, kM>)*kPitch<S, kD> * sizeof(S);
template <class S, int kD>
constexpr size_t smem_dkv = (2 * kRows + 4 * kBackwardWalk<kD>)*kPitch<S, kD> * sizeof(S) +
                            4 * kBackwardWalk<kD> * sizeof(float);

// Calls f(std::integral_constant<int, kM>) with the forward's and the dQ pass's 16-row slices
// per warp: two when cuda_sdpa_warp_rows() is 32 and the head dims allow (up to 128), else one.
template <int kD, class F>
void with_slices(F&& f) {
  if constexpr (kD <= 128) {
    if (cuda_sdpa_warp_rows() == 32) return f(std::integral_constant<int, 2>{});
  }
  f(std::integral_constant<int, 1>{});
}

bool vectorizable(const View& v, int64_t width) {
  const int64_t per_copy = 16 / static_cast<int64_t>(dtype_size(v.dtype));
  if (reinterpret_cast<uintptr_t>(v.data) % 16 != 0 || width % per_copy != 0) return false;
  if (v.sizes[3] > 1 && v.strides[3] != 1) return false;
  for (int d = 0; d < 3; ++d)
    if (v.sizes[d] > 1 && v.strides[d] % per_copy != 0) return false;
  return true;
}

// Which of q, k, v and dout (absent in the forward) allow 16-byte copies.
Vectorized vectorized(const SdpaParams& p, const View& dout) {
  Vectorized vec;
  vec.q = vectorizable(p.q, p.dim_qk());
  vec.k = vectorizable(p.k, p.dim_qk());
  vec.v = vectorizable(p.v, p.dim_v());
  vec.dout = dout.data && vectorizable(dout, p.dim_v());
  return vec;
}

// Whether the device runs mma.sync on 16-bit inputs (compute capability 8.0 and later), and
// the shared memory a block may have there.
int shared_optin(int device) {
  int major = 0, optin = 0;
  TG_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) return 0;
  TG_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return optin;
}

template <class K, class S>
void launch(K kernel, int64_t blocks, size_t smem, cudaStream_t s, const Args<float, S>& a,
            const Vectorized& vec, const char* name) {
  TG_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)));
  kernel<<<static_cast<unsigned>(blocks), kBlockThreads, smem, s>>>(a, vec);
  check_launch(name);
}

template <class S>
bool forward_typed(int device, const SdpaParams& p) {
  const Args<float, S> a = make_args<float, S>(p);
  const Vectorized vec = vectorized(p, View{});
  const int optin = shared_optin(device);
  bool fits = false;
  const bool any = with_head_width(std::max(a.Dqk, a.Dv), [&](auto width) {
    constexpr int kD = decltype(width)::value;
    with_slices<kD>([&](auto slices) {
      constexpr int kM = decltype(slices)::value;
      constexpr size_t smem = smem_forward<S, kD, kM>;
      if (smem > static_cast<size_t>(optin)) return;
      fits = true;
      cudaStream_t s = enter(device);
      const int64_t blocks = a.B * a.Hq * ((a.Sq + kM * kRows - 1) / (kM * kRows));
      if (blocks)
        launch(forward_kernel<S, kD, kM>, blocks, smem, s, a, vec, "sdpa mma forward kernel");
    });
  });
  return any && fits;
}

template <class S>
bool backward_typed(int device, const SdpaParams& p, const View& dout, const SdpaGradViews& g) {
  Args<float, S> a = make_args<float, S>(p);
  set_grad_args(a, dout, g);
  const Vectorized vec = vectorized(p, dout);
  const int optin = shared_optin(device);
  bool fits = false;
  const bool any = with_head_width(std::max(a.Dqk, a.Dv), [&](auto width) {
    constexpr int kD = decltype(width)::value;
    with_slices<kD>([&](auto slices) {
      constexpr int kM = decltype(slices)::value;
      constexpr size_t smem = std::max(smem_dq<S, kD, kM>, smem_dkv<S, kD>);
      if (smem > static_cast<size_t>(optin)) return;
      fits = true;
      cudaStream_t s = enter(device);
      const int64_t rows = a.B * a.Hq * a.Sq;
      Scratch delta(std::max<int64_t>(rows, 1) * sizeof(float), device);
      a.delta = delta.as<float>();
      if (rows) {
        delta_kernel<S>
            <<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kBlockThreads, 0, s>>>(a);
        check_launch("sdpa mma delta kernel");
        launch(backward_dq_kernel<S, kD, kM>, a.B * a.Hq * ((a.Sq + kM * kRows - 1) / (kM * kRows)),
               smem_dq<S, kD, kM>, s, a, vec, "sdpa mma backward dq kernel");
      }
      const int64_t kv_blocks = a.B * a.Hk * ((a.Skv + kRows - 1) / kRows);
      if (kv_blocks == 0) return;
      if constexpr (kD > 128) {
        launch(backward_dkv_kernel<S, kD, kDvOnly>, kv_blocks, smem_dkv<S, kD>, s, a, vec,
               "sdpa mma backward dv kernel");
        launch(backward_dkv_kernel<S, kD, kDkOnly>, kv_blocks, smem_dkv<S, kD>, s, a, vec,
               "sdpa mma backward dk kernel");
      } else {
        launch(backward_dkv_kernel<S, kD, kDkAndDv>, kv_blocks, smem_dkv<S, kD>, s, a, vec,
               "sdpa mma backward dk/dv kernel");
      }
    });
  });
  return any && fits;
}

}  // namespace

bool sdpa_mma_forward(int device, const SdpaParams& p) {
  if (!cuda_sdpa_tensor_cores()) return false;
  if (p.q.dtype == kBFloat16) return forward_typed<__nv_bfloat16>(device, p);
  if (p.q.dtype == kFloat16) return forward_typed<__half>(device, p);
  if (p.q.dtype == kFloat32 && float32_tf32_allowed()) return forward_typed<float>(device, p);
  return false;
}

bool sdpa_mma_backward(int device, const SdpaParams& p, const View& dout, const SdpaGradViews& g) {
  if (!cuda_sdpa_tensor_cores()) return false;
  if (p.q.dtype == kBFloat16) return backward_typed<__nv_bfloat16>(device, p, dout, g);
  if (p.q.dtype == kFloat16) return backward_typed<__half>(device, p, dout, g);
  if (p.q.dtype == kFloat32 && float32_tf32_allowed())
    return backward_typed<float>(device, p, dout, g);
  return false;
}

}  // namespace tg::cuda

namespace tg {
namespace {
// -1: not yet read from TAPEGRAD_CUDA_SDPA_TENSOR_CORES.
std::atomic<int> tensor_cores{-1};
}  // namespace

bool cuda_sdpa_tensor_cores() {
  int on = tensor_cores.load();
  if (on < 0) {
    const char* env = std::getenv("TAPEGRAD_CUDA_SDPA_TENSOR_CORES");
    on = env && std::strcmp(env, "0") == 0 ? 0 : 1;
    int expected = -1;
    tensor_cores.compare_exchange_strong(expected, on);
    on = tensor_cores.load();
  }
  return on == 1;
}

void set_cuda_sdpa_tensor_cores(bool on) { tensor_cores.store(on ? 1 : 0); }

}  // namespace tg
