// SDPA's double backward on the CPU (docs/SDPA_DOUBLE_BACKWARD.md derives it; the names below
// are the derivation's), tiled as the backward in cpu_sdpa_backward.cpp is. One task per
// (batch, kv head), or per part of its query tiles when there are few heads for the threads,
// owns the gradients of that head's K and V (a partial sum of them, with parts). For each
// query tile:
//
//   sweep 1, over the key tiles: S, P (from the saved logsumexp), dP = dO Vᵀ, G (the cotangent
//     of the score gradient) and X = dO Cᵀ, kept in caches one query tile high and Skv wide,
//     and the row statistics D, R and rowsum(P ⊙ ḡ(P));
//   sweep 2, over the same tiles: the elementwise chain to dS, ḡ(dP) and ḡ(S), then the
//     gradient products.
//
// The caches make the memory O(Skv) per thread, never Sq x Skv, and spare sweep 2 the four
// products and the exp and Philox work that rebuilding the tiles would cost: twelve tile
// products per tile pair (five in sweep 1, seven in sweep 2).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/aligned_buffer.h"
#include "backends/cpu/cost_split.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_sdpa_scores.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/tile_gemm.h"

namespace tg::cpu {
namespace {

using namespace sdpa_tiles;

// The caches of one query tile, each kBr x ld: P, dP ⊙ Z, G, X ⊙ Z; P ⊙ Z with dropout (else
// P itself); tanh(S_raw / c) and G_raw with softcap (else null).
template <class T>
struct RowCaches {
  int64_t ld = 0;
  T *P = nullptr, *dP = nullptr, *G = nullptr, *X = nullptr, *Pd = nullptr;
  T *th = nullptr, *G_raw = nullptr;

