// The warp-level pieces the tensor-core SDPA kernels (cuda_sdpa_mma_*.cu, cuda_sdpa_wgmma_*.cu)
// are built from: the block and tile shapes, the shared tiles' layouts and the rows' copy into
// them (cp.async or element loads), the key and query tiles a block walks, the two tile products
// of a warp (A B^T and P M) on mma.sync, the accumulator's rows and columns, the rows' store,
// and the double-buffered copy pipeline's step. The score rules on the fragments:
// cuda_sdpa_mma_rules.cuh.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/cuda/cuda_mma.cuh"
#include "backends/cuda/cuda_sdpa_args.cuh"
#include "backends/cuda/mma_layout.h"
#include "backends/cuda/wgmma_layout.h"

namespace tg::cuda::mma_sdpa {

constexpr int kWarps = 4;
constexpr int kBlockThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;  // a block's key rows (dK/dV), or query rows per slice:
// the forward and the dQ pass give each warp kM slices of 16 query rows, kM = 1 or 2
// (cuda_sdpa_warp_rows(), head dims up to 128), so a block takes kM kRows query rows.

// S, the type of q, k, v in shared memory: bfloat16 or float16 (m16n8k16 products), or float
// (float32 split into TF32 halves, m16n8k8 products: "3xTF32", cuda_mma.cuh).
template <class S>
constexpr bool kTf32 = std::is_same_v<S, float>;
// Float rows above head dim 64 take 528 bytes of shared memory or more (twice a 16-bit row):
// their walked tiles are narrower, so that two blocks fit on a multiprocessor (with 64-row
// tiles one did: 6% occupancy, the tensor pipe 13-29% busy, at D 128 on an H100).
template <class S, int kD>
constexpr bool kWideFloat = kD > 64 && kTf32<S>;
constexpr int kWalk = 64;  // rows of a walked tile, but for head dims above 128 ...
template <class S, int kD>
constexpr int kBackwardWalk = kWideFloat<S, kD> ? 16
                              : kD > 128        ? 32
                                                : kWalk;  // ... whose backward walks 32 rows
// The keys a forward tile walks: 32 above head dim 128, with two slices above 64 (a thread's
// scores and sums for two slices of 64 keys and 128 columns spilled 432 bytes, and ran 1.29 ms
// against 1.07 at bf16 S 8192 D 128 on an H100), and for wide float rows. The plain-only
// kernels (kPlainOnly) walk 64 with two slices at 128, as FlashAttention-2 does (the plain path
// alone leaves fewer registers live: 11 spilled loads and 3 stores a tile of 256 products), and
// 32 with one slice above 64, so that four blocks fit in a multiprocessor (kForwardBlocks).
template <class S, int kD, int kM, bool kPlainOnly = false>
constexpr int kForwardKeys = kD > 128 || kWideFloat<S, kD> ||
                                     (kD > 64 && (kPlainOnly ? kM == 1 : kM == 2))
                                 ? 32
                                 : kWalk;
// The keys a dQ tile walks: as the backward's walk with one slice, 32 with two (S and dP of
// two slices) and for the plain-only kernel above head dim 64 (three blocks a multiprocessor:
// kDqBlocks), 16 for wide float rows.
template <class S, int kD, int kM, bool kPlainOnly = false>
constexpr int kDqKeys = kWideFloat<S, kD>                    ? 16
                        : kM == 2 || (kPlainOnly && kD > 64) ? 32
                                                             : kBackwardWalk<S, kD>;
template <class S>
constexpr int kStep = kTf32<S> ? 8 : 16;  // k of one product
template <class S>
constexpr int kPerCopy = 16 / static_cast<int>(sizeof(S));  // values in a 16-byte copy
template <class S, int kD>
constexpr int kPitch = kD + kPerCopy<S>;  // a shared row: 16 bytes more than kD values

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNegInf = -kInf;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// The forward moves a row's base maximum when a tile exceeds it by more than this (log2 units).
constexpr float kRescaleLog2 = 8.0f;
// A probability is exp2_ftz(fmaf(s, scale_log2, -base)) of a raw product s: one instruction
// before the exponential, but the product inside the fma is not rounded, while the base (the
// row's largest product times scale_log2, or its statistic) is. The difference is half an
// ulp of the base at most: below 2^-5 under this magnitude (log2 units), but 512 at 2^33
// (scores near 10^9), where exp2 overflows to inf or gives 0 for the row's largest score.
// Rows whose base is this large round their products first (scale_huge_row).
constexpr float kHugeLog2 = 1048576.0f;  // 2^20

// Which row views allow 16-byte copies (cp.async): unit inner stride, other strides multiples
// of 16 bytes, 16-byte aligned data, widths multiples of 16 bytes.
struct Vectorized {
  bool q = false, k = false, v = false, dout = false;
};

// The (b, h) slice of a (B, H, S, D) row view at strides st.
template <class S>
__device__ __forceinline__ const S* slice(const S* rows, const int64_t* st, int64_t b, int64_t h) {
  return rows + b * st[0] + h * st[1];
}

template <class S>
__device__ __forceinline__ S round_to(float x) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return __float2bfloat16_rn(x);
  } else if constexpr (std::is_same_v<S, __half>) {
    return __float2half_rn(x);
  } else {
    return x;
  }
}

