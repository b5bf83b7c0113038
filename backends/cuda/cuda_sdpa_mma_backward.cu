// The tensor-core SDPA's backward kernels (D = rowsum(dO * O), the dQ pass, the dK/dV pass)
// and their launch (overview in cuda_sdpa_mma.cu).
#include <algorithm>
#include <cstdint>
#include <string>

#include "backends/cuda/cuda_sdpa_dq_fixed.cuh"
#include "backends/cuda/cuda_sdpa_mma_launch.cuh"

namespace tg::cuda::mma_sdpa {
namespace {

template <class S>
__global__ void delta_kernel(Args<float, S> a) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  float dout_sq = 0;
  const float delta = delta_row(a, row, lane, a.dq_fixed ? &dout_sq : nullptr);
  if (a.dq_fixed) fixed_row_start(a, row, lane, delta, dout_sq);
}

// Under plain() options without dropout (the most common call) a backward tile runs no
// per-element rule but the edge tiles' visibility; other calls apply the rules out of line. For
// 16-bit inputs each kernel also comes as kPlainOnly, the plain path alone (plain_only()).

// dQ: the block's kM kRows query rows against every visible key tile.
template <class S, int kD, int kM, bool kPlainOnly>
__global__ void __launch_bounds__(kBlockThreads, kDqBlocks<kD, kM, kPlainOnly>)
    backward_dq_kernel(const __grid_constant__ Args<float, S> a, Vectorized vec) {
  constexpr int kN = kDqKeys<S, kD, kM, kPlainOnly>, kP = kPitch<S, kD>, kBlockRows = kM * kRows;
  extern __shared__ __align__(16) unsigned char smem[];
  S* Qs = reinterpret_cast<S*>(smem);
  S* dOs = Qs + kBlockRows * kP;
  S* Ks = dOs + kBlockRows * kP;  // two buffers of kN rows each
  S* Vs = Ks + 2 * kN * kP;
  const int warp = threadIdx.x / 32;
  const QueryBlock qb = query_block(a, kBlockRows);
  const int64_t i0 = qb.i0, h = qb.h, b = qb.b;
  const SdpaSequence& sq = qb.sq;
  if (i0 >= sq.rows_q) return;
  const int64_t q_end = sq.q0 + sq.rows_q;
  const int64_t row_base = (b * a.Hq + h) * a.Sq;  // delta's and the score gradient's rows
  const float slope = a.slope_of(h);
  load_rows<S, kD, kBlockRows>(Qs, slice(a.q, a.qs, b, h), a.qs, sq.q0 + i0, q_end, a.Dqk, nullptr,
                               vec.q);
  load_rows<S, kD, kBlockRows>(dOs, slice(a.dout, a.dos, b, h), a.dos, sq.q0 + i0, q_end, a.Dv,
                               nullptr, vec.dout);
  const int64_t row_w = i0 + 16 * kM * warp;  // slice m from row_w + 16 m
  const KeyTiles<kN> keys = key_tiles<kN>(a, sq, i0, kBlockRows, row_w, 16 * kM);
  const int64_t hi = keys.hi;
  const int n_tiles = keys.n;
  const auto load_kv = [&](int it, int buf) {
    load_kv_tile<S, kD, kN>(a, qb, Ks + buf * kN * kP, Vs + buf * kN * kP, keys.first_key(it),
                            nullptr, vec);
  };
  if (n_tiles > 0) load_kv(0, 0);
  mma::cp_async_commit();

  float lse[kM][2], dl[kM][2], lse_log2[kM][2];
  bool lane_huge = false;
#pragma unroll
  for (int sl = 0; sl < kM; ++sl) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = row_w + 16 * sl + frag_row(2 * r);
      lse[sl][r] = i < sq.rows_q ? a.stat(b, h, sq.q0 + i) : kNegInf;
      dl[sl][r] = i < sq.rows_q ? a.delta[row_base + i] : 0.0f;
      lse_log2[sl][r] = lse[sl][r] * kLog2e;
      lane_huge |= huge_base(lse_log2[sl][r]);
    }
  }
  const bool huge = warp_has_huge_base(lane_huge);  // rows whose products are rounded first
  const float scale_log2 = a.scale * kLog2e;
  // Under plain() options without dropout every tile recomputes P as the forward computed it
  // (exp2_ftz of the scaled product), and an edge tile then sets the dS of the keys a row does
  // not see to 0 (inline, hide_unseen); edge tiles under other options, or with dropout, apply
  // the rules out of line.
  const bool plain = a.plain();
  float dq[kM][kD / 8][4] = {};
  for (int it = 0; it < n_tiles; ++it) {
    const int buf = it & 1;
    const int64_t j0 = keys.first_key(it);
    next_tile(it, n_tiles, load_kv);
    if (keys.warp_skips(j0)) {  // every score gradient 0 (the mask's too: zeros already)
      __syncthreads();
      continue;
    }
    float s[kM][kN / 8][4] = {}, dp[kM][kN / 8][4] = {};
    warp_abt<S, kD, kN, kM>(Qs + 16 * kM * warp * kP, Ks + buf * kN * kP, s);
    warp_abt<S, kD, kN, kM>(dOs + 16 * kM * warp * kP, Vs + buf * kN * kP, dp);
    AFragments<S, kN> df[kM];
    const bool inner = interior(a, sq, row_w, 16 * kM, hi, j0, kN);
#pragma unroll
    for (int sl = 0; sl < kM; ++sl) {
      // dS = P (dP - D), P = exp2(s scale log2 e - lse log2 e)
      if (kPlainOnly || (plain && !(a.dropout_p > 0))) {
        float mul[2] = {scale_log2, scale_log2};
        scale_huge_rows<kN>(huge, s[sl], lse_log2[sl], scale_log2, true, mul);
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float p = mma::exp2_ftz(fmaf(s[sl][nt][e], mul[e / 2], -lse_log2[sl][e / 2]));
            s[sl][nt][e] = p * (dp[sl][nt][e] - dl[sl][e / 2]);
          }
        }
        // An edge tile: 0 for the keys a row does not see (their P may be inf: lse is -inf
        // in a row that sees none).
        if (!inner) hide_unseen<kN>(a, sq, row_w + 16 * sl, hi, j0, s[sl], 0.0f);
      } else {  // with dropout, or options that are not plain: edge tiles' rules out of line
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

// The warps of a dK/dV block, each owning 16 keys: four (two blocks to a multiprocessor), or
// eight (one) for 16-bit rows above head dim 128, and above 64 when the pass sums dQ, where the
// H100 ran them faster (docs/PERFORMANCE.md, session 36). A block reads each walked tile's Q and
// dO rows once for its keys, and adds its keys' share of the tile's dQ with atomic adds: at 64
// keys a block, those adds kept the L2 82% busy (head dim 128, bfloat16, Nsight Compute); 128
// keys halve them per product. At head dim 64, and for float rows, eight warps ran slower. Where
// eight warps' shared memory exceeds the device's (head dim 256 before sm_90), four run.
template <class S, int kD, bool kSumDq>
constexpr int kDkvWarps = !kTf32<S> && (kD > 128 || (kSumDq && kD > 64)) ? 8 : 4;

// With dQ summed in the dK/dV pass (kSumDq), a walked tile's dS is staged in shared memory for
// dQ += dS K: in the tile's dO buffer, read for the last time by then, where it fits, else in
// a region of its own. 16-bit: as dS^T (the block's kKeys keys by the kN query rows, pitch
// kPitch<S, kN>), a lane's two adjacent queries one 32-bit store, read back as dS's A
// fragments by ldmatrix .trans (at_address). Float: as dS (kN rows of kKeys keys), its keys in
// the column order that makes ldmatrix's A fragments the ones to_a_fragment builds
// (mma_layout.h: k slot t is column 2t, slot t + 4 column 2t + 1), which warp_pv's B follows.
template <class S, int kN, int kKeys>
constexpr int kDsValues = kTf32<S> ? kN* kPitch<S, kKeys> : kKeys* kPitch<S, kN>;
template <class S, int kD, int kKeys>
constexpr bool kDsInDo =
    kDsValues<S, kBackwardWalk<S, kD>, kKeys> <= kBackwardWalk<S, kD>* kPitch<S, kD>;

template <class S, int kN, int kKeys>
__device__ __forceinline__ void stage_ds(S* dS, const float (&ds_t)[kN / 8][4]) {
  const int key0 = 16 * (threadIdx.x / 32);  // the warp's keys, rows of ds_t
  if constexpr (kTf32<S>) {
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + frag_row(e), c = key % 8;
        dS[frag_col(nt, e) * kPitch<S, kKeys> + key - c + (c % 2 ? c / 2 + 4 : c / 2)] =
            ds_t[nt][e];
      }
    }
  } else {
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<uint32_t*>(dS + (key0 + frag_row(2 * r)) * kPitch<S, kN> +
                                     frag_col(nt, 0)) =
            mma::pack2<S>(ds_t[nt][2 * r], ds_t[nt][2 * r + 1]);
    }
  }
}