  static int64_t count(bool dropout, bool softcap) {
    return 4 + (dropout ? 1 : 0) + (softcap ? 2 : 0);
  }
  RowCaches(T* base, int64_t ld_, bool dropout, bool softcap) : ld(ld_) {
    const int64_t n = kBr * ld;
    P = base;
    dP = P + n;
    G = dP + n;
    X = G + n;
    T* next = X + n;
    Pd = dropout ? next : P;
    if (dropout) next += n;
    if (softcap) {
      th = next;
      G_raw = th + n;
    }
  }
};

// Per-row statistics of one query tile (each kBr long).
template <class T>
struct RowStats {
  T *lse, *D, *R, *U, *PX, *PgP;  // PgP = rowsum(P ⊙ ḡ(P))
};

// One key tile of sweep 1 after its products: softcap's slope and the mask's cotangent into G,
// dropout's mask into P ⊙ Z, dP and X, and the tile's share of the row sums D = rowsum(P ⊙ dP),
// R = rowsum(G ⊙ P), U = rowsum(P ⊙ G ⊙ dP) and PX = rowsum(P ⊙ Z ⊙ X).
template <class T>
void sweep1_elementwise(const SdpaDoubleGradViews& g, const RowCaches<T>& c, const T* z,
                        const RowStats<T>& st, int64_t b, int64_t h, int64_t i0, int64_t rows,
                        int64_t j0, int64_t cols, int64_t cp) {
  using V = simd::Vec<T>;
  constexpr int64_t W = simd::kLanes<T>;
  const int64_t* es = g.dmask_bar.strides.data();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * c.ld + j0;
    T *P = c.P + o, *dP = c.dP + o, *G = c.G + o, *X = c.X + o;
    if (c.th) {
      std::fill(c.th + o + cols, c.th + o + cp, T(0));  // padding: t1 = 1, finite
      std::copy(G, G + cp, c.G_raw + o);
      for (int64_t x = 0; x < cp; x += W) {
        const V t = simd::load(c.th + o + x);
        simd::store(G + x, simd::load(G + x) * (simd::splat(T(1)) - t * t));
      }
    }
    if (g.dmask_bar.data) {
      const T* e = static_cast<const T*>(g.dmask_bar.data) + b * es[0] + h * es[1] +
                   (i0 + r) * es[2] + j0 * es[3];
      for (int64_t x = 0; x < cols; ++x) G[x] += e[x * es[3]];
    }
    V d{}, rr{}, u{}, px{};
    if (z) {
      T* Pd = c.Pd + o;
      const T* zr = z + r * kBc;
      for (int64_t x = 0; x < cp; x += W) {
        const V zv = simd::load(zr + x), pv = simd::load(P + x), gv = simd::load(G + x);
        const V dpv = simd::load(dP + x) * zv, xv = simd::load(X + x) * zv;
        simd::store(Pd + x, pv * zv);
        simd::store(dP + x, dpv);
        simd::store(X + x, xv);
        d += pv * dpv;
        rr += gv * pv;
        u += pv * gv * dpv;
        px += pv * xv;
      }
    } else {
      for (int64_t x = 0; x < cp; x += W) {
        const V pv = simd::load(P + x), gv = simd::load(G + x), dpv = simd::load(dP + x);
        d += pv * dpv;
        rr += gv * pv;
        u += pv * gv * dpv;
        px += pv * simd::load(X + x);
      }
    }
    st.D[r] += simd::reduce_sum(d);
    st.R[r] += simd::reduce_sum(rr);
    st.U[r] += simd::reduce_sum(u);
    st.PX[r] += simd::reduce_sum(px);
  }
}

// One key tile of sweep 2 before its products, in place in the caches:
//   dS = P (dP - D),  dS_raw = dS t1                              (into dP)
//   ḡ(dP) ⊙ Z = P ⊙ Z (G - R)                                      (into X)
//   ḡ(P) = G (dP - D) - R dP + X ⊙ Z,  ḡ(S) = P (ḡ(P) - T)          (into gmask when asked)
//   ḡ(S_raw) = ḡ(S) t1 + G_raw dS t2                               (into G)
// with t1 = 1 - th², t2 = -2 th t1 / c under softcap (t1 = 1, t2 = 0 without).
template <class T, bool kSoftcap>
void sweep2_elementwise(const SdpaParams& p, const SdpaDoubleGradViews& g, const RowCaches<T>& c,
                        const RowStats<T>& st, T* gs_row, int64_t b, int64_t h, int64_t i0,
                        int64_t rows, int64_t j0, int64_t cols, int64_t cp) {
  using V = simd::Vec<T>;
  constexpr int64_t W = simd::kLanes<T>;
  const V one = simd::splat(T(1));
  const V t2_scale = simd::splat(kSoftcap ? static_cast<T>(-2.0 / p.softcap) : T(0));
  T* gmask = static_cast<T*>(g.gmask.data);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * c.ld + j0;
    const T *P = c.P + o, *Pd = c.Pd + o;
    T *dP = c.dP + o, *G = c.G + o, *X = c.X + o;
    const V D = simd::splat(st.D[r]), R = simd::splat(st.R[r]), Tr = simd::splat(st.PgP[r]);
    for (int64_t x = 0; x < cp; x += W) {
      const V pv = simd::load(P + x), gv = simd::load(G + x), dpv = simd::load(dP + x);
      const V ds = pv * (dpv - D);
      const V gS = pv * (gv * (dpv - D) - R * dpv + simd::load(X + x) - Tr);
      simd::store(X + x, simd::load(Pd + x) * (gv - R));
      if (gmask) simd::store(gs_row + x, gS);
      if constexpr (kSoftcap) {
        const V t = simd::load(c.th + o + x), t1 = one - t * t;
        simd::store(dP + x, ds * t1);
        simd::store(G + x, gS * t1 + simd::load(c.G_raw + o + x) * ds * t2_scale * t * t1);
      } else {
        simd::store(dP + x, ds);
        simd::store(G + x, gS);
      }
    }
    if (gmask) {
      T* dst = gmask + ((b * p.heads_q() + h) * p.len_q() + i0 + r) * p.len_kv() + j0;
      std::copy(gs_row, gs_row + cols, dst);
    }
  }
}

