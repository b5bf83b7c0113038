// SDPA on the CPU in the manner of FlashAttention-2: query tiles against key tiles with an
// online softmax; the backward rebuilds P from the saved logsumexp tile by tile. Nothing of
// size Sq x Skv is ever allocated (except the score gradient, when a float mask asks for it).
//
// Every tile product goes through tile_gemm's register-blocked micro-kernel. Its B operand is
// read row by row with whole vectors, so key/value heads are packed (K^T and V for the forward,
// once per thread whose run of query tiles reaches the head; K^T, K and V^T for the backward,
// once per task, a part of a head's keys; rows padded to whole vectors with zeros; K^T, V^T
// and the backward's K in panels of one vector's columns, so that a tile's rows of B share
// pages and spread over the L1's sets) and then read by every query tile of every query head
// of the group from that core's cache. Scores, P and dS stay in one kBr x kBc tile per
// thread (36 KiB at float32 with its row padding), where the score rules, the online softmax
// and the dropout run over whole vectors. O, dQ, dK and dV accumulate in the outputs' own rows
// where those are rows of whole vectors of the kernel's type (rows_to_accumulate), else in the
// thread's rows, copied out at the end.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "backends/cpu/aligned_buffer.h"
#include "backends/cpu/cost_split.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_sdpa_amx.h"
#include "backends/cpu/cpu_sdpa_scores.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/tile_gemm.h"
#include "backends/half_as_float.h"
#include "backends/scalar_ops.h"