// Shared tiles of rows: Pitched, rows of kPitch<S, kD> values (mma.sync's ldmatrix reads);
// Swizzled, wgmma's 128-byte swizzle mode for a tile of kTileRows rows (wgmma_layout.h). at(t,
// r, c): where 16-byte chunk c of row r lies; kRowValues: how far the same chunk lies a row
// down, in values (for Swizzled, the same within a panel, 8 rows down: row % 8 picks the
// swizzle); element(t, r, d): value d of row r.
template <class S, int kD>
struct Pitched {
  static constexpr int kRowValues = kPitch<S, kD>;
  static __device__ __forceinline__ S* at(S* tile, int r, int c) {
    return tile + r * kPitch<S, kD> + c * kPerCopy<S>;
  }
  static __device__ __forceinline__ S* element(S* tile, int r, int d) {
    return tile + r * kPitch<S, kD> + d;
  }
};
template <class S, int kTileRows>
struct Swizzled {
  static constexpr int kRowValues = wgmma::kRowBytes / static_cast<int>(sizeof(S));
  static __device__ __forceinline__ S* at(S* tile, int r, int c) {
    return reinterpret_cast<S*>(reinterpret_cast<unsigned char*>(tile) +
                                wgmma::chunk_offset(r, c, kTileRows));
  }
  static __device__ __forceinline__ S* element(S* tile, int r, int d) {
    return at(tile, r, d / kPerCopy<S>) + d % kPerCopy<S>;
  }
};