template <class T>
void double_backward_typed(const SdpaParams& p, const SdpaDoubleGradViews& g) {
  const int64_t B = p.batch(), Hq = p.heads_q(), Hk = p.heads_kv(), G = Hq / Hk;
  const int64_t Skv = p.len_kv(), Dqk = p.dim_qk(), Dv = p.dim_v();
  constexpr int64_t W = simd::kLanes<T>;
  const int64_t skv_p = packed_stride<T>(Skv), dq_p = packed_stride<T>(Dqk);
  const int64_t skv_r = round_to_lanes<T>(Skv), dv_p = packed_stride<T>(Dv);
  const int64_t dq_n = round_to_lanes<T>(Dqk);
  const T scale = static_cast<T>(p.scale);
  const bool dropout = p.dropout_p > 0, softcap = p.softcap > 0, dots = scores_by_dots(p);
  // With fewer than four kv heads a thread, each head's query tiles (over its G query heads)
  // are split into parts (parts_per_task), each a task with its own partial sums of ḡ(K) and
  // ḡ(V), added in part order at the end: a head per task ran a single kv head's double
  // backward on one thread. Parts have at least two query tiles.
  const int64_t parts =
      parts_per_task(B * Hk, get_num_threads(), G * ((p.len_q() + kBr - 1) / kBr) / 2);
  std::vector<int64_t> first_key_row(B + 1, 0);  // sequence b's partial sums from this row
  for (int64_t b = 0; b < B; ++b)
    first_key_row[b + 1] = first_key_row[b] + sdpa_sequence(p, b).rows_kv;
  const int64_t all_keys = first_key_row[B], part_rows = Hk * all_keys;
  Buffer<T> partial;  // parts x (Hk, all_keys) rows of dq_p + dv_p
  T* g_parts = parts > 1 ? partial.get(parts * part_rows * (dq_p + dv_p)) : nullptr;
#pragma omp parallel
  {
    Buffer<T> tiles, head, cache;
    T* qs = tiles.get(kBr * (3 * dq_p + 2 * dv_p + kBc) + 6 * kBr + kBc);
    T *as = qs + kBr * dq_p, *gq = as + kBr * dq_p, *dot = gq + kBr * dq_p;
    T *gdo = dot + kBr * dv_p, *z = gdo + kBr * dv_p, *stat = z + kBr * kBc;
    const RowStats<T> st{stat,           stat + kBr,     stat + 2 * kBr,
                         stat + 3 * kBr, stat + 4 * kBr, stat + 5 * kBr};
    T* gs_row = stat + 6 * kBr;
    const RowCaches<T> c(cache.get(RowCaches<T>::count(dropout, softcap) * kBr * skv_p), skv_p,
                         dropout, softcap);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < B * Hk * parts; ++task) {
      const int64_t b = task / (Hk * parts), hk = task / parts % Hk, part = task % parts;
      const SdpaSequence seq = sdpa_sequence(p, b);
      // The part's query tiles: [t0, t1) of the group's G x tiles, query head by query head.
      const int64_t tiles = (seq.rows_q + kBr - 1) / kBr;
      const int64_t t0 = G * tiles * part / parts, t1 = G * tiles * (part + 1) / parts;
      const int64_t k0 = seq.kv0, kn = seq.rows_kv;
      // This head's K, its cotangent Bk, V and its cotangent C, packed once for every query
      // tile: transposed in panels as the B operand of the score-shaped products, as rows for
      // the gradient products. Then the accumulators of ḡ(K) and ḡ(V).
      T* kt = head.get(2 * (Dqk + Dv) * skv_r + 3 * Skv * (dq_p + dv_p));
      T *bkt = kt + Dqk * skv_r, *vt = bkt + Dqk * skv_r, *ct = vt + Dv * skv_r;
      T *kr = ct + Dv * skv_r, *bkr = kr + Skv * dq_p, *gk = bkr + Skv * dq_p;
      T *vr = gk + Skv * dq_p, *cr = vr + Skv * dv_p, *gv = cr + Skv * dv_p;
      load_transposed_panels(p.k, b, hk, k0, kn, kt);
      load_transposed_panels(g.dk_bar, b, hk, k0, kn, bkt);
      load_transposed_panels(p.v, b, hk, k0, kn, vt);
      load_transposed_panels(g.dv_bar, b, hk, k0, kn, ct);
      load_rows(p.k, b, hk, k0, kn, kr, dq_p);
      load_rows(g.dk_bar, b, hk, k0, kn, bkr, dq_p);
      load_rows(p.v, b, hk, k0, kn, vr, dv_p);
      load_rows(g.dv_bar, b, hk, k0, kn, cr, dv_p);
      std::fill(gk, gk + Skv * dq_p, T(0));
      std::fill(gv, gv + Skv * dv_p, T(0));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t h = hk * G + t / tiles, i0 = t % tiles * kBr;
        const int64_t rows = std::min(kBr, seq.rows_q - i0), q0 = seq.q0 + i0;
        std::fill(gq, gq + rows * dq_p, T(0));
        std::fill(gdo, gdo + rows * dv_p, T(0));
        const KeyRange range = key_range(p, seq, i0, rows);
        if (range.lo < range.hi) {
          // Q and A (the cotangent of dQ) pre-scaled: S = qs Kᵀ, G_raw = as Kᵀ + qs Bkᵀ.
          load_rows(p.q, b, h, q0, rows, qs, dq_p);
          load_rows(g.dq_bar, b, h, q0, rows, as, dq_p);
          for (int64_t x = 0; x < rows * dq_p; ++x) {
            qs[x] *= scale;
            as[x] *= scale;
          }
          load_rows(g.dout, b, h, q0, rows, dot, dv_p);
          const T* lse = sdpa_stats_at<T>(p.stats, b, h, q0);
          for (int64_t r = 0; r < rows; ++r) st.lse[r] = lse[r * p.stats.strides[2]];
          std::fill(st.D, st.D + 4 * kBr, T(0));  // D, R, U, PX
        }
        const int64_t j_first = first_key<T>(range.lo);
        for (int64_t j0 = j_first; j0 < range.hi; j0 += kBc) {  // sweep 1
          const int64_t cols = std::min(kBc, range.hi - j0), cp = round_to_lanes<T>(cols);
          T* s = c.P + j0;
          if (dots) {  // S as the forward summed it
            tile_dots(rows, cols, dq_n, qs, dq_p, kr + j0 * dq_p, dq_p, s, skv_p);
          } else {
            tile_gemm_panels(rows, cp, Dqk, qs, dq_p, 1, kt + j0 * Dqk, Dqk * W, s, skv_p, false);
          }
          finish_scores(p, seq, s, skv_p, b, h, i0, rows, j0, cols, softcap ? c.th + j0 : nullptr);
          probabilities(s, skv_p, rows, cols, cp, st.lse);
          tile_gemm_panels(rows, cp, Dv, dot, dv_p, 1, vt + j0 * Dv, Dv * W, c.dP + j0, skv_p,
                           false);
          tile_gemm_panels(rows, cp, Dv, dot, dv_p, 1, ct + j0 * Dv, Dv * W, c.X + j0, skv_p,
                           false);
          tile_gemm_panels(rows, cp, Dqk, as, dq_p, 1, kt + j0 * Dqk, Dqk * W, c.G + j0, skv_p,
                           false);
          tile_gemm_panels(rows, cp, Dqk, qs, dq_p, 1, bkt + j0 * Dqk, Dqk * W, c.G + j0, skv_p,
                           true);
          if (dropout) {
            std::fill(z, z + rows * kBc, T(1));
            apply_dropout(p, z, kBc, b, h, i0, rows, j0, cols);
          }
          sweep1_elementwise(g, c, dropout ? z : nullptr, st, b, h, i0, rows, j0, cols, cp);
        }
        for (int64_t r = 0; r < rows; ++r)  // rowsum(P ⊙ ḡ(P)), expanded
          st.PgP[r] = st.U[r] - T(2) * st.D[r] * st.R[r] + st.PX[r];
        for (int64_t j0 = j_first; j0 < range.hi; j0 += kBc) {  // sweep 2
          const int64_t cols = std::min(kBc, range.hi - j0), cp = round_to_lanes<T>(cols);
          if (softcap) {
            sweep2_elementwise<T, true>(p, g, c, st, gs_row, b, h, i0, rows, j0, cols, cp);
          } else {
            sweep2_elementwise<T, false>(p, g, c, st, gs_row, b, h, i0, rows, j0, cols, cp);
          }
          const T *ds = c.dP + j0, *gs = c.G + j0, *gdp = c.X + j0, *pd = c.Pd + j0;
          // ḡ(Q) = scale (dS_raw Bk + ḡ(S_raw) K): scaled as it is stored.
          tile_gemm(rows, dq_p, cols, ds, skv_p, 1, bkr + j0 * dq_p, dq_p, gq, dq_p, true);
          tile_gemm(rows, dq_p, cols, gs, skv_p, 1, kr + j0 * dq_p, dq_p, gq, dq_p, true);
          // ḡ(K) = dS_rawᵀ as + ḡ(S_raw)ᵀ qs;  ḡ(V) = (ḡ(dP) ⊙ Z)ᵀ dO
          tile_gemm(cols, dq_p, rows, ds, 1, skv_p, as, dq_p, gk + j0 * dq_p, dq_p, true);
          tile_gemm(cols, dq_p, rows, gs, 1, skv_p, qs, dq_p, gk + j0 * dq_p, dq_p, true);
          tile_gemm(cols, dv_p, rows, gdp, 1, skv_p, dot, dv_p, gv + j0 * dv_p, dv_p, true);
          // ḡ(dO) = (P ⊙ Z) C + (ḡ(dP) ⊙ Z) V
          tile_gemm(rows, dv_p, cols, pd, skv_p, 1, cr + j0 * dv_p, dv_p, gdo, dv_p, true);
          tile_gemm(rows, dv_p, cols, gdp, skv_p, 1, vr + j0 * dv_p, dv_p, gdo, dv_p, true);
        }
        store_rows(g.gq, b, h, q0, rows, gq, dq_p, scale);
        store_rows(g.gdout, b, h, q0, rows, gdo, dv_p, T(1));
      }
      if (parts == 1) {
        store_rows(g.gk, b, hk, k0, kn, gk, dq_p, T(1));
        store_rows(g.gv, b, hk, k0, kn, gv, dv_p, T(1));
      } else {
        T* dst = g_parts + (part * part_rows + hk * all_keys + first_key_row[b]) * (dq_p + dv_p);
        std::copy(gk, gk + kn * dq_p, dst);
        std::copy(gv, gv + kn * dv_p, dst + kn * dq_p);
      }
    }
    if (parts > 1) {  // ḡ(K), ḡ(V): the parts' sums added in part order
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < B * Hk; ++task) {
        const int64_t b = task / Hk, hk = task % Hk;
        const int64_t kn = first_key_row[b + 1] - first_key_row[b];
        T* sum = g_parts + (hk * all_keys + first_key_row[b]) * (dq_p + dv_p);
        add_parts(sum, kn * (dq_p + dv_p), parts, part_rows * (dq_p + dv_p));
        const int64_t k0 = sdpa_sequence(p, b).kv0;
        store_rows(g.gk, b, hk, k0, kn, sum, dq_p, T(1));
        store_rows(g.gv, b, hk, k0, kn, sum + kn * dq_p, dv_p, T(1));
      }
    }
  }
}

}  // namespace

// float32 and float64 only: the op computes 16-bit inputs' double backward in float32.
bool CpuBackend::sdpa_double_backward(const SdpaParams& p, const SdpaDoubleGradViews& g) {
  if (p.q.dtype == kFloat64) {
    double_backward_typed<double>(p, g);
    return true;
  }
  if (p.q.dtype != kFloat32) return false;
  double_backward_typed<float>(p, g);
  return true;
}

}  // namespace tg::cpu