namespace tg::cpu {
namespace {

using namespace sdpa_tiles;

// The row stride of the score tiles: kBc plus one cache line, so that the column walks of the
// transposed products (P^T dO, dS^T Q read a column of the tile per step) spread over the L1's
// sets rather than landing every 512 bytes in an eighth of them.
constexpr int64_t kLd = kBc + 16;

// One step of the online softmax over a tile of scores (rows x cols, padded to cp columns):
// raises the running max m, rescales the running sum l, turns the scores into exp(s - m) in
// place and leaves in alpha the factor by which each row's output accumulator must be scaled.
// m, l and alpha hold round_to_lanes(rows) entries. The per-row scalar steps (the horizontal
// max and sum, alpha's exp) run on W rows at a time between the passes: done row by row, each
// row's exp pass waited on a chain of dependent scalar operations (its max's reduction, then
// alpha's exp) about as long as the pass over its 128 keys (forward at (1, 8, 1024, 64), one
// Zen 4 core, AVX2: 24.1-24.4 ms row by row, 23.5-23.7 like this).
template <class T>
void online_softmax(T* s, int64_t ld, int64_t rows, int64_t cols, int64_t cp, T* m, T* l,
                    T* alpha) {
  using V = simd::Vec<T>;
  constexpr int64_t W = simd::kLanes<T>;
  const T ninf = -std::numeric_limits<T>::infinity();
  const int64_t rp = round_to_lanes<T>(rows);
  const auto max = [](V a, V b) { return simd::max(a, b); };
  const auto plus = [](V a, V b) { return a + b; };
  // Each row's partial (a max or a sum over whole vectors), reduced W rows at a time by
  // reduce_each (a lane at a time, row by row, was a quarter of this function's time: forward at
  // (1, 8, 1024, 64), one core of an Intel AVX-512 machine).
  V part[kBr];
  for (int64_t r = 0; r < rows; ++r) {
    T* row = s + r * ld;
    std::fill(row + cols, row + cp, ninf);
    V mx = simd::splat(m[r]);
    for (int64_t c = 0; c < cp; c += W) mx = simd::max(mx, simd::load(row + c));
    part[r] = mx;
  }
  for (int64_t r = rows; r < rp; ++r) part[r] = simd::splat(ninf);
  const V vninf = simd::splat(ninf), one = simd::splat(T(1));
  for (int64_t r0 = 0; r0 < rp; r0 += W) {
    const V mt = reduce_each<T>(part + r0, max);
    // exp(m - mt) <= 1, and 0 when m was -inf; 1 in rows with nothing visible yet (mt = -inf).
    const V a = simd::exp_nonpositive<T>(simd::load(m + r0) - mt);
    simd::store(alpha + r0, mt == vninf ? one : a);
    simd::store(m + r0, mt);
  }
  for (int64_t r = 0; r < rows; ++r) {
    T* row = s + r * ld;
    V sum{};
    if (m[r] == ninf) {  // nothing visible in this row yet
      sum = hidden_row(row, cp);
    } else {
      exp_row(row, cp, m[r], [&](int64_t c, V e) {
        simd::store(row + c, e);
        sum += e;
      });
    }
    part[r] = sum;
  }
  for (int64_t r = rows; r < rp; ++r) part[r] = V{};
  for (int64_t r0 = 0; r0 < rp; r0 += W) {
    const V sum = reduce_each<T>(part + r0, plus);
    simd::store(l + r0, simd::load(l + r0) * simd::load(alpha + r0) + sum);
  }
}

// What of the softmax scale multiplies q before the products: all of it for the FMA kernel; on
// AMX, sdpa_amx::q_scale.
template <class T>
T q_scale_of(T scale, bool amx) {
  if constexpr (std::is_same_v<T, float>) {
    if (amx) return sdpa_amx::q_scale(scale);
  }
  return scale;
}

// How the forward tiles the query rows. A tile is kBr rows of one query head, and the tiles of
// a key/value head share one packing of its K^T and V (a thread's, in its L2). When a head's
// query rows fit one tile (decoding: one or a few rows a head), a tile stacks the rows of as many
// of the group's heads as fit, head after head, so that K and V are read once for all of them,
// and reads them a key block at a time (`by_block`): each kv head then meets one tile or a few
// (fewer heads a tile where threads would go without one), and a packed copy of a whole head
// would be written out and read back through memory for it (decoding on two Zen 3 cores, 1 row
// of 8 x 32 heads against 2048 keys of 32 kv heads: 0.85x PyTorch's flash kernel that way, 1.4x
// reading K and V in place; docs/PERFORMANCE.md).
struct ForwardTiling {
  int64_t heads = 1;      // query heads stacked in a tile
  int64_t q_tiles = 1;    // tiles a head's rows take (1 when heads > 1)
  bool by_block = false;  // K and V read a key block at a time
  int64_t tasks = 0;
};
inline ForwardTiling forward_tiling(const SdpaParams& p, int64_t threads) {
  const int64_t B = p.batch(), Hq = p.heads_q(), Hk = p.heads_kv(), G = Hq / Hk, Sq = p.len_q();
  ForwardTiling t;
  t.q_tiles = (Sq + kBr - 1) / kBr;
  if (Sq <= kBr) {
    // The most heads a tile holds, fewer while that leaves threads without a task: G / c for the
    // smallest divisor c of G that gives every thread one (or the most heads that fit).
    for (int64_t c = 1; c <= G; ++c) {
      if (G % c != 0 || (G / c) * Sq > kBr) continue;
      t.heads = G / c;
      if (B * Hk * c >= threads) break;
    }
    t.by_block = true;
  }
  t.tasks = B * Hq / t.heads * t.q_tiles;
  return t;
}

// Forward task `task` (tiles in (batch, first query head, tile) order): where its rows are.
// A by_block tile's key blocks are read by block_scores.
struct ForwardTile {
  int64_t b, h, hk, i0, rows;  // rows of each of the tile's heads, h the first; <= 0 past a
                               // ragged sequence's end
  SdpaSequence seq;
  const int64_t* kv_at;  // paged: the sequence's key/value rows (load_rows' `at`), else null
};
inline ForwardTile forward_tile(const SdpaParams& p, const ForwardTiling& t, int64_t task) {
  const int64_t Hq = p.heads_q(), G = Hq / p.heads_kv(), groups = Hq / t.heads;
  ForwardTile f{};
  f.b = task / (groups * t.q_tiles);
  f.h = (task / t.q_tiles) % groups * t.heads;
  f.hk = f.h / G;
  f.i0 = (task % t.q_tiles) * kBr;
  f.seq = sdpa_sequence(p, f.b);
  f.rows = std::min(kBr, f.seq.rows_q - f.i0);
  f.kv_at = p.kv_rows.data ? static_cast<const int64_t*>(p.kv_rows.data) + f.seq.kv0 : nullptr;
  return f;
}

// Where a key block's values are, for O += P V: `rows`, `ld` apart.
template <class T>
struct BlockValues {
  const T* rows;
  int64_t ld;
};

// Key block [j0, j0 + cols) of a by_block tile of R rows (query rows qt, pre-scaled, whole
// vectors a row): its scores qt K^T into s (row stride kLd, columns to round_to_lanes(cols)),
// and its values. Keys and values are read where they lie when the products can read them there
// (each is read once a tile), else copied into kb (K's rows or K^T in panels) and vb.
template <class T>
BlockValues<T> block_scores(const SdpaParams& p, const ForwardTile& tile, int64_t R, int64_t j0,
                            int64_t cols, const T* qt, T* kb, T* vb, T* s) {
  constexpr int64_t W = simd::kLanes<T>;
  const int64_t Dqk = p.dim_qk(), dq_n = round_to_lanes<T>(Dqk), dq_p = packed_stride<T>(Dqk);
  const int64_t b = tile.b, hk = tile.hk, row0 = tile.seq.kv0 + j0;
  const int64_t* at = tile.kv_at ? tile.kv_at + j0 : nullptr;
  if (scores_by_dots(p)) {
    const T* k = rows_in_place<T>(p.k, b, hk, row0, at);
    int64_t ldk = p.k.strides[2];
    if (!k) {
      load_rows(p.k, b, hk, row0, cols, kb, dq_p, at);
      k = kb;
      ldk = dq_p;
    }
    tile_dots(R, cols, dq_n, qt, dq_n, k, ldk, s, kLd);
  } else {
    load_transposed_panels(p.k, b, hk, row0, cols, kb, at);
    tile_gemm_panels(R, round_to_lanes<T>(cols), Dqk, qt, dq_n, 1, kb, Dqk * W, s, kLd, false);
  }
  if (const T* v = rows_in_place<T>(p.v, b, hk, row0, at)) return {v, p.v.strides[2]};
  const int64_t dv_p = packed_stride<T>(p.dim_v());
  load_rows(p.v, b, hk, row0, cols, vb, dv_p, at);
  return {vb, dv_p};
}

template <class T>
void forward_typed(const SdpaParams& p) {
  const int64_t Hk = p.heads_kv();
  const int64_t Skv = p.len_kv(), Dqk = p.dim_qk(), Dv = p.dim_v();
  constexpr int64_t W = simd::kLanes<T>;
  const int64_t dv_p = packed_stride<T>(Dv), dv_n = round_to_lanes<T>(Dv);
  // Query rows of whole vectors (tile_dots reads them so), zero past Dqk.
  const int64_t dq_n = round_to_lanes<T>(Dqk), dq_p = packed_stride<T>(Dqk);
  const ForwardTiling tiling = forward_tiling(p, get_num_threads());
  const int64_t nh = tiling.heads;
  // 16-bit products on AMX where the CPU has it (cpu_sdpa_amx.h), else the FMA kernel.
  constexpr bool kFloat = std::is_same_v<T, float>;
  const bool amx = kFloat && sdpa_amx::usable(p);
  // K^T and V of a whole head, or of one key block (K^T in panels or K's rows: block_scores).
  const int64_t packed_keys = tiling.by_block ? kBc : Skv;
  const int64_t kt_size = (tiling.by_block ? dq_p : Dqk) * round_to_lanes<T>(packed_keys);
  const int64_t v_size = packed_keys * dv_p;
  // Tasks are tiles in (batch, query head, tile) order, so the tiles of a key/value head
  // follow each other. Each thread walks a contiguous share of about equal cost (the keys its
  // tiles see), stealing the second half of another's share when its own runs out
  // (TaskShares), and packs K^T and V of a head into its own buffer when its tiles reach it:
  // the packed head is then read by all those tiles from this core's L2, where a pass packing
  // every head up front left them in memory (forward at (4, 8, 256, 64) on a Zen 4 core: about
  // 10% slower).
  CostPrefix cost(tiling.tasks);
  for (int64_t task = 0; task < tiling.tasks; ++task) {
    const ForwardTile tile = forward_tile(p, tiling, task);
    if (tile.rows <= 0) {
      cost.add(0);
      continue;
    }
    const KeyRange kr = key_range(p, tile.seq, tile.i0, tile.rows);
    cost.add(nh * tile.rows * (std::max<int64_t>(kr.hi - first_key<T>(kr.lo), 0) + Dqk + Dv));
  }
  const T ninf = -std::numeric_limits<T>::infinity(), scale = static_cast<T>(p.scale);
  const T q_scale = q_scale_of(scale, amx);
  TaskShares shares(cost);
#pragma omp parallel
  {
    Buffer<T> buf, packed;
    T* qt = buf.get(kBr * dq_n + kBr * kLd + kBr * dv_p + 3 * kBr);
    T* s = qt + kBr * dq_n;
    T* acc = s + kBr * kLd;
    T *m = acc + kBr * dv_p, *l = m + kBr, *alpha = l + kBr;
    T* kt = packed.get(amx ? 0 : kt_size + v_size);
    T* vp = kt + (amx ? 0 : kt_size);
    std::optional<amx::ThreadTiles> amx_tiles;
    if (amx) amx_tiles.emplace();
    sdpa_amx::Forward amx_ops(sdpa_amx::data_terms(p));
    int64_t packed_head = -1;  // (batch, kv head) now in kt, vp
    for (int64_t task = shares.next(); task >= 0; task = shares.next()) {
      const ForwardTile tile = forward_tile(p, tiling, task);
      const int64_t b = tile.b, h = tile.h, i0 = tile.i0, rows = tile.rows;
      const SdpaSequence& seq = tile.seq;
      if (rows <= 0) continue;      // past a ragged sequence's end
      const int64_t R = nh * rows;  // the tile's rows: head h's, then h + 1's, ...
      if (!tiling.by_block && b * Hk + tile.hk != packed_head) {
        packed_head = b * Hk + tile.hk;
        // Ragged: each head holds its own sequence's rows; paged: rows read in place.
        if (amx) {
          amx_ops.pack_head(p, b, tile.hk, seq.kv0, seq.rows_kv, tile.kv_at);
        } else {
          load_transposed_panels(p.k, b, tile.hk, seq.kv0, seq.rows_kv, kt, tile.kv_at);
          load_rows(p.v, b, tile.hk, seq.kv0, seq.rows_kv, vp, dv_p, tile.kv_at);
        }
      }
      // What the next task loads: its query rows, and its key/value head when that is not the
      // one packed now; asked of the cache a slice per key block of this tile, so that they come
      // from L2 rather than L3 or memory (AVX-512 code on a Zen 5 core: forward at (4, 8, 256,
      // 64) 1.5-3% faster; AVX2 code there: no change).
      const int64_t after = shares.peek();
      const ForwardTile next = after >= 0 ? forward_tile(p, tiling, after) : ForwardTile{};
      const bool next_head = after >= 0 && !tiling.by_block && next.b * Hk + next.hk != packed_head;
      std::fill(m, m + kBr, ninf);  // whole tiles: online_softmax works on W rows at a time
      std::fill(l, l + kBr, T(0));
      // O accumulates in the output's rows where it can (one head a tile, the FMA kernel), else
      // in acc: the first key block writes it, the others add to it.
      T* const out_rows =
          !amx && nh == 1 ? rows_to_accumulate<T>(p.out, b, h, seq.q0 + i0, dv_p) : nullptr;
      T* const o = out_rows ? out_rows : acc;
      const int64_t ldo = out_rows ? p.out.strides[2] : dv_p;
      if (!out_rows) std::fill(acc, acc + R * dv_p, T(0));
      const KeyRange kr = key_range(p, seq, i0, rows);
      for (int64_t g = 0; g < nh; ++g)
        load_rows(p.q, b, h + g, seq.q0 + i0, rows, qt + g * rows * dq_n, dq_n);
      if (q_scale != T(1)) {
        for (int64_t x = 0; x < R * dq_n; ++x) qt[x] *= q_scale;  // scores come out scaled
      }
      if constexpr (kFloat) {
        if (amx) amx_ops.load_queries(R, Dqk, qt, dq_n);
      }
      const int64_t jfirst = first_key<T>(kr.lo);
      const int64_t blocks = kr.hi > jfirst ? (kr.hi - jfirst + kBc - 1) / kBc : 0;
      for (int64_t t = 0; t < blocks; ++t) {
        for (int64_t g = 0; g < nh; ++g)
          prefetch_rows(p.q, next.b, next.h + g, next.seq.q0 + next.i0, next.rows, t, blocks);
        if (next_head) {
          prefetch_rows(p.k, next.b, next.hk, next.seq.kv0, next.seq.rows_kv, t, blocks,
                        next.kv_at);
          prefetch_rows(p.v, next.b, next.hk, next.seq.kv0, next.seq.rows_kv, t, blocks,
                        next.kv_at);
        }
        const int64_t j0 = jfirst + t * kBc;
        const int64_t cols = std::min(kBc, kr.hi - j0), cp = round_to_lanes<T>(cols);
        BlockValues<T> values{amx ? nullptr : vp + j0 * dv_p, dv_p};
        if (amx) {
          if constexpr (kFloat) amx_ops.scores(R, Dqk, j0, cols, scale / q_scale, s, kLd);
        } else if (tiling.by_block) {
          values = block_scores(p, tile, R, j0, cols, qt, kt, vp, s);
        } else {
          tile_gemm_panels(R, cp, Dqk, qt, dq_n, 1, kt + j0 * Dqk, Dqk * W, s, kLd, false);
        }
        for (int64_t g = 0; g < nh; ++g)
          finish_scores(p, seq, s + g * rows * kLd, kLd, b, h + g, i0, rows, j0, cols,
                        static_cast<T*>(nullptr));
        online_softmax(s, kLd, R, cols, cp, m, l, alpha);
        if (p.dropout_p > 0) {
          for (int64_t g = 0; g < nh; ++g)
            apply_dropout(p, s + g * rows * kLd, kLd, b, h + g, i0, rows, j0, cols);
        }
        // O = alpha O + P V
        if (amx) {
          if constexpr (kFloat) amx_ops.values(R, Dv, j0, cols, s, kLd, alpha, acc, dv_p);
        } else {
          tile_gemm(R, dv_n, cols, s, kLd, 1, values.rows, values.ld, o, ldo, !out_rows || t > 0,
                    alpha);
        }
      }
      if (out_rows && blocks == 0) {  // no key visible: out 0
        for (int64_t r = 0; r < R; ++r) std::fill(o + r * ldo, o + r * ldo + dv_n, T(0));
      }
      for (int64_t r = 0; r < R; ++r) {
        const bool any = l[r] > T(0);
        const T inv = any ? T(1) / l[r] : T(0);
        for (int64_t c = 0; c < dv_n; ++c) o[r * ldo + c] *= inv;
      }
      for (int64_t g = 0; g < nh; ++g) {
        T* stats = sdpa_stats_at<T>(p.stats, b, h + g, seq.q0 + i0);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t x = g * rows + r;
          stats[r * p.stats.strides[2]] = l[x] > T(0) ? m[x] + std::log(l[x]) : ninf;
        }
        if (!out_rows)
          store_rows(p.out, b, h + g, seq.q0 + i0, rows, acc + g * rows * dv_p, dv_p, T(1));
      }
    }
  }
}

// dS = P (dP - D) over a tile, in place in dp, with the dropout mask, the float mask's score
// gradient and softcap's chain rule when they are on (without them, probabilities computes dS
// as it computes P). Columns past cols are left as they are.
template <class T>
void score_grad(const SdpaParams& p, const SdpaGradViews& g, const T* P, const T* Pd, T* dp,
                const T* th, const T* dvec, int64_t b, int64_t h, int64_t i0, int64_t rows,
                int64_t j0, int64_t cols) {
  const bool dropout = p.dropout_p > 0;
  // A pass per rule over each row, each a loop the compiler can vectorize.
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  const int64_t Hq = p.heads_q(), Sq = p.len_q(), Skv = p.len_kv();
  for (int64_t r = 0; r < rows; ++r) {
    T* d = dp + r * kLd;
    const T *pr = P + r * kLd, dr = dvec[r];
    if (dropout) {
      const T* kept = Pd + r * kLd;
      for (int64_t c = 0; c < cols; ++c) d[c] = kept[c] != T(0) ? d[c] * keep_scale : T(0);
    }
    for (int64_t c = 0; c < cols; ++c) d[c] = pr[c] * (d[c] - dr);  // dS = P * (dP - D)
    if (g.dscores.data) {
      std::copy(d, d + cols,
                static_cast<T*>(g.dscores.data) + ((b * Hq + h) * Sq + i0 + r) * Skv + j0);
    }
    if (p.softcap > 0) {
      const T* t = th + r * kLd;
      for (int64_t c = 0; c < cols; ++c) d[c] *= sdpa_softcap_grad(t[c]);
    }
  }
}

// Parts the keys of each kv head are split into, each a task of the backward (with its own
// partial sum of dQ, the size of dQ): one while there are at least four heads a thread, else
// enough for four tasks a thread, at most one per 256 keys (and kMaxParts). A head per task left
// all but one thread idle with a single kv head (B = 1, Hk = 1: (1, 1, 2048, 64)
// forward+backward on two Zen 3 cores 50.8 -> 30.8 ms). More parts let threads whose speeds
// differ on a shared machine end closer together, but each part reloads its query tiles: at
// (1, 8, 1024, 64), four heads a thread, one part and two or four ran alike (forward+backward
// on two Zen 3 cores, 41 paired runs each way: 0.99-1.00, quartiles 0.93-1.05).
inline int64_t key_parts(int64_t heads, int64_t keys, int64_t threads) {
  return parts_per_task(heads, threads, keys / 256);
}

template <class T>
void backward_typed(const SdpaParams& p, const View& dout, const SdpaGradViews& g) {
  const int64_t B = p.batch(), Hq = p.heads_q(), Hk = p.heads_kv(), G = Hq / Hk;
  const int64_t Skv = p.len_kv(), Dqk = p.dim_qk(), Dv = p.dim_v();
  const int64_t dq_p = packed_stride<T>(Dqk), dv_p = packed_stride<T>(Dv);
  const int64_t dq_n = round_to_lanes<T>(Dqk);
  const T scale = static_cast<T>(p.scale);
  const bool dropout = p.dropout_p > 0;
  const bool dots = scores_by_dots(p);                               // S as the forward summed it
  const bool plain = !dropout && p.softcap <= 0 && !g.dscores.data;  // dS = P (dP - D)
  constexpr bool kFloat = std::is_same_v<T, float>;
  const bool amx = kFloat && sdpa_amx::usable(p);  // as the forward decided
  const T q_scale = q_scale_of(scale, amx);        // as in the forward; dK takes the rest:
  // 1 where q took all of the scale (x / x would be NaN at a softmax scale of 0, where dK is 0)
  const T dk_factor = q_scale == scale ? T(1) : scale / q_scale;
  using V = simd::Vec<T>;
  constexpr int64_t W = simd::kLanes<T>;
  // One task per (batch, kv head, part of its keys): it owns dK and dV of those keys and the
  // dQ of its query heads over them (written to g.dq with one part, else to the part's own
  // partial sums, added in part order at the end), so there are no races and every sum has a
  // fixed order. Parts are whole key tiles.
  const int64_t parts = key_parts(B * Hk, Skv, get_num_threads());
  const int64_t part_keys = ((Skv + parts - 1) / parts + kBc - 1) / kBc * kBc;
  const int64_t part_max = std::min(part_keys, Skv), part_r = round_to_lanes<T>(part_max);
  std::vector<int64_t> first_row(B + 1, 0);  // sequence b's partial sums from row first_row[b]
  for (int64_t b = 0; b < B; ++b) first_row[b + 1] = first_row[b] + sdpa_sequence(p, b).rows_q;
  Buffer<T> partial;  // parts x (Hq, first_row[B]) rows of dq_p
  T* dq_parts = parts > 1 ? partial.get(parts * Hq * first_row[B] * dq_p) : nullptr;
#pragma omp parallel
  {
    Buffer<T> tiles, head;
    T* qs = tiles.get(kBr * (dq_p + 2 * dv_p + dq_p + 4 * kLd + 2));
    T *dot = qs + kBr * dq_p, *ot = dot + kBr * dv_p, *dq = ot + kBr * dv_p;
    T *s = dq + kBr * dq_p, *pd = s + kBr * kLd, *dp = pd + kBr * kLd, *th = dp + kBr * kLd;
    T *dvec = th + kBr * kLd, *lse = dvec + kBr;
    std::optional<amx::ThreadTiles> amx_tiles;
    if (amx) amx_tiles.emplace();
    sdpa_amx::Backward amx_ops(sdpa_amx::data_terms(p));
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < B * Hk * parts; ++task) {
      const int64_t b = task / (Hk * parts), hk = task / parts % Hk, part = task % parts;
      const SdpaSequence seq = sdpa_sequence(p, b);
      const int64_t k0 = std::min(part * part_keys, seq.rows_kv);
      const int64_t n = std::min(k0 + part_keys, seq.rows_kv) - k0;  // this part's keys
      // dK and dV accumulate in the outputs' rows where both can (the FMA kernel, whose dK takes
      // no factor), else in the task's dk and dv.
      T* const dk_rows = !amx && dk_factor == T(1)
                             ? rows_to_accumulate<T>(g.dk, b, hk, seq.kv0 + k0, dq_p)
                             : nullptr;
      T* const dv_rows = dk_rows ? rows_to_accumulate<T>(g.dv, b, hk, seq.kv0 + k0, dv_p) : nullptr;
      const bool kv_in_place = dk_rows && dv_rows;
      // The part's K^T (for scores by tile products), K and V^T (key k0 first), packed once for
      // every query tile (the FMA kernel's: AMX packs its own); dk and dv where they are used.
      const int64_t packed = amx ? 0 : Dqk * part_r + part_max * dq_p + Dv * part_r;
      T* kt = head.get(packed + (kv_in_place ? 0 : part_max * (dq_p + dv_p)));
      T *kr = kt + Dqk * part_r, *vt = kr + part_max * dq_p, *dk = kt + packed;
      T* dv = dk + part_max * dq_p;
      T* const dka = kv_in_place ? dk_rows : dk;
      T* const dva = kv_in_place ? dv_rows : dv;
      const int64_t ldk = kv_in_place ? g.dk.strides[2] : dq_p;
      const int64_t ldv = kv_in_place ? g.dv.strides[2] : dv_p;
      KeyRowsWritten written(kv_in_place);
      const auto zero_kv = [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          std::fill(dka + r * ldk, dka + r * ldk + Dqk, T(0));
          std::fill(dva + r * ldv, dva + r * ldv + Dv, T(0));
        }
      };
      if (amx) {
        if constexpr (kFloat) amx_ops.pack_part(p, b, hk, seq.kv0 + k0, n);
      } else {
        if (!dots) load_transposed_panels(p.k, b, hk, seq.kv0 + k0, n, kt);
        load_rows_panels(p.k, b, hk, seq.kv0 + k0, n, kr, dq_p, part_max * W);
        load_transposed_panels(p.v, b, hk, seq.kv0 + k0, n, vt);
        if (!kv_in_place) std::fill(dk, dk + part_max * (dq_p + dv_p), T(0));
      }
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        for (int64_t i0 = 0; i0 < seq.rows_q; i0 += kBr) {
          const int64_t rows = std::min(kBr, seq.rows_q - i0);
          // dQ accumulates in the output's rows where it can (one part, the FMA kernel), else in
          // dq: the first key block writes it, the others add to it.
          T* const dq_rows =
              !amx && parts == 1 ? rows_to_accumulate<T>(g.dq, b, h, seq.q0 + i0, dq_p) : nullptr;
          T* const dqa = dq_rows ? dq_rows : dq;
          const int64_t ldq = dq_rows ? g.dq.strides[2] : dq_p;
          if (!dq_rows) std::fill(dq, dq + rows * dq_p, T(0));
          const KeyRange all = key_range(p, seq, i0, rows);
          const KeyRange range{std::max(all.lo, k0), std::min(all.hi, k0 + n)};
          if (range.lo < range.hi) {
            load_rows(p.q, b, h, seq.q0 + i0, rows, qs, dq_p);
            load_rows(dout, b, h, seq.q0 + i0, rows, dot, dv_p);
            if (q_scale != T(1)) {
              for (int64_t x = 0; x < rows * dq_p; ++x) qs[x] *= q_scale;
            }
            if constexpr (kFloat) {
              if (amx) amx_ops.load_queries(rows, Dqk, Dv, qs, dq_p, dot, dv_p);
            }
            load_rows(p.out, b, h, seq.q0 + i0, rows, ot, dv_p);
            const T* st = sdpa_stats_at<T>(p.stats, b, h, seq.q0 + i0);
            for (int64_t r = 0; r < rows; ++r) {
              V d{};
              for (int64_t c = 0; c < dv_p; c += W)
                d += simd::load(dot + r * dv_p + c) * simd::load(ot + r * dv_p + c);
              dvec[r] = simd::reduce_sum(d);  // D = rowsum(dO * O)
              lse[r] = st[r * p.stats.strides[2]];
            }
          }
          // Every other query tile walks the key blocks backwards, so that it starts on the blocks
          // the tile before it touched last, still in this core's L2 when a head's packed K^T,
          // K, V^T, dK and dV outgrow it (1.3 MB at S = 1024, D = 64; fwd+bwd 0.5% faster
          // there). dQ's sum over the blocks then runs in the other order, fixed all the same.
          const int64_t jfirst = range.lo < range.hi ? first_key<T>(range.lo) : range.hi;
          const int64_t blocks = (range.hi - jfirst + kBc - 1) / kBc;
          const bool backwards = (i0 / kBr) % 2 == 1;
          // The next query tile's rows, asked of the cache a slice per key block as in the
          // forward (AVX-512 code, one Zen 5 core: forward+backward 1-2.7% faster).
          const bool next_here = i0 + kBr < seq.rows_q;
          const int64_t next_h = next_here ? h : h + 1, next_i0 = next_here ? i0 + kBr : 0;
          const int64_t next_rows = next_h < (hk + 1) * G ? std::min(kBr, seq.rows_q - next_i0) : 0;
          for (int64_t t = 0; t < blocks; ++t) {
            for (const View* v : {&p.q, &dout, &p.out})
              prefetch_rows(*v, b, next_h, seq.q0 + next_i0, next_rows, t, blocks);
            const int64_t j0 = jfirst + (backwards ? blocks - 1 - t : t) * kBc;
            const int64_t cols = std::min(kBc, range.hi - j0), cp = round_to_lanes<T>(cols);
            const int64_t jk = j0 - k0;  // the block's first key in the part's packing
            if (amx) {
              if constexpr (kFloat) amx_ops.scores(rows, Dqk, jk, cols, scale / q_scale, s, kLd);
            } else if (dots) {
              tile_dots_panels(rows, cols, dq_n, qs, dq_p, kr + jk * W, part_max * W, s, kLd);
            } else {
              tile_gemm_panels(rows, cp, Dqk, qs, dq_p, 1, kt + jk * Dqk, Dqk * W, s, kLd, false);
            }
            finish_scores(p, seq, s, kLd, b, h, i0, rows, j0, cols, p.softcap > 0 ? th : nullptr);
            const T* P = s;
            if (plain) {
              // dP = dO V^T; P and dS in one pass; dV += P^T dO
              if (amx) {
                if constexpr (kFloat) amx_ops.score_grads(rows, Dv, jk, cols, dp, kLd);
              } else {
                tile_gemm_panels(rows, cp, Dv, dot, dv_p, 1, vt + jk * Dv, Dv * W, dp, kLd, false);
              }
              probabilities(s, kLd, rows, cols, cp, lse, dp, dvec);
              if (amx) {
                if constexpr (kFloat) amx_ops.values_grad(rows, Dv, jk, cols, P, kLd);
              } else {
                written.product(jk, cols, [&](int64_t r0, int64_t m, bool add) {
                  tile_gemm(m, dv_p, rows, P + (r0 - jk), 1, kLd, dot, dv_p, dva + r0 * ldv, ldv,
                            add);
                });
              }
            } else {
              probabilities(s, kLd, rows, cols, cp, lse);  // P from the saved logsumexp
              if (dropout) {
                std::copy(s, s + rows * kLd, pd);
                apply_dropout(p, pd, kLd, b, h, i0, rows, j0, cols);
                P = pd;
              }
              // dV += Pd^T dO;  dP = dO V^T
              if (amx) {
                if constexpr (kFloat) {
                  amx_ops.values_grad(rows, Dv, jk, cols, P, kLd);
                  amx_ops.score_grads(rows, Dv, jk, cols, dp, kLd);
                }
              } else {
                written.product(jk, cols, [&](int64_t r0, int64_t m, bool add) {
                  tile_gemm(m, dv_p, rows, P + (r0 - jk), 1, kLd, dot, dv_p, dva + r0 * ldv, ldv,
                            add);
                });
                tile_gemm_panels(rows, cp, Dv, dot, dv_p, 1, vt + jk * Dv, Dv * W, dp, kLd, false);
              }
              score_grad(p, g, s, pd, dp, th, dvec, b, h, i0, rows, j0, cols);
            }
            // dQ += dS K;  dK += dS^T Q (q times q_scale; on AMX, dK^T += Q^T dS)
            if (amx) {
              if constexpr (kFloat) amx_ops.key_query_grads(rows, Dqk, jk, cols, dp, kLd, dq, dq_p);
            } else {
              tile_gemm_panels(rows, dq_p, cols, dp, kLd, 1, kr + jk * W, part_max * W, dqa, ldq,
                               !dq_rows || t > 0);
              written.product(jk, cols, [&](int64_t r0, int64_t m, bool add) {
                tile_gemm(m, dq_p, rows, dp + (r0 - jk), 1, kLd, qs, dq_p, dka + r0 * ldk, ldk,
                          add);
              });
              written.wrote(jk, cols, zero_kv);
            }
          }
          if (dq_rows) {  // dQ times the scale, or 0 where no key is visible
            for (int64_t r = 0; r < rows; ++r) {
              T* row = dq_rows + r * ldq;
              if (blocks == 0) {
                std::fill(row, row + Dqk, T(0));
              } else {
                for (int64_t c = 0; c < Dqk; ++c) row[c] *= scale;
              }
            }
          } else if (parts == 1) {
            store_rows(g.dq, b, h, seq.q0 + i0, rows, dq, dq_p, scale);
          } else {
            T* dst = dq_parts + ((part * Hq + h) * first_row[B] + first_row[b] + i0) * dq_p;
            std::copy(dq, dq + rows * dq_p, dst);
          }
        }
      }
      if (amx) {
        if constexpr (kFloat) amx_ops.transpose_out(n, Dqk, Dv, dk, dq_p, dv, dv_p);
      }
      if (kv_in_place) {
        written.finish(n, zero_kv);
      } else {
        store_rows(g.dk, b, hk, seq.kv0 + k0, n, dk, dq_p, dk_factor);
        store_rows(g.dv, b, hk, seq.kv0 + k0, n, dv, dv_p, T(1));
      }
    }
    if (parts > 1) {  // dQ: the parts' sums added in part order
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < B * Hq; ++task) {
        const int64_t b = task / Hq, h = task % Hq, nq = first_row[b + 1] - first_row[b];
        T* sum = dq_parts + (h * first_row[B] + first_row[b]) * dq_p;
        add_parts(sum, nq * dq_p, parts, Hq * first_row[B] * dq_p);
        store_rows(g.dq, b, h, sdpa_sequence(p, b).q0, nq, sum, dq_p, scale);
      }
    }
  }
}

}  // namespace

// 16-bit q, k, v, out, dout and gradients are read and written in place by the float32
// kernel's tile loads and stores (cpu_sdpa_scores.h); a 16-bit float mask is widened once
// (broadcast dims stay stride 0), the stats and score gradient are float32 already. 16-bit
// products run on AMX where cpu_sdpa_amx() holds (sdpa_amx::usable).
void CpuBackend::sdpa_forward(const SdpaParams& p) {
  if (p.q.dtype == kFloat64) {
    forward_typed<double>(p);
    return;
  }
  HalfAsFloat f(*this, kCPU);
  SdpaParams w = p;
  w.mask = f.in(p.mask);
  forward_typed<float>(w);
}

void CpuBackend::sdpa_backward(const SdpaParams& p, const View& dout, const SdpaGradViews& g) {
  if (p.q.dtype == kFloat64) {
    backward_typed<double>(p, dout, g);
    return;
  }
  HalfAsFloat f(*this, kCPU);
  SdpaParams w = p;
  w.mask = f.in(p.mask);
  backward_typed<float>(w, dout, g);
}

}  // namespace tg::cpu