// The A fragments of the staged dS's 16 query rows from row0, every k-step (kKeys keys).
template <class S, int kN, int kKeys>
__device__ __forceinline__ void load_ds(AFragments<S, kKeys>& f, const S* dS, int row0) {
  if constexpr (kTf32<S>) {
    load_a_fragments<S, kKeys, kPitch<S, kKeys>>(f, dS, row0);
  } else {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const mma::RowCol at = mma::at_address(lane, kk);
      mma::ldmatrix_x4_trans(f[kk], dS + at.row * kPitch<S, kN> + row0 + at.col);
    }
  }
}

// Whether a slice's 16 rows from `first` and dQ's columns up to `end` are all real, and pairs
// of columns 8-byte aligned.
__device__ __forceinline__ bool interior_sums(int64_t first, int64_t rows, int end, int64_t width) {
  return first + 16 <= rows && end <= width && width % 2 == 0;
}

// dQ += dS K (times the scale at the end) for a walked tile of kN query rows from i0 of head h,
// dS staged as above: the share of those rows' dQ of a block of kW warps (16 kW keys), added
// into a.dq_sum, or a.dq_fixed in fixed point (cuda_sdpa_dq_fixed.cuh). The warps split the tile's
// 16-row slices and dQ's columns between them, and take the columns 64 at a time (a thread's sums
// for 128 would not fit beside the dK and dV ones).
template <class S, int kD, int kN, int kW>
__device__ __forceinline__ void add_dq(const Args<float, S>& a, const S* dS, const S* Ks, int64_t b,
                                       int64_t h, int64_t i0, const SdpaSequence& sq) {
  constexpr int kKeys = 16 * kW, kSlices = kN / 16, kSplit = kW / kSlices, kCols = kD / kSplit;
  constexpr int kPiece = kCols < 64 ? kCols : 64;
  static_assert(kN % 16 == 0 && kW % kSlices == 0 && kCols % kPiece == 0 && kPiece % 16 == 0);
  const int warp = threadIdx.x / 32, slice = warp % kSlices;
  const int col0 = warp / kSlices * kCols;
  AFragments<S, kKeys> ds;
  load_ds<S, kN, kKeys>(ds, dS, 16 * slice);
  const int64_t first = i0 + 16 * slice;  // the slice's first row
  const int64_t row_base = (b * a.Hq + h) * a.Sq;
  float inverse[2] = {};  // fixed point: the inverse units of the thread's two rows
  if (a.dq_fixed) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (const int64_t i = first + frag_row(2 * r); i < sq.rows_q)
        inverse[r] = fixed_inverse(a.dq_unit + row_base + i);
  }