// Rows row0 .. row0 + kN - 1 of one (b, h) slice (`base`, row stride st[2], column stride
// st[3]) into `dst` (laid out as Tile says), zeros from row `row_end` on and past column
// `width`; with `at`, row r of the view is row at[r]. cp.async when `vec`, else plain loads; by
// kThreads threads, this one the `thread`-th (the block's, unless a group of them copies;
// unsigned, as threadIdx.x is: its division by the chunks is then unsigned, as it always was).
template <class S, int kD, int kN, int kThreads = kBlockThreads, class Tile = Pitched<S, kD>>
__device__ __forceinline__ void load_rows(S* dst, const S* base, const int64_t* st, int64_t row0,
                                          int64_t row_end, int64_t width, const int64_t* at,
                                          bool vec, unsigned thread = threadIdx.x) {
  constexpr int kC = kPerCopy<S>;
  if (vec) {
    // Each thread copies the same 16-byte column chunk c of rows r, r + kStride, ...: the
    // index arithmetic is done once, not per chunk (it was most of the forward's per-tile
    // instructions); `at` is tested outside the unrolled copies.
    constexpr int kChunks = kD / kC, kStride = kThreads / kChunks;
    static_assert(kThreads % kChunks == 0 && kN % kStride == 0);
    const int c = thread % kChunks, r0 = thread / kChunks;
    // A thread's rows are kStride apart: for Swizzled, a multiple of 8 (the same swizzle).
    static_assert(kStride % 8 == 0 || Tile::kRowValues == kPitch<S, kD>);
    const bool col = c * kC < width;
    const S* src_col = base + c * kC;
    S* dst_col = Tile::at(dst, r0, c);
    const auto copy = [&](auto indexed) {
#pragma unroll
      for (int k = 0; k < kN / kStride; ++k) {
        const int64_t row = row0 + r0 + k * kStride;
        const bool valid = col && row < row_end;
        int64_t src_row = row;
        if constexpr (decltype(indexed)::value) src_row = valid ? at[row] : 0;
        mma::cp_async_16(dst_col + k * kStride * Tile::kRowValues,
                         valid ? src_col + src_row * st[2] : base, valid);
      }
    };
    if (at)
      copy(std::true_type{});
    else
      copy(std::false_type{});
  } else {
    for (int idx = thread; idx < kN * kD; idx += kThreads) {
      const int r = idx / kD, d = idx % kD;
      const int64_t row = row0 + r;
      S x = round_to<S>(0.0f);
      if (row < row_end && d < width) x = base[(at ? at[row] : row) * st[2] + d * st[3]];
      *Tile::element(dst, r, d) = x;
    }
  }
}

// Where a forward or dQ block of `rows` query rows lies: its first row i0, head h, key/value
// head hk, batch b and b's sequence (i0 may lie past a ragged sequence's rows: the whole block
// then has nothing to do). Under causal masking a block's work grows with i0, so the blocks are
// numbered heaviest first (every head's last query tile, then the tiles before it): the blocks
// that start last are the shortest, and the final wave does not trail (longest first).
struct QueryBlock {
  int64_t i0, h, hk, b;
  SdpaSequence sq;
};
template <class S>
__device__ __forceinline__ QueryBlock query_block(const Args<float, S>& a, int64_t rows) {
  const int64_t tiles = (a.Sq + rows - 1) / rows, blk = blockIdx.x, heads = a.B * a.Hq;
  const int64_t tile = a.causal ? tiles - 1 - blk / heads : blk % tiles;
  const int64_t head = a.causal ? blk % heads : blk / tiles;  // b Hq + h
  QueryBlock q;
  q.i0 = tile * rows;
  q.h = head % a.Hq;
  q.b = head / a.Hq;
  q.hk = q.h / (a.Hq / a.Hk);
  q.sq = a.seq(q.b);
  return q;
}

// The key tiles of kN keys a forward or dQ block walks: n of them from key lo, covering
// [lo, hi), the keys some of the block's rows may see (causal, window, padding: key_range).
// A warp skips the tiles outside [warp_lo, warp_hi), the keys some of its own rows may see
// (empty for a warp past the sequence's rows): every score there is hidden.
template <int kN>
struct KeyTiles {
  int64_t lo = 0, hi = 0, warp_lo = 0, warp_hi = 0;
  // 32 bits, so that the loop's counters take a register each (2^31 tiles of keys would not fit
  // in a device's memory).
  int n = 0;
  __device__ __forceinline__ int64_t first_key(int it) const { return lo + int64_t{it} * kN; }
  __device__ __forceinline__ bool warp_skips(int64_t j0) const {
    return j0 >= warp_hi || j0 + kN <= warp_lo;
  }
};
template <int kN, class S>
__device__ __forceinline__ KeyTiles<kN> key_tiles(const Args<float, S>& a, const SdpaSequence& sq,
                                                  int64_t i0, int rows, int64_t row_w,
                                                  int warp_rows) {
  KeyTiles<kN> t;
  key_range(a, sq, i0, rows, t.lo, t.hi);
  t.n = static_cast<int>((t.hi - t.lo + kN - 1) / kN);
  if (row_w < sq.rows_q) key_range(a, sq, row_w, warp_rows, t.warp_lo, t.warp_hi);
  return t;
}

