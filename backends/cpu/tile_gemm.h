// The small matrix products of the tiled CPU kernels (SDPA): a register-blocked micro-kernel
// over vectors of the build's widest registers (simd.h). Operands are tiles that already sit in
// L1/L2 (packed per key/value head by the caller), so there is no packing here: A is read
// by broadcasts at any strides, which covers A and A^T alike, and B row by row.
//
// Why not a BLAS: the tiles are 64 x 64 x 64 and smaller, where a library call costs its own
// packing of both operands on every call; OpenBLAS 0.3.21 also runs its Haswell (AVX2) kernels
// on AVX-512 Zen 4/5 machines. Measured in bench/bench_gemm.cpp and docs/PERFORMANCE.md.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "backends/cpu/simd.h"

namespace tg::cpu {

namespace tile_detail {

// Micro-tile: kRows rows of C by up to kVecs vectors of columns, all accumulators in registers
// (AVX-512: 6 x 4 zmm = 24 of 32 registers; AVX2 and SSE: 6 x 2 = 12 of 16).
inline constexpr int kRows = 6;
inline constexpr int kVecs = simd::kRegisters >= 32 ? 4 : 2;

// B's row k holds its vectors at b + k * ldb + j * bv: bv = W for a row-major B, the panel
// stride for one packed in panels of W columns (tile_gemm_panels).
template <class T, int MR, int NV>
[[gnu::always_inline]] inline void micro(int64_t kk, const T* a, int64_t am, int64_t ak, const T* b,
                                         int64_t ldb, int64_t bv, T* c, int64_t ldc,
                                         bool accumulate, const T* row_scale) {
  using V = simd::Vec<T>;
  constexpr int W = simd::kLanes<T>;
  V acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const V s = simd::splat(row_scale ? row_scale[i] : T(1));
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = accumulate ? simd::load(c + i * ldc + j * W) * s : V{};
  }
  // Two k steps per iteration: with AVX-512 code on a Zen 5 core the SDPA's tile products, timed
  // alone from L1, ran 1-8% faster (S = Q K^T 238 -> 254 GFLOP/s, O += P V 235 -> 250, dV +=
  // P^T dO 242 -> 245), the SDPA forward at (1, 8, 1024, 64) 2.4% (its backward, whose operands
  // come from L2, no faster); AVX2 code, at the core's peak already, is unchanged.
#pragma GCC unroll 2
  for (int64_t k = 0; k < kk; ++k) {
    const T* bk = b + k * ldb;
    const T* ap = a + k * ak;
    V bj[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bj[j] = simd::load(bk + j * bv);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const V ai = simd::splat(ap[i * am]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] += ai * bj[j];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) simd::store(c + i * ldc + j * W, acc[i][j]);
  }
}

template <class T>
using Panel = void (*)(int64_t m, int64_t k, const T* a, int64_t am, int64_t ak, const T* b,
                       int64_t ldb, int64_t bv, T* c, int64_t ldc, bool accumulate,
                       const T* row_scale);

// One column panel NV vectors wide, all m rows: kRows-row micro-tiles, then the remaining rows,
// every micro-kernel inlined. (A call per micro-tile cost 2-7% of a 64-deep product on Zen 4:
// the prologue and epilogue could not overlap the next tile's products.)
template <class T, int NV>
void panel(int64_t m, int64_t k, const T* a, int64_t am, int64_t ak, const T* b, int64_t ldb,
           int64_t bv, T* c, int64_t ldc, bool accumulate, const T* row_scale) {
  int64_t m0 = 0;
  for (; m0 + kRows <= m; m0 += kRows)
    micro<T, kRows, NV>(k, a + m0 * am, am, ak, b, ldb, bv, c + m0 * ldc, ldc, accumulate,
                        row_scale ? row_scale + m0 : nullptr);
  const int64_t rest = m - m0;
  [&]<int... R>(std::integer_sequence<int, R...>) {
    ((rest == R + 1 ? micro<T, R + 1, NV>(k, a + m0 * am, am, ak, b, ldb, bv, c + m0 * ldc, ldc,
                                          accumulate, row_scale ? row_scale + m0 : nullptr)
                    : void()),
     ...);
  }
  (std::make_integer_sequence<int, kRows - 1>{});
}

// A product of one or two rows (a decoding step's output, P V) takes panels of at least four
// vectors: a 1 x 2-vector micro-tile is two chains of dependent FMAs where the core overlaps
// eight, and each step waits on the one before. Wider spills with AVX2's 16 registers (1 x 128
// x 128 from L1 on a Zen 3 core: 1.42-1.44 us in panels of 2 vectors, 0.88-0.98 in panels of 4,
// 1.70-1.76 of 6, 1.77-2.10 of 8; two rows 1.45-1.48, 0.92-1.06, 2.72-3.49).
inline constexpr int kFewRowsVecs = kVecs > 4 ? kVecs : 4;

template <class T, size_t... I>
constexpr std::array<Panel<T>, sizeof...(I)> make_panels(std::index_sequence<I...>) {
  return {&panel<T, static_cast<int>(I) + 1>...};
}
// panels<T>[vecs - 1] handles a panel vecs vectors wide.
template <class T>
inline constexpr auto panels = make_panels<T>(std::make_index_sequence<kFewRowsVecs>{});

}  // namespace tile_detail