#pragma unroll
  for (int piece = 0; piece < kCols / kPiece; ++piece) {
    const int c0 = col0 + piece * kPiece;
    float acc[kPiece / 8][4] = {};
    warp_pv<S, kPiece, kKeys, kPitch<S, kD>>(ds, Ks + c0, acc);
    // add(value, e, row, at) for each of the thread's values within the sequence's rows and
    // dQ's columns, `at` its place in the sums.
    const auto each = [&](auto add) {
#pragma unroll
      for (int dt = 0; dt < kPiece / 8; ++dt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t i = first + frag_row(e);
          const int d = c0 + frag_col(dt, e);
          if (i < sq.rows_q && d < a.Dqk)
            add(acc[dt][e], e, row_base + i, (row_base + i) * a.Dqk + d);
        }
      }
    };
    if (a.dq_fixed) {
      each([&](float v, int e, int64_t row, int64_t at) {
        add_fixed(a.dq_fixed + at, v, inverse[e / 2], a.dq_unit + row);
      });
    } else if (interior_sums(first, sq.rows_q, c0 + kPiece, a.Dqk)) {
      // One add per pair of columns from two row bases.
      float* at = a.dq_sum + (row_base + first + frag_row(0)) * a.Dqk + c0 + frag_col(0, 0);
      const int64_t down = 8 * a.Dqk;  // row g + 8
#pragma unroll
      for (int dt = 0; dt < kPiece / 8; ++dt) {
        mma::atomic_add2(at + 8 * dt, acc[dt][0], acc[dt][1]);
        mma::atomic_add2(at + down + 8 * dt, acc[dt][2], acc[dt][3]);
      }
    } else {
      each([&](float v, int, int64_t, int64_t at) { mma::atomic_add(a.dq_sum + at, v); });
    }
  }
}