// The query tiles of kN rows a dK/dV block walks, for its keys [j0, j0 + keys): the rows
// [lo, hi) that can see one of them, of every query head of key head hk's group (G heads), in
// order; n of them. Each tile's successor comes by an addition (dividing a tile's index by
// per_head took a 64-bit division routine twice per tile).
struct QueryTile {
  int64_t h, i0;  // head, first row
};
template <int kN>
struct QueryWalk {
  int64_t lo = 0, hi = 0, end = 0, n = 0;
  __device__ __forceinline__ QueryTile after(QueryTile t) const {
    return t.i0 + kN < end ? QueryTile{t.h, t.i0 + kN} : QueryTile{t.h + 1, lo};
  }
};
template <int kN, class S>
__device__ __forceinline__ QueryWalk<kN> query_walk(const Args<float, S>& a, const SdpaSequence& sq,
                                                    int64_t j0, int keys, int64_t G) {
  const int64_t j_last = min(j0 + keys, sq.rows_kv) - 1;
  const IndexRange rows =
      sdpa_query_range(a.causal, a.window, sq.shift, j0, j_last, j0 < sq.len_kv ? sq.len_q : 0);
  QueryWalk<kN> w;
  w.lo = rows.lo;
  w.hi = rows.hi;
  const int64_t per_head = w.hi > w.lo ? (w.hi - w.lo + kN - 1) / kN : 0;
  w.n = G * per_head;
  w.end = w.lo + per_head * kN;
  return w;
}

// A walked query tile's statistics (log2 units) and D into shared lse and dl, a thread a row
// (the block's first kN threads).
template <int kN, class S>
__device__ __forceinline__ void load_row_stats(const Args<float, S>& a, const SdpaSequence& sq,
                                               int64_t b, QueryTile t, float* lse, float* dl) {
  const int64_t row_base = (b * a.Hq + t.h) * a.Sq;
  if (const int r = threadIdx.x; r < kN) {  // one row each
    const bool in = t.i0 + r < sq.rows_q;
    lse[r] = in ? a.stat(b, t.h, sq.q0 + t.i0 + r) * kLog2e : kNegInf;
    dl[r] = in ? a.delta[row_base + t.i0 + r] : 0.0f;
  }
}

// The same, copied asynchronously (cp.async, in the caller's current group), as they are: the
// statistics in natural-log units, zeros for rows past the sequence (where the tiles' edge rules
// hide every product). The warps that copy then need not wait for the loads at once (their
// wait held the whole block at its next barrier: the wgmma dK/dV pass spent 5% of its time
// there at head dim 64 on an H100). finish_row_stats, by the same threads once the copies have
// landed, turns the statistics into log2 units.
template <int kN, class S>
__device__ __forceinline__ void copy_row_stats(const Args<float, S>& a, const SdpaSequence& sq,
                                               int64_t b, QueryTile t, float* lse, float* dl) {
  if (const int r = threadIdx.x; r < kN) {  // one row each
    const bool in = t.i0 + r < sq.rows_q;
    const int64_t i = in ? t.i0 + r : 0;  // a row that exists: nothing is read where !in
    mma::cp_async_4(lse + r, &a.stat(b, t.h, sq.q0 + i), in);
    mma::cp_async_4(dl + r, a.delta + (b * a.Hq + t.h) * a.Sq + i, in);
  }
}
template <int kN>
__device__ __forceinline__ void finish_row_stats(float* lse) {
  if (const int r = threadIdx.x; r < kN) lse[r] *= kLog2e;
}

// Keys j0 .. j0 + kN - 1 of block q's key/value head: its key rows, or its value rows
// (kValues), into dst (`at`: the forward's rows read through an index, else null), by the
// `thread`-th of kThreads threads (as load_rows).
template <bool kValues, class S, int kD, int kN, int kThreads = kBlockThreads,
          class Tile = Pitched<S, kD>>
