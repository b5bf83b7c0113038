// SDPA on the CPU in the manner of FlashAttention-2: query tiles against key tiles with an
// online softmax. This file has the forward; cpu_sdpa_backward.cpp the backward, which rebuilds
// P from the saved logsumexp tile by tile. Nothing of size Sq x Skv is ever allocated (except
// the score gradient, when a float mask asks for it).
//
// Every tile product goes through tile_gemm's register-blocked micro-kernel. Its B operand is
// read row by row with whole vectors, so key/value heads are packed (K^T and V for the forward,
// once per thread whose run of query tiles reaches the head; K^T, K and V^T for the backward,
// once per task, a part of a head's keys; rows padded to whole vectors with zeros; K^T, V^T
// and the backward's K in panels of one vector's columns, so that a tile's rows of B share
// pages and spread over the L1's sets) and then read by every query tile of every query head
// of the group from that core's cache. Scores, P and dS stay in one kBr x kLd tile per thread
// (36 KiB at float32 with its row padding), where the score rules, the online softmax and the
// dropout run over whole vectors. O, dQ, dK and dV accumulate in the outputs' own rows where
// those are rows of whole vectors of the kernel's type (rows_to_accumulate), else in the
// thread's rows, copied out at the end.
//
// 16-bit q, k, v, out, dout and gradients are read and written in place by the float32
// kernel's tile loads and stores (cpu_sdpa_scores.h); a 16-bit float mask is widened once
// (broadcast dims stay stride 0), the stats and score gradient are float32 already. 16-bit
// products run on AMX where cpu_sdpa_amx() holds (sdpa_amx::usable).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "backends/cpu/aligned_buffer.h"
#include "backends/cpu/cost_split.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_sdpa_amx.h"
#include "backends/cpu/cpu_sdpa_scores.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/tile_gemm.h"
#include "backends/half_as_float.h"

namespace tg::cpu {
namespace {

using namespace sdpa_tiles;

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
  const T q_scale = sdpa_amx::q_scale_of(scale, amx);
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
      // in acc.
      const TileRows<T> o = tile_rows<T>(!amx && nh == 1, p.out, b, h, seq.q0 + i0, R, dv_p, acc);
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
          tile_gemm(R, dv_n, cols, s, kLd, 1, values.rows, values.ld, o.rows, o.ld,
                    !o.in_place || t > 0, alpha);
        }
      }
      if (o.in_place && blocks == 0) {  // no key visible: out 0
        for (int64_t r = 0; r < R; ++r)
          std::fill(o.rows + r * o.ld, o.rows + r * o.ld + dv_n, T(0));
      }
      for (int64_t r = 0; r < R; ++r) {
        const bool any = l[r] > T(0);
        const T inv = any ? T(1) / l[r] : T(0);
        for (int64_t c = 0; c < dv_n; ++c) o.rows[r * o.ld + c] *= inv;
      }
      for (int64_t g = 0; g < nh; ++g) {
        T* stats = sdpa_stats_at<T>(p.stats, b, h + g, seq.q0 + i0);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t x = g * rows + r;
          stats[r * p.stats.strides[2]] = l[x] > T(0) ? m[x] + std::log(l[x]) : ninf;
        }
        if (!o.in_place)
          store_rows(p.out, b, h + g, seq.q0 + i0, rows, acc + g * rows * dv_p, dv_p, T(1));
      }
    }
  }
}

}  // namespace

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

}  // namespace tg::cpu
