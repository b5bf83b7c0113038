// The score rules of the tensor-core SDPA kernels (cuda_sdpa_mma_*.cu, cuda_sdpa_wgmma_*.cu) on
// their accumulator fragments: dropout's bits, an edge tile's scores and score gradients under
// any options (out of line), the visibility of plain() options' edge tiles (inline), the
// transposed plain path of a dK/dV tile, and which tiles need no rule at all (interior()).
// Built on the fragment pieces of cuda_sdpa_mma_tiles.cuh.
#pragma once
#include <cstdint>

#include "backends/cuda/cuda_sdpa_mma_tiles.cuh"

namespace tg::cuda::mma_sdpa {

// The per-element rules. Interior tiles (interior() below) need none of them
// but dropout; the rest run out of line on purpose: inlined at each of a tile's unrolled
// elements, the rules and Philox's rounds made the kernels 13 to 23 thousand instructions
// long, and warps spent half their stalls waiting for instruction fetch (Nsight Compute,
// H100). The kernels take Args as a __grid_constant__ parameter, so these read it in place.
// Edge tiles under plain() options need only visibility, which they test inline (keys_seen
// and hide_unseen below).

// Whether dropout keeps element (b, h, i, j) (DESIGN §5: the CPU's bits).
template <class S>
__device__ __noinline__ bool dropout_keeps(const Args<float, S>& a, int64_t b, int64_t h, int64_t i,
                                           int64_t j) {
  return a.keep(b, h, i, j);
}

// The score of row i and key j from their scaled dot product: -inf outside the tile's real
// rows and visible keys [.., hi), else Args::score.
template <class S>
__device__ __noinline__ float edge_score(const Args<float, S>& a, int64_t b, int64_t h, int64_t i,
                                         int64_t j, float dot, float slope, SdpaSequence sq,
                                         int64_t hi) {
  float t = 0;
  return i < sq.rows_q && j < hi ? a.score(b, h, i, j, dot, slope, sq, &t) : kNegInf;
}

// Under plain() options (causal, window and padding only) the keys a query row sees, and the
// query rows that see a key, are intervals: sdpa_key_range and sdpa_query_range of one row or
// key. An edge tile tests its elements against them inline, two integer comparisons each: out
// of line (edge_score), each call saved and restored the live accumulators around it, and the
// small causal problems of a training step spent most of their time there.
// A span is such an interval in a tile's own indices (the rules read the same from any
// origin), clamped to [0, n], as an int2 (x, y): the tile's c-th index is in it when
// x <= c < y (32-bit: a tile's offsets are small).
__device__ __forceinline__ int2 tile_span(IndexRange r, int n) {
  const auto clamp = [n](int64_t v) { return static_cast<int>(v < 0 ? 0 : v > n ? n : v); };
  return make_int2(clamp(r.lo), clamp(r.hi));
}
// The keys of the tile of n from j0 that row i sees, of those below `end` (the tile's visible
// range); none past `rows`.
template <class S>
__device__ __forceinline__ int2 keys_seen(const Args<float, S>& a, const SdpaSequence& sq,
                                          int64_t i, int64_t rows, int64_t end, int64_t j0, int n) {
  if (i >= rows || i >= sq.len_q) return make_int2(0, 0);
  const int64_t ia = i + sq.shift - j0;  // the rules in the tile's indices
  return tile_span(
      sdpa_key_range(a.causal, a.window, ia, ia, (end < sq.len_kv ? end : sq.len_kv) - j0), n);
}
// The query rows of the tile of n from i0 that see key j, of those below `end`; none for a key
// past `keys`.
template <class S>
__device__ __forceinline__ int2 rows_seeing(const Args<float, S>& a, const SdpaSequence& sq,
                                            int64_t j, int64_t keys, int64_t end, int64_t i0,
                                            int n) {
  if (j >= keys || j >= sq.len_kv) return make_int2(0, 0);
  return tile_span(sdpa_query_range(a.causal, a.window, sq.shift + i0, j, j,
                                    (end < sq.len_q ? end : sq.len_q) - i0),
                   n);
}
__device__ __forceinline__ bool in_span(int2 s, int c) { return s.x <= c && c < s.y; }

// Sets to `hidden` each element of a C tile (kN columns) outside its row's span: seen[r] for
// the rows frag_row(2 r).
template <int kN>
__device__ __forceinline__ void hide_outside(const int2 (&seen)[2], float (&c)[kN / 8][4],
                                             float hidden) {
#pragma unroll
  for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (!in_span(seen[e / 2], frag_col(nt, e))) c[nt][e] = hidden;
  }
}
// Sets to `hidden` each element of a warp's 16-row slice of scores (rows from row0, kN keys
// from j0) whose key its row does not see under plain() options.
template <int kN, class S>
__device__ __forceinline__ void hide_unseen(const Args<float, S>& a, const SdpaSequence& sq,
                                            int64_t row0, int64_t hi, int64_t j0,
                                            float (&s)[kN / 8][4], float hidden) {
  int2 seen[2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
    seen[r] = keys_seen(a, sq, row0 + frag_row(2 * r), sq.rows_q, hi, j0, kN);
  hide_outside<kN>(seen, s, hidden);
}

// A dK/dV tile's plain path (plain() options without dropout), transposed: its warp's 16 keys
// by kN queries, st the raw products S^T and dpt dP^T in, P^T and dS^T = P^T (dP^T - D) out,
// from the queries' statistics (log2 units) and D in shared memory (lse, dl); P^T and dS^T 0
// for the queries that do not see a key where the tile is not `inner` (rows past i_hi see none).
template <int kN, class S>
__device__ __forceinline__ void plain_grads_t(const Args<float, S>& a, const SdpaSequence& sq,
                                              bool inner, int64_t key_w, int64_t i_hi, int64_t i0,
                                              const float* lse, const float* dl, float scale_log2,
                                              float (&st)[kN / 8][4], float (&dpt)[kN / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < kN / 8; ++nt) {
    // Elements 0, 2 are query column q, elements 1, 3 column q + 1 (q even).
    const int q = frag_col(nt, 0);
    const float2 l = *reinterpret_cast<const float2*>(lse + q);
    const float2 d = *reinterpret_cast<const float2*>(dl + q);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      // At most 1, as in the forward: the queries' statistics vary along the tile, so no
      // row-wise rounding as scale_huge_row's; one min per element.
      const float p =
          mma::exp2_ftz(mma::min_nan(fmaf(st[nt][e], scale_log2, -(e % 2 ? l.y : l.x)), 0.0f));
      dpt[nt][e] = p * (dpt[nt][e] - (e % 2 ? d.y : d.x));
      st[nt][e] = p;
    }
  }
  if (!inner) {  // an edge tile
    int2 seen[2];
#pragma unroll
    for (int r = 0; r < 2; ++r)
      seen[r] = rows_seeing(a, sq, key_w + frag_row(2 * r), sq.rows_kv, i_hi, i0, kN);
    hide_outside<kN>(seen, st, 0.0f);
    hide_outside<kN>(seen, dpt, 0.0f);
  }
}