__device__ __forceinline__ void load_kv_rows(const Args<float, S>& a, const QueryBlock& q, S* dst,
                                             int64_t j0, const int64_t* at, const Vectorized& vec,
                                             unsigned thread = threadIdx.x) {
  const int64_t kv_end = q.sq.kv0 + q.sq.rows_kv;
  if constexpr (kValues) {
    load_rows<S, kD, kN, kThreads, Tile>(dst, slice(a.v, a.vs, q.b, q.hk), a.vs, q.sq.kv0 + j0,
                                         kv_end, a.Dv, at, vec.v, thread);
  } else {
    load_rows<S, kD, kN, kThreads, Tile>(dst, slice(a.k, a.ks, q.b, q.hk), a.ks, q.sq.kv0 + j0,
                                         kv_end, a.Dqk, at, vec.k, thread);
  }
}
// Both, into Ks and Vs.
template <class S, int kD, int kN, int kThreads = kBlockThreads, class Tile = Pitched<S, kD>>
__device__ __forceinline__ void load_kv_tile(const Args<float, S>& a, const QueryBlock& q, S* Ks,
                                             S* Vs, int64_t j0, const int64_t* at,
                                             const Vectorized& vec) {
  load_kv_rows<false, S, kD, kN, kThreads, Tile>(a, q, Ks, j0, at, vec);
  load_kv_rows<true, S, kD, kN, kThreads, Tile>(a, q, Vs, j0, at, vec);
}

// The A fragments of kM row slices as S's products take them: the registers themselves
// (16-bit), or split into TF32 halves (float), once for every column tile of their k-step.
template <class S, int kM>
struct Operands {
  const uint32_t (&regs)[kM][4];
  // One slot where nothing is split (the branches are alike when kM is 1).
  mma::SplitFragment<4> split[kTf32<S> ? kM : 1];  // NOLINT(bugprone-branch-clone)
  __device__ explicit Operands(const uint32_t (&af)[kM][4]) : regs(af) {
    if constexpr (kTf32<S>) {
#pragma unroll
      for (int m = 0; m < kM; ++m) split[m] = mma::split_fragment(af[m]);
    }
  }
  __device__ decltype(auto) operator[](int m) const {
    if constexpr (kTf32<S>) {
      return (split[m]);
    } else {
      return (regs[m]);
    }
  }
};

// d += A B for one 16 x 8 C tile in S's mode: one m16n8k16 product, or three TF32 m16n8k8
// ones (A from Operands, B's two registers as loaded).
template <class S, class A>
__device__ __forceinline__ void tile_product(float (&d)[4], const A& a, uint32_t b0, uint32_t b1) {
  if constexpr (kTf32<S>) {
    const uint32_t b[2] = {b0, b1};
    mma::mma_1688_3xtf32(d, a, mma::split_fragment(b));
  } else {
    mma::mma_16816<S>(d, a, b0, b1);
  }
}