// dK and dV: the block's kKeys = 16 kW key rows (16 a warp) against every query tile of every
// query head of the group that sees one of them, in order; with kSumDq, each tile's dS K added
// into dQ's sums too. Uncapped (about 250 registers at D 64, two blocks per SM): capped at three
// blocks it spilled 224 bytes and ran 5% slower (H100, bfloat16, D 64). The plain-only kernel
// of four warps at D 64 is capped at three (168 registers; 2 spilled loads a tile, 6 with dQ's
// sums; not yet timed).
template <int kD, int kW, bool kPlainOnly>
constexpr int kDkvBlocks = kD == 64 && kW == 4 && kPlainOnly ? 3 : 1;
template <class S, int kD, DkvPart kPart, bool kSumDq, int kW, bool kPlainOnly>
__global__ void __launch_bounds__(32 * kW, kDkvBlocks<kD, kW, kPlainOnly>)
    backward_dkv_kernel(const __grid_constant__ Args<float, S> a, Vectorized vec) {
  constexpr int kN = kBackwardWalk<S, kD>, kP = kPitch<S, kD>;
  constexpr int kKeys = 16 * kW, kThreads = 32 * kW;
  constexpr bool kWantK = kPart != kDvOnly, kWantV = kPart != kDkOnly;
  static_assert(!kSumDq || kWantK, "dQ's sums need dS, which the dK pass computes");
  extern __shared__ __align__(16) unsigned char smem[];
  S* Ks = reinterpret_cast<S*>(smem);
  S* Vs = Ks + kKeys * kP;
  S* Qs = Vs + kKeys * kP;  // two buffers of kN rows each
  S* dOs = Qs + 2 * kN * kP;
  float* lse_s = reinterpret_cast<float*>(dOs + 2 * kN * kP);  // two buffers of kN (log2 units)
  float* dl_s = lse_s + 2 * kN;
  S* ds_own = reinterpret_cast<S*>(dl_s + 2 * kN);  // dS's region when not in dO's buffer
  const int warp = threadIdx.x / 32;
  const int64_t tiles = (a.Skv + kKeys - 1) / kKeys, blk = blockIdx.x;
  const int64_t j0 = (blk % tiles) * kKeys, hk = (blk / tiles) % a.Hk, b = blk / (tiles * a.Hk);
  const SdpaSequence sq = a.seq(b);
  if (j0 >= sq.rows_kv) return;  // past a ragged sequence's keys (the whole block)
  const int64_t G = a.Hq / a.Hk, q_end = sq.q0 + sq.rows_q, kv_end = sq.kv0 + sq.rows_kv;
  load_rows<S, kD, kKeys, kThreads>(Ks, slice(a.k, a.ks, b, hk), a.ks, sq.kv0 + j0, kv_end, a.Dqk,
                                    nullptr, vec.k);
  if constexpr (kWantK)  // V is read only for dP, which only dK needs
    load_rows<S, kD, kKeys, kThreads>(Vs, slice(a.v, a.vs, b, hk), a.vs, sq.kv0 + j0, kv_end, a.Dv,
                                      nullptr, vec.v);
  // The query tiles that can see some key of the block.
  const QueryWalk<kN> walk = query_walk<kN>(a, sq, j0, kKeys, G);
  const int64_t i_hi = walk.hi, n_tiles = walk.n;
  const auto load_q = [&](QueryTile t, int buf) {
    const int64_t h = t.h, i0 = t.i0;
    load_rows<S, kD, kN, kThreads>(Qs + buf * kN * kP, slice(a.q, a.qs, b, h), a.qs, sq.q0 + i0,
                                   q_end, a.Dqk, nullptr, vec.q);
    load_rows<S, kD, kN, kThreads>(dOs + buf * kN * kP, slice(a.dout, a.dos, b, h), a.dos,
                                   sq.q0 + i0, q_end, a.Dv, nullptr, vec.dout);
    static_assert(kN <= kThreads);
    load_row_stats<kN>(a, sq, b, t, lse_s + buf * kN, dl_s + buf * kN);
  };
  QueryTile cur{hk * G, walk.lo};
  if (n_tiles > 0) load_q(cur, 0);
  mma::cp_async_commit();

  const int64_t key_w = j0 + 16 * warp;  // this warp's first key
  const float scale_log2 = a.scale * kLog2e;
  const bool plain = a.plain();  // as in the dQ pass
  float dk[kWantK ? kD / 8 : 1][4] = {}, dv[kWantV ? kD / 8 : 1][4] = {};
  for (int64_t it = 0; it < n_tiles; ++it) {
    const int buf = static_cast<int>(it & 1);
    const int64_t h = cur.h, i0 = cur.i0;
    const QueryTile next = walk.after(cur);
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
    if (kPlainOnly || (plain && !(a.dropout_p > 0))) {  // as in the dQ pass, transposed
      plain_grads_t<kN>(a, sq, inner, key_w, i_hi, i0, lse_s + buf * kN, dl_s + buf * kN,
                        scale_log2, st, dpt);
    } else {  // as in the dQ pass
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
            const bool valid = i < i_hi && j < sq.rows_kv;
            const ScoreGrad g = edge_score_grad(a, b, h, i, j, valid, st[nt][e] * a.scale,
                                                dpt[nt][e], lse, dl, slope, sq);
            dpt[nt][e] = g.ds;
            pd = g.pd;
            // The float mask's gradient, which the dQ pass writes when it runs.
            if (kSumDq && a.dscores && valid)
              a.dscores[((b * a.Hq + h) * a.Sq + i) * a.Skv + j] = g.raw;
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
    if constexpr (kSumDq) {  // dQ += dS K: dS staged, then the block's products
      constexpr bool kInDo = kDsInDo<S, kD, kKeys>;
      S* dS = kInDo ? dOs + buf * kN * kP : ds_own;
      if constexpr (kInDo) __syncthreads();  // every warp done with dO's buffer
      stage_ds<S, kN, kKeys>(dS, dpt);
      __syncthreads();
      add_dq<S, kD, kN, kW>(a, dS, Ks, b, h, i0, sq);
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

// dQ = dQ's sums (float, or fixed point) times the scale, into a.dq (one warp a row, rows of
// (B, Hq, Sq) as delta's).
template <class S>
__global__ void dq_store_kernel(Args<float, S> a) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= a.B * a.Hq * a.Sq) return;
  const int64_t i = row % a.Sq, h = (row / a.Sq) % a.Hq, b = row / (a.Sq * a.Hq);
  const SdpaSequence sq = a.seq(b);
  if (i >= sq.rows_q) return;
  const float unit = a.dq_fixed ? a.dq_unit[row] : 0.0f;
  for (int64_t d = threadIdx.x % 32; d < a.Dqk; d += 32) {
    const int64_t at = row * a.Dqk + d;
    const float sum = a.dq_fixed ? fixed_value(a.dq_fixed[at], unit) : a.dq_sum[at];
    a.dq[at4(a.dqs, b, h, sq.q0 + i, d)] = round_to<S>(sum * a.scale);
  }
}

// Shared memory of the dQ and dK/dV kernels at tile width kD (and kM slices per warp, or kKeys
// keys a block), in bytes.
// (The plain-only dQ kernel's is at most the other's: the host's check takes the other's.)
template <class S, int kD, int kM, bool kPlainOnly = false>
constexpr size_t smem_dq = (2 * kM * kRows + 4 * kDqKeys<S, kD, kM, kPlainOnly>)*kPitch<S, kD> *
                           sizeof(S);
template <class S, int kD, bool kSumDq = false, int kKeys = kRows>
constexpr size_t smem_dkv = (2 * kKeys + 4 * kBackwardWalk<S, kD>)*kPitch<S, kD> * sizeof(S) +
                            4 * kBackwardWalk<S, kD> * sizeof(float) +
                            (kSumDq && !kDsInDo<S, kD, kKeys>
                                 ? kDsValues<S, kBackwardWalk<S, kD>, kKeys> * sizeof(S)
                                 : 0);

// Whether the deterministic backward sums dQ in fixed point in the dK/dV pass, rather than in
// a pass of its own (tg::cuda_sdpa_deterministic_dq()): "auto" for float32 rows of head dims
// 65 to 128 alone, where the dQ pass's two recomputed products (three TF32 products each) cost
// more than the 64-bit adds (on an H100, docs/PERFORMANCE.md, session 45: forward+backward
// 13-17% faster there, 7% causal with GQA; at 64 and 256, and for 16-bit rows, the adds cost
// more).
template <class S, int kD>
bool fixed_point_dq() {
  const std::string mode = cuda_sdpa_deterministic_dq();
  return mode == "fixed" || (mode == "auto" && kTf32<S> && kD == 128);
}

}  // namespace

template <class S>
bool backward_typed(int device, const SdpaParams& p, const View& dout, const SdpaGradViews& g) {
  Args<float, S> a = make_args<float, S>(p);
  set_grad_args(a, dout, g);
  const Vectorized vec = vectorized(p, dout);
  const int optin = shared_optin(device);
  bool fits = false;
  const bool any = with_head_width(std::max(a.Dqk, a.Dv), [&](auto width) {
    constexpr int kD = decltype(width)::value;
    with_slices<S, kD>(a, device, [&](auto slices) {
      constexpr int kM = decltype(slices)::value;
      const int64_t rows = a.B * a.Hq * a.Sq;
      // dQ in a pass of its own (fixed order), or summed by the dK/dV pass: in fixed point
      // (deterministic), or in float (atomic adds in the blocks' order).
      const bool deterministic = cuda_sdpa_deterministic();
      const bool fixed = deterministic && rows > 0 && fixed_point_dq<S, kD>();
      const bool sum_dq = (!deterministic && rows > 0) || fixed;
      const size_t smem =
          sum_dq ? smem_dkv<S, kD, true> : std::max(smem_dq<S, kD, kM>, smem_dkv<S, kD>);
      if (smem > static_cast<size_t>(optin)) return;
      fits = true;
      cudaStream_t s = enter(device);
      Scratch delta(std::max<int64_t>(rows, 1) * sizeof(float), device);
      a.delta = delta.as<float>();
      Scratch dq_sum(sum_dq ? rows * a.Dqk * (fixed ? sizeof(uint64_t) : sizeof(float)) : 1,
                     device);
      a.dq_sum = sum_dq && !fixed ? dq_sum.as<float>() : nullptr;
      a.dq_fixed = fixed ? dq_sum.as<unsigned long long>() : nullptr;
      const int64_t bound_blocks = a.B * a.Hk * bound_chunks(a.Skv);
      Scratch units(fixed ? rows * sizeof(float) : 1, device);
      Scratch bounds(fixed ? 2 * bound_blocks * sizeof(float) : 1, device);
      a.dq_unit = fixed ? units.as<float>() : nullptr;
      a.kv_bounds = fixed ? bounds.as<float>() : nullptr;
      const bool plain = plain_only(a);
      if (fixed && bound_blocks > 0)
        launch<32>(kv_bounds_kernel<S>, bound_blocks, 0, s, "sdpa mma kv bounds kernel", a);
      if (rows) {
        launch(delta_kernel<S>, (rows + kWarps - 1) / kWarps, 0, s, "sdpa mma delta kernel", a);
        if (!sum_dq && !wgmma_backward_dq<S>(device, a, vec, s))
          with_kind<S>(plain, [&](auto kind) {
            constexpr bool kPlainOnly = decltype(kind)::value;
            static_assert(smem_dq<S, kD, kM, kPlainOnly> <= smem_dq<S, kD, kM>);
            launch(backward_dq_kernel<S, kD, kM, kPlainOnly>, query_blocks<kM>(a),
                   smem_dq<S, kD, kM, kPlainOnly>, s, "sdpa mma backward dq kernel", a, vec);
          });
      }
      const auto dkv = [&](auto part, auto sums, const char* name) {
        constexpr DkvPart kPart = decltype(part)::value;
        constexpr bool kSums = decltype(sums)::value;
        if (kPart == kDkAndDv && !kSums && wgmma_backward_dkv<S>(device, a, vec, s)) return;
        const auto run = [&](auto warps) {
          constexpr int kW = decltype(warps)::value;
          const int64_t blocks = a.B * a.Hk * ((a.Skv + 16 * kW - 1) / (16 * kW));
          if (blocks > 0)
            with_kind<S>(plain, [&](auto kind) {
              launch<32 * kW>(backward_dkv_kernel<S, kD, kPart, kSums, kW, decltype(kind)::value>,
                              blocks, smem_dkv<S, kD, kSums, 16 * kW>, s, name, a, vec);
            });
        };
        constexpr int kW = kDkvWarps<S, kD, kSums>;
        if (kW != kWarps && smem_dkv<S, kD, kSums, 16 * kW> <= static_cast<size_t>(optin))
          run(std::integral_constant<int, kW>{});
        else
          run(std::integral_constant<int, kWarps>{});
      };
      // Above head dim 128, dV and dK in passes of their own; dQ's sums go with dK.
      using Dk = std::integral_constant<DkvPart, (kD > 128 ? kDkOnly : kDkAndDv)>;
      const char* dk_name =
          kD > 128 ? "sdpa mma backward dk kernel" : "sdpa mma backward dk/dv kernel";
      if constexpr (kD > 128)
        dkv(std::integral_constant<DkvPart, kDvOnly>{}, std::false_type{},
            "sdpa mma backward dv kernel");
      if (sum_dq)
        dkv(Dk{}, std::true_type{}, dk_name);
      else
        dkv(Dk{}, std::false_type{}, dk_name);
      // Without keys every row's sums stay 0: the rows' dQ is 0.
      if (sum_dq)
        launch(dq_store_kernel<S>, (rows + kWarps - 1) / kWarps, 0, s, "sdpa mma dq store kernel",
               a);
    });
  });
  return any && fits;
}

template bool backward_typed<__nv_bfloat16>(int, const SdpaParams&, const View&,
                                            const SdpaGradViews&);
template bool backward_typed<__half>(int, const SdpaParams&, const View&, const SdpaGradViews&);
template bool backward_typed<float>(int, const SdpaParams&, const View&, const SdpaGradViews&);

}  // namespace tg::cuda::mma_sdpa