// Columns are counted in whole vectors: a tile's width is rounded up to this.
template <class T>
constexpr int64_t round_to_lanes(int64_t n) {
  constexpr int64_t w = simd::kLanes<T>;
  return (n + w - 1) / w * w;
}

// The row stride of a packed tile operand n columns wide: whole vectors, plus one cache line
// when the rows would be a multiple of 1 KiB apart. The micro-kernel reads B's rows one after
// the other down a 64-byte column slice; at a stride of 4 KiB (1024 keys of float32) every row
// falls in the same set of a 64-set, 8-way L1 and the slice never stays there (measured on a
// Zen 4 core with AVX2 code: S = Q K^T 64 x 128 x 64 at 67 GFLOP/s from a 1024-float stride,
// 105 from 1040; K^T is now packed in panels instead, see tile_gemm_panels). Row-major tiles
// (V, dO, the accumulators, the double backward's row caches) still use it.
template <class T>
constexpr int64_t packed_stride(int64_t n) {
  const int64_t ld = round_to_lanes<T>(n);
  return (ld * static_cast<int64_t>(sizeof(T))) % 1024 == 0 ? ld + 64 / sizeof(T) : ld;
}

namespace tile_detail {
// Column panels of kVecs vectors (kFewRowsVecs for one or two rows); B's vector n0 / W at
// b + (n0 / W) * bv.
template <class T>
void tile_gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t am, int64_t ak, const T* b,
               int64_t ldb, int64_t bv, T* c, int64_t ldc, bool accumulate, const T* row_scale) {
  constexpr int64_t W = simd::kLanes<T>;
  const int64_t vecs = m <= 2 ? kFewRowsVecs : kVecs;
  for (int64_t n0 = 0; n0 < n; n0 += vecs * W) {
    const int64_t nv = std::min<int64_t>(vecs, (n - n0) / W);
    panels<T>[nv - 1](m, k, a, am, ak, b + n0 / W * bv, ldb, bv, c + n0, ldc, accumulate,
                      row_scale);
  }
}
}  // namespace tile_detail

// C (m x n, row stride ldc) = [row_scale ⊙ C +] A B, where A(i, k) = a[i * am + k * ak] (a
// row-major A: am = lda, ak = 1; a transposed one: am = 1, ak = lda) and B is row-major k x n
// with row stride ldb. n must be a multiple of kLanes<T>: B and C are read and written over
// the whole width, so callers pad their tiles (padding columns of B with zeros keeps those of C
// finite). With row_scale, row i of C is first multiplied by row_scale[i] (the online
// softmax's rescaling, fused into the accumulator load).
template <class T>
void tile_gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t am, int64_t ak, const T* b,
               int64_t ldb, T* c, int64_t ldc, bool accumulate, const T* row_scale = nullptr) {
  tile_detail::tile_gemm(m, n, k, a, am, ak, b, ldb, simd::kLanes<T>, c, ldc, accumulate,
                         row_scale);
}

// The same with B packed in panels of W = kLanes<T> columns (load_transposed_panels,
// load_rows_panels in cpu_sdpa_scores.h): column j of row k
// at b[(j / W) * panel + k * W + j % W], each panel k x W contiguous, `panel` elements apart.
// A B whose rows are long (K^T over a whole sequence) otherwise puts each row of a tile on its
// own page: 64 rows of 4 KiB outgrow a Zen 3 core's 64-entry L1 TLB (S = Q K^T 64 x 128 x 64,
// AVX2 code, one Zen 3 core: 87 GFLOP/s from rows 1040 floats apart, 96.5 from 144).
template <class T>
void tile_gemm_panels(int64_t m, int64_t n, int64_t k, const T* a, int64_t am, int64_t ak,
                      const T* b, int64_t panel, T* c, int64_t ldc, bool accumulate,
                      const T* row_scale = nullptr) {
  tile_detail::tile_gemm(m, n, k, a, am, ak, b, simd::kLanes<T>, panel, c, ldc, accumulate,
                         row_scale);
}