// acc[m] (16 x kN, as kN / 8 C tiles) += A_m B^T for a warp's kM slices of 16 rows: A_m its
// rows 16 m .. 16 m + 15 from A (kD values each, shared, pitch kPitch<S, kD>), B kN rows of kD
// values. Both operands read by ldmatrix without transpose (float rows as pairs of 16-bit
// values, mma_layout.h). Each B fragment is read once for all kM slices: with two slices a
// warp reads half the shared bytes per product that it reads with one (FlashAttention-2's
// 32 rows per warp).
template <class S, int kD, int kN, int kM>
__device__ __forceinline__ void warp_abt(const S* A, const S* B, float (&acc)[kM][kN / 8][4]) {
  constexpr int kP = kPitch<S, kD>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < kD / kStep<S>; ++kk) {
    uint32_t af[kM][4];
    const mma::RowCol at = kTf32<S> ? mma::a_address_tf32(lane, kk) : mma::a_address(lane, kk);
#pragma unroll
    for (int m = 0; m < kM; ++m) mma::ldmatrix_x4(af[m], A + (16 * m + at.row) * kP + at.col);
    const Operands<S, kM> a(af);
#pragma unroll
    for (int np = 0; np < kN / 16; ++np) {
      uint32_t bf[4];  // b0, b1 of column tile 2 np, then of 2 np + 1
      const mma::RowCol bt =
          kTf32<S> ? mma::bt_address_tf32(lane, np, kk) : mma::bt_address(lane, np, kk);
      mma::ldmatrix_x4(bf, B + bt.row * kP + bt.col);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        tile_product<S>(acc[m][2 * np], a[m], bf[0], bf[1]);
        tile_product<S>(acc[m][2 * np + 1], a[m], bf[2], bf[3]);
      }
    }
  }
}
// One slice of 16 rows.
template <class S, int kD, int kN>
__device__ __forceinline__ void warp_abt(const S* A, const S* B, float (&acc)[kN / 8][4]) {
  warp_abt<S, kD, kN, 1>(A, B, reinterpret_cast<float(&)[1][kN / 8][4]>(acc));
}

// The A fragments of a product whose A is a warp's 16 x kN accumulator: k-step kk covers
// columns kStep kk .. kStep (kk + 1) - 1.
template <class S, int kN>
using AFragments = uint32_t[kN / kStep<S>][4];

// acc[m] (16 x kD, as kD / 8 C tiles) += P_m M for a warp's kM slices: P_m its 16 x kN values
// as A fragments, M kN rows of kD values in shared memory (pitch kP: another width's rows, of
// which M's kD columns are a part), read transposed by ldmatrix (16-bit), or value by value in
// the k order the float fragments carry (mma_layout.h, pv_b_row_tf32), once for all slices.
template <class S, int kD, int kN, int kM, int kP = kPitch<S, kD>>
__device__ __forceinline__ void warp_pv(const AFragments<S, kN> (&p)[kM], const S* M,
                                        float (&acc)[kM][kD / 8][4]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < kN / kStep<S>; ++kk) {
    uint32_t pk[kM][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int r = 0; r < 4; ++r) pk[m][r] = p[m][kk][r];
    }
    const Operands<S, kM> a(pk);
    if constexpr (kTf32<S>) {
      const S* m0 = M + mma::pv_b_row_tf32(lane, kk, 0) * kP + lane / 4;
#pragma unroll
      for (int dt = 0; dt < kD / 8; ++dt) {
        const uint32_t b0 = __float_as_uint(m0[dt * 8]), b1 = __float_as_uint(m0[kP + dt * 8]);
#pragma unroll
        for (int m = 0; m < kM; ++m) tile_product<S>(acc[m][dt], a[m], b0, b1);
      }
    } else {
#pragma unroll
      for (int dp = 0; dp < kD / 16; ++dp) {
        uint32_t bf[4];  // b0, b1 of column tile 2 dp, then of 2 dp + 1
        const mma::RowCol bm = mma::b_address(lane, kk, dp);
        mma::ldmatrix_x4_trans(bf, M + bm.row * kP + bm.col);
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          tile_product<S>(acc[m][2 * dp], a[m], bf[0], bf[1]);
          tile_product<S>(acc[m][2 * dp + 1], a[m], bf[2], bf[3]);
        }
      }
    }
  }
}
// One slice of 16 rows.
template <class S, int kD, int kN, int kP = kPitch<S, kD>>
__device__ __forceinline__ void warp_pv(const AFragments<S, kN>& p, const S* M,
                                        float (&acc)[kD / 8][4]) {
  warp_pv<S, kD, kN, 1, kP>(reinterpret_cast<const AFragments<S, kN>(&)[1]>(p), M,
                            reinterpret_cast<float(&)[1][kD / 8][4]>(acc));
}