// score_grad's three results: dS, the probability after dropout, dS before softcap's factor.
struct ScoreGrad {
  float ds, pd, raw;
};
template <class S>
__device__ __noinline__ ScoreGrad edge_score_grad(const Args<float, S>& a, int64_t b, int64_t h,
                                                  int64_t i, int64_t j, bool valid, float dot,
                                                  float dp, float lse, float delta, float slope,
                                                  SdpaSequence sq) {
  ScoreGrad g;
  g.ds = score_grad(a, b, h, i, j, valid, dot, dp, lse, delta, slope, sq, &g.pd, &g.raw);
  return g;
}

// score_grad where plain() options leave the key visible, `dot` its scaled dot product: P is
// recomputed as the forward computed it (exp2_ftz), not with the CPU's exp.
template <class S>
__device__ __forceinline__ float plain_score_grad(const Args<float, S>& a, int64_t b, int64_t h,
                                                  int64_t i, int64_t j, float dot, float dp,
                                                  float lse, float delta, float* pd) {
  const float p = mma::exp2_ftz(mma::min_nan((dot - lse) * kLog2e, 0.0f));  // at most 1
  *pd = p;
  if (a.dropout_p > 0 && p != 0.0f) {
    const bool kept = dropout_keeps(a, b, h, i, j);
    *pd = kept ? p * a.keep_scale : 0.0f;
    dp = kept ? dp * a.keep_scale : 0.0f;
  }
  return p * (dp - delta);
}

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

}  // namespace tg::cuda::mma_sdpa
