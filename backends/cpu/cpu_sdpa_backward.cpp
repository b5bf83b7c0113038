// SDPA's backward on the CPU: the tiles, packings and 16-bit handling of the forward
// (cpu_sdpa_forward.cpp says how), with one task per (batch, kv head, part of its keys) that
// owns dK and dV of those keys, and P rebuilt from the saved logsumexp per tile.
#include <algorithm>
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

namespace tg::cpu {
namespace {

using namespace sdpa_tiles;

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
  const bool amx = kFloat && sdpa_amx::usable(p);      // as the forward decided
  const T q_scale = sdpa_amx::q_scale_of(scale, amx);  // as in the forward; dK takes the rest:
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
      // every query tile (the FMA kernel's: AMX packs its own); dk and dv. The buffer keeps room
      // for dk and dv when they are in place too: sized without it, it read 0.83-0.89x (paired,
      // five of six runs) at (8, 8, 2, 128, 32) on an Intel AVX-512 core, with the same work.
      const int64_t packed = amx ? 0 : Dqk * part_r + part_max * dq_p + Dv * part_r;
      T* kt = head.get(packed + part_max * (dq_p + dv_p));
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
          // dq.
          const TileRows<T> dqt =
              tile_rows<T>(!amx && parts == 1, g.dq, b, h, seq.q0 + i0, rows, dq_p, dq);
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
              tile_gemm_panels(rows, dq_p, cols, dp, kLd, 1, kr + jk * W, part_max * W, dqt.rows,
                               dqt.ld, !dqt.in_place || t > 0);
              written.product(jk, cols, [&](int64_t r0, int64_t m, bool add) {
                tile_gemm(m, dq_p, rows, dp + (r0 - jk), 1, kLd, qs, dq_p, dka + r0 * ldk, ldk,
                          add);
              });
              written.wrote(jk, cols, zero_kv);
            }
          }
          if (dqt.in_place) {  // dQ times the scale, or 0 where no key is visible
            for (int64_t r = 0; r < rows; ++r) {
              T* row = dqt.rows + r * dqt.ld;
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