// The A fragments of a warp's 16 rows from row0 of a matrix in shared memory (kN columns,
// pitch kP), every k-step, as warp_abt reads its A.
template <class S, int kN, int kP>
__device__ __forceinline__ void load_a_fragments(AFragments<S, kN>& f, const S* A, int row0) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < kN / kStep<S>; ++kk) {
    const mma::RowCol at = kTf32<S> ? mma::a_address_tf32(lane, kk) : mma::a_address(lane, kk);
    mma::ldmatrix_x4(f[kk], A + (row0 + at.row) * kP + at.col);
  }
}

// C tile nt's four values into the A fragments of the next product: rounded to 16 bits (C
// tile nt is half of k-step nt / 2), or as float bits (C tile nt is k-step nt).
template <class S, int kN>
__device__ __forceinline__ void to_a_fragment(AFragments<S, kN>& f, int nt, const float (&c)[4]) {
  if constexpr (kTf32<S>) {
#pragma unroll
    for (int e = 0; e < 4; ++e) f[nt][mma::a_slot_tf32(e)] = __float_as_uint(c[e]);
  } else {
    f[nt / 2][mma::a_slot(nt, 0)] = mma::pack2<S>(c[0], c[1]);
    f[nt / 2][mma::a_slot(nt, 1)] = mma::pack2<S>(c[2], c[3]);
  }
}

// A C tile's element e of this lane: its row in the warp's 16, its column in the tile.
__device__ __forceinline__ int frag_row(int e) { return mma::c_row(threadIdx.x % 32, e); }
__device__ __forceinline__ int frag_col(int nt, int e) {
  return mma::c_col(threadIdx.x % 32, nt, e);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// Whether a row's base (log2 units) is large enough to need its products rounded first:
// finite and kHugeLog2 or more.
__device__ __forceinline__ bool huge_base(float base) {
  const float m = fabsf(base);
  return m >= kHugeLog2 && m < kInf;
}
// Whether any of the warp's rows has such a base (the same in every lane). The kernels test
// it once a tile, and compute it where the bases change (the forward: at the tiles that move
// some row's base; the backward: once), so that the usual tile pays one uniform branch.
__device__ __forceinline__ bool warp_has_huge_base(bool lane_has) {
  return __any_sync(0xffffffffu, lane_has);
}
// Row r (elements 2 r and 2 r + 1 of each C fragment) of a tile's raw products s, where its base
// is huge: each product scaled and rounded in place, at most `cap` (NaN kept); *mul, the
// multiplier the exponent's fmaf takes afterwards, becomes 1. The forward's cap is +inf: a row's
// largest rounded product, its base, then gives exactly 0, and the rest at most kRescaleLog2.
// The backward caps at the row's statistic: P = 2^(s - lse) was at most 1 in the forward, and
// products recomputed in another order may round above it.
template <int kN>
__device__ __forceinline__ void scale_huge_row(float (&s)[kN / 8][4], int r, float base,
                                               float scale_log2, float cap, float* mul) {
  if (!huge_base(base)) return;
#pragma unroll
  for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
    for (int c = 0; c < 2; ++c) s[nt][2 * r + c] = mma::min_nan(s[nt][2 * r + c] * scale_log2, cap);
  }
  *mul = 1.0f;
}
// scale_huge_row of both rows of s, where the warp has a huge base (`huge`): the forward's rows
// uncapped, the backward's capped at their statistic, which is then `base` (cap_at_base).
template <int kN>
__device__ __forceinline__ void scale_huge_rows(bool huge, float (&s)[kN / 8][4],
                                                const float (&base)[2], float scale_log2,
                                                bool cap_at_base, float (&mul)[2]) {
  if (!huge) return;
#pragma unroll
  for (int r = 0; r < 2; ++r)
    scale_huge_row<kN>(s, r, base[r], scale_log2, cap_at_base ? base[r] : kInf, &mul[r]);
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Writes a warp's 16 x kD accumulator tile times `factor[r]` (per fragment row half) to rows
// row0 + ... of a (b, h) slice, rows below `rows` and columns below `width` only.
// 16-bit values in rows of unit stride, even width and 4-byte aligned rows (the usual
// contiguous outputs) go out as pairs of adjacent columns (a fragment's e and e + 1), one 4-byte
// store each from one row address a thread per row: Nsight Compute had the one-value stores,
// each with its own 64-bit address, at 8-11% of the wgmma kernels' time at head dim 64 (H100,
// docs/PERFORMANCE.md, session 40). Anything else goes value by value.
template <class S, int kD>
__device__ __forceinline__ void store_rows(S* out, const int64_t* st, int64_t b, int64_t h,
                                           int64_t first, int64_t row0, int64_t rows, int64_t width,
                                           const float (&acc)[kD / 8][4],
                                           const float (&factor)[2]) {
  if constexpr (sizeof(S) == 2) {
    S* const slice_out = out + b * st[0] + h * st[1];
    if (st[3] == 1 && width % 2 == 0 && st[2] % 2 == 0 &&
        reinterpret_cast<uintptr_t>(slice_out) % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t i = row0 + frag_row(2 * r);
        if (i >= rows) continue;
        S* const row = slice_out + (first + i) * st[2];
#pragma unroll
        for (int dt = 0; dt < kD / 8; ++dt) {
          const int d = frag_col(dt, 2 * r);  // even
          if (d < width)
            *reinterpret_cast<uint32_t*>(row + d) =
                mma::pack2<S>(acc[dt][2 * r] * factor[r], acc[dt][2 * r + 1] * factor[r]);
        }
      }
      return;
    }
  }
#pragma unroll
  for (int dt = 0; dt < kD / 8; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t i = row0 + frag_row(e), d = frag_col(dt, e);
      if (i < rows && d < width)
        out[at4(st, b, h, first + i, d)] = round_to<S>(acc[dt][e] * factor[e / 2]);
    }
  }
}