namespace tile_detail {
// Lane l of fold<BS>(a, b): in each block of 2 BS lanes, the first BS lanes hold a's block folded
// in half (lane w: a[w] + a[w + BS]), the last BS lanes b's.
constexpr int fold_lo(int l, int bs, int w) {
  const int base = l / (2 * bs) * 2 * bs, i = l % (2 * bs);
  return i < bs ? base + i : w + base + i - bs;
}
constexpr int fold_hi(int l, int bs, int w) {
  const int base = l / (2 * bs) * 2 * bs, i = l % (2 * bs);
  return i < bs ? base + bs + i : w + base + i;
}
// op(x, y) is a + for sums and a max for maxima.
template <int BS, class V, class Op, size_t... L>
[[gnu::always_inline]] inline V fold(V a, V b, Op op, std::index_sequence<L...>) {
  constexpr int w = sizeof...(L);
  return op(__builtin_shufflevector(a, b, fold_lo(L, BS, w)...),
            __builtin_shufflevector(a, b, fold_hi(L, BS, w)...));
}
struct Plus {
  template <class V>
  V operator()(V a, V b) const {
    return a + b;
  }
};
// v[0] = the lane sums of v[0 .. n): lane l the sum of v[bit_reverse(l)]'s lanes (n = W vectors,
// folded pairwise in log2(W) rounds).
template <class T, int BS, class Op = Plus>
[[gnu::always_inline]] inline void fold_all(simd::Vec<T>* v, int n, Op op = {}) {
  for (int i = 0; i < n / 2; ++i)
    v[i] = fold<BS>(v[2 * i], v[2 * i + 1], op, std::make_index_sequence<simd::kLanes<T>>{});
  if constexpr (BS > 1) fold_all<T, BS / 2>(v, n / 2, op);
}
constexpr int bit_reverse(int j, int w) {
  int r = 0;
  for (int bit = 1; bit < w; bit <<= 1) r = (r << 1) | ((j & bit) ? 1 : 0);
  return r;
}
template <class V, size_t... L>
[[gnu::always_inline]] inline V bit_reversed(V v, std::index_sequence<L...>) {
  return __builtin_shufflevector(v, v, bit_reverse(static_cast<int>(L), sizeof...(L))...);
}
}  // namespace tile_detail

// Lane i of the result: v[i]'s lanes reduced by op (a + for sums, a max for maxima), for the
// W = kLanes<T> vectors v[0 .. W), which it overwrites. W rows' sums at once take log2(W)
// rounds of two shuffles and an op for all of them, where a row at a time takes that for each.
template <class T, class Op>
[[gnu::always_inline]] inline simd::Vec<T> reduce_each(simd::Vec<T>* v, Op op) {
  constexpr int W = simd::kLanes<T>;
  tile_detail::fold_all<T, W / 2>(v, W, op);
  return tile_detail::bit_reversed(v[0], std::make_index_sequence<W>{});
}

namespace tile_detail {
// tile_dots with B's row j holding its elements [x, x + W) at b + j * ldb + (x / W) * bk: bk = W
// for row-major rows, the panel stride for rows packed in panels (load_rows_panels).
template <class T>
void tile_dots(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
               int64_t bk, T* c, int64_t ldc) {
  using V = simd::Vec<T>;
  constexpr int W = simd::kLanes<T>;
  for (int64_t j0 = 0; j0 < n; j0 += W) {
    const int keys = static_cast<int>(std::min<int64_t>(W, n - j0));
    const T* bj = b + j0 * ldb;
    for (int64_t i = 0; i < m; ++i) {
      const T* ai = a + i * lda;
      V part[W] = {};
      if (keys == W) {
        for (int64_t x = 0; x < k; x += W) {
          const V av = simd::load(ai + x);
          const T* bx = bj + x / W * bk;
#pragma GCC unroll 16
          for (int j = 0; j < W; ++j) part[bit_reverse(j, W)] += av * simd::load(bx + j * ldb);
        }
      } else {
        for (int64_t x = 0; x < k; x += W) {
          const V av = simd::load(ai + x);
          const T* bx = bj + x / W * bk;
          for (int j = 0; j < keys; ++j) part[bit_reverse(j, W)] += av * simd::load(bx + j * ldb);
        }
      }
      fold_all<T, W / 2>(part, W);
      simd::store(c + i * ldc + j0, part[0]);
    }
  }
}
}  // namespace tile_detail

// C (m x n, row stride ldc) = A B^T for tiles of few rows: C(i, j) = row i of A (row stride lda)
// dotted with row j of B (row stride ldb), k elements each, k a multiple of kLanes<T>. A
// decoding step's scores, one or a few query rows against a block of keys, read K's rows where
// they lie: as tile_gemm's B, K^T would take a transpose of every key (more time than the
// products it feeds when each key meets one query row). W keys at a time, each a chain of
// k / W FMAs, their W partial vectors reduced together by shuffles. C's columns [n,
// round_to_lanes(n)) are written 0; B's rows past n are not read.
template <class T>
void tile_dots(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
               T* c, int64_t ldc) {
  tile_detail::tile_dots(m, n, k, a, lda, b, ldb, simd::kLanes<T>, c, ldc);
}

// The same with B's rows packed in panels of W = kLanes<T> columns (load_rows_panels): element
// x of row j at b[(x / W) * panel + j * W + x % W]. Each sum runs in tile_dots' order, so the
// scores come out bit for bit as from row-major rows.
template <class T>
void tile_dots_panels(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                      int64_t panel, T* c, int64_t ldc) {
  tile_detail::tile_dots(m, n, k, a, lda, b, simd::kLanes<T>, panel, c, ldc);
}

}  // namespace tg::cpu