// Blocks per multiprocessor for the forward and the dQ pass (the registers __launch_bounds__
// allows a thread). With one slice per warp, three at head dims up to 64 (registers capped at
// 168): at two (193 and 242 registers) they ran 20% slower (H100: 12.5% occupancy against
// 18.5%). With two slices, two (up to 255 registers).
template <int kD, int kM>
constexpr int kBlocksPerSM = kD > 64   ? 1
                             : kM == 1 ? 3
                                       : 2;
// The plain-only kernels with one slice ask for more (ptxas, sm_90, 16-bit): the forward four
// at head dims 64 and 128 (128 registers; at 64, 3 spilled loads a tile, none at 128), the dQ
// pass four at 64 (128 registers) and three at 128 (168), neither spilling. Not yet timed.
template <int kD, int kM, bool kPlainOnly>
constexpr bool kOneSlicePlain = kM == 1 && (kD == 64 || kD == 128) && kPlainOnly;
template <int kD, int kM, bool kPlainOnly>
constexpr int kForwardBlocks = kOneSlicePlain<kD, kM, kPlainOnly> ? 4 : kBlocksPerSM<kD, kM>;
template <int kD, int kM, bool kPlainOnly>
constexpr int kDqBlocks = !kOneSlicePlain<kD, kM, kPlainOnly> ? kBlocksPerSM<kD, kM>
                          : kD == 64                          ? 4
                                                              : 3;

// The copy pipeline's step at tile `it` of n_tiles: starts copying tile it + 1 into the other
// buffer (load(tile, buffer)), waits for this thread's copies of tile it, then for the block.
// The caller's barrier at the end of each tile keeps a buffer from being refilled while read.
template <class I, class Load>
__device__ __forceinline__ void next_tile(I it, I n_tiles, Load&& load) {
  if (it + 1 < n_tiles) {
    load(it + 1, static_cast<int>((it + 1) & 1));
    mma::cp_async_commit();
    mma::cp_async_wait<1>();
  } else {
    mma::cp_async_wait<0>();
  }
  __syncthreads();
}

}  // namespace tg::cuda::mma_sdpa
