// What an SDPA kernel needs, as raw views and scalars (backends never see Tensor or autograd),
// and the per-element masking rules every backend applies the same way (DESIGN.md §4).
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/backend.h"
#include "core/philox.h"  // TG_HD

namespace tg {

// Where sequence b of a batch lies and what it may see: its rows start at q0 / kv0 of the row
// views, rows_q / rows_kv of them exist in memory, len_q / len_kv are not padding, and
// shift turns its query rows into aligned positions. Dense: q0 = kv0 = 0, rows the full Sq /
// Skv, lengths from seq_len_q / seq_len_kv, the tensors' shift; ragged: everything from the
// sequence's own offsets, so bottom-right alignment and ALiBi use its own lengths.
struct SdpaSequence {
  int64_t q0, kv0, rows_q, rows_kv, len_q, len_kv, shift;
};

// What SdpaSequence is read from, as plain pointers (host or device memory, as the kernel's),
// so that the CPU and CUDA kernels compute it with the same code.
struct SdpaLengths {
  const int64_t *cu_q = nullptr, *cu_kv = nullptr;    // ragged: (B + 1) offsets
  const int64_t *len_q = nullptr, *len_kv = nullptr;  // dense, optional: (B) lengths
  int64_t cu_q_stride = 0, cu_kv_stride = 0, len_q_stride = 0, len_kv_stride = 0;
  int64_t Sq = 0, Skv = 0;  // dense: the tensors' lengths
  bool bottom_right = false;

  TG_HD SdpaSequence of(int64_t b) const {
    SdpaSequence s{};
    if (cu_q) {
      s.q0 = cu_q[b * cu_q_stride];
      s.kv0 = cu_kv[b * cu_kv_stride];
      s.rows_q = s.len_q = cu_q[(b + 1) * cu_q_stride] - s.q0;
      s.rows_kv = s.len_kv = cu_kv[(b + 1) * cu_kv_stride] - s.kv0;
      s.shift = bottom_right ? s.len_kv - s.len_q : 0;
      return s;
    }
    s.rows_q = Sq;
    s.rows_kv = Skv;
    s.len_q = len_q ? len_q[b * len_q_stride] : Sq;
    s.len_kv = len_kv ? len_kv[b * len_kv_stride] : Skv;
    s.shift = bottom_right ? Skv - Sq : 0;
    return s;
  }
};

struct SdpaParams {
  // q (B, Hq, Sq, Dqk), k (B, Hk, Skv, Dqk), v (B, Hk, Skv, Dv), any strides.
  View q, k, v;
  // out (B, Hq, Sq, Dv) any strides (tg::sdpa lays it out as (B, Sq, Hq, Dv)); stats
  // (B, Hq, Sq, 1) any strides.
  View out, stats;
  // Optional (data == nullptr when absent): mask broadcast to (B, Hq, Sq, Skv) by its strides
  // (float: added; bool: true = attend); seq_len_q / seq_len_kv int64 (B).
  View mask, seq_len_q, seq_len_kv;
  // The ragged layout (DESIGN §4), int64 (B + 1) offsets, both set or neither. Then every
  // row view above (q, k, v, out, stats and the gradients) has stride 0 on its batch dim and
  // sizes[2] = the longest sequence: sequence b's row i lies at row cu_seqlens[b] + i, and
  // only its own rows exist (Sq, Skv above are the longest lengths; the mask, the score
  // gradient and dropout's element index keep the padded (B, Hq, Sq, Skv) layout).
  View cu_seqlens_q, cu_seqlens_kv;
  // Optional, ragged and forward only (the CPU kernel; tg::sdpa_paged without gradients): int64
  // contiguous, one entry per key row: key row cu_seqlens_kv[b] + j lies at row
  // kv_rows[cu_seqlens_kv[b] + j] of the k and v row views, so a paged cache's blocks are
  // read in place instead of gathered first.
  View kv_rows;
  // Ragged: the rows of the packed tensors behind the row views, q's (out's, dq's) and k's
  // (v's, dk's, dv's; with kv_rows the pool's). The kernels never need them; a copy of a row
  // view does (the 16-bit stand-ins of half_kernels.h).
  int64_t packed_q = 0, packed_kv = 0;
  double scale = 1.0;
  double softcap = 0.0;
  bool causal = false;
  bool bottom_right = false;
  int64_t window = 0;
  bool alibi = false;
  double dropout_p = 0.0;
  uint64_t seed = 0, offset = 0;

  int64_t batch() const { return q.sizes[0]; }
  int64_t heads_q() const { return q.sizes[1]; }
  int64_t heads_kv() const { return k.sizes[1]; }
  int64_t len_q() const { return q.sizes[2]; }
  int64_t len_kv() const { return k.sizes[2]; }
  int64_t dim_qk() const { return q.sizes[3]; }
  int64_t dim_v() const { return v.sizes[3]; }
  bool ragged() const { return cu_seqlens_q.data != nullptr; }
  // Shift from a query row to its aligned position: 0 (top-left) or Skv - Sq (bottom-right).
  int64_t align_shift() const { return bottom_right ? len_kv() - len_q() : 0; }
  // Each sequence's place and lengths (SdpaLengths::of), read from the views above.
  SdpaLengths lengths() const {
    const auto ptr = [](const View& v) { return static_cast<const int64_t*>(v.data); };
    const auto stride = [](const View& v) { return v.data ? v.strides[0] : 0; };
    SdpaLengths l;
    l.cu_q = ptr(cu_seqlens_q);
    l.cu_kv = ptr(cu_seqlens_kv);
    l.len_q = ptr(seq_len_q);
    l.len_kv = ptr(seq_len_kv);
    l.cu_q_stride = stride(cu_seqlens_q);
    l.cu_kv_stride = stride(cu_seqlens_kv);
    l.len_q_stride = stride(seq_len_q);
    l.len_kv_stride = stride(seq_len_kv);
    l.Sq = len_q();
    l.Skv = len_kv();
    l.bottom_right = bottom_right;
    return l;
  }
};

// Sequence b of a call whose offsets or lengths are in host memory (the CPU kernels).
inline SdpaSequence sdpa_sequence(const SdpaParams& p, int64_t b) { return p.lengths().of(b); }

// The element of a (B, H, S, 1) stats view at (b, h, row).
template <class T>
inline T* sdpa_stats_at(const View& stats, int64_t b, int64_t h, int64_t row) {
  return static_cast<T*>(stats.data) + b * stats.strides[0] + h * stats.strides[1] +
         row * stats.strides[2];
}

// Gradients an SDPA backward writes: dq/dk/dv shaped like q/k/v, any strides; dscores
// (B, Hq, Sq, Skv) contiguous when the float mask needs its gradient, else data == nullptr.
struct SdpaGradViews {
  View dq, dk, dv, dscores;
};

// SDPA's double backward (docs/SDPA_DOUBLE_BACKWARD.md): the first-order backward's input dout
// and the cotangents of its outputs, dq_bar (q's shape), dk_bar (k's), dv_bar (v's) and, with
// a float mask's gradient, dmask_bar broadcast to (B, Hq, Sq, Skv) by its strides (else
// data == nullptr); all any strides. The kernel writes the gradients of q, k, v and dout (any
// strides, shaped like them) and, when gmask.data is set, the score-shaped gradient of the
// mask, (B, Hq, Sq, Skv) contiguous and zero-filled by the caller (tiles the kernel skips stay
// zero).
struct SdpaDoubleGradViews {
  View dout, dq_bar, dk_bar, dv_bar, dmask_bar;
  View gq, gk, gv, gdout, gmask;
};

// ALiBi slope of head h of H: 2^(-8(h+1)/H) for H a power of two; otherwise the slopes of the
// largest power of two n below H, then every other slope of 2n (Press et al., 2022).
TG_HD inline double alibi_slope(int64_t h, int64_t heads) {
  int64_t n = 1;
  while (n * 2 <= heads) n *= 2;
  if (h < n) return exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(n));
  return exp2(-4.0 * static_cast<double>(2 * (h - n) + 1) / static_cast<double>(n));
}

// Whether key j is structurally visible from aligned query row ia (causal and window; the
// padding and boolean mask are checked separately).
TG_HD inline bool sdpa_visible(bool causal, int64_t window, int64_t ia, int64_t j) {
  if (causal && j > ia) return false;
  if (window > 0 && j <= ia - window) return false;
  return true;
}

// Whether causal and window leave every key of [j_first, j_last] visible from every aligned
// query row of [ia_first, ia_last]: a tile on which kernels may skip the per-element rules.
TG_HD inline bool sdpa_all_visible(bool causal, int64_t window, int64_t ia_first, int64_t ia_last,
                                   int64_t j_first, int64_t j_last) {
  if (causal && j_last > ia_first) return false;
  if (window > 0 && j_first <= ia_last - window) return false;
  return true;
}

// The range [lo, hi) of key (or query) indices a rule leaves; empty when hi <= lo.
struct IndexRange {
  int64_t lo, hi;
};

// The keys of [0, len_kv) that causal and window leave visible to some aligned query row of
// [ia_first, ia_last] (a tile; one row when the two are equal). The padding is len_kv.
TG_HD inline IndexRange sdpa_key_range(bool causal, int64_t window, int64_t ia_first,
                                       int64_t ia_last, int64_t len_kv) {
  IndexRange r{0, len_kv};
  if (causal && ia_last + 1 < r.hi) r.hi = ia_last + 1;
  if (window > 0 && ia_first - window + 1 > r.lo) r.lo = ia_first - window + 1;
  return r;
}

// The query rows of [0, len_q) (row indices, not aligned) that see some key of
// [j_first, j_last]: the same rules read the other way (causal needs ia >= j, a window
// ia < j + window), with ia = i + shift.
TG_HD inline IndexRange sdpa_query_range(bool causal, int64_t window, int64_t shift,
                                         int64_t j_first, int64_t j_last, int64_t len_q) {
  IndexRange r{0, len_q};
  if (causal && j_first - shift > r.lo) r.lo = j_first - shift;
  if (window > 0 && j_last + window - shift < r.hi) r.hi = j_last + window - shift;
  return r;
}

// The score rules after the scaled dot product, in DESIGN §4's order: softcap, then ALiBi (the
// masks come last). `t` receives tanh(s / cap), which softcap's gradient needs.
template <class T>
TG_HD inline T sdpa_softcap(T s, T cap, T& t) {
  t = std::tanh(s / cap);
  return cap * t;
}
template <class T>
TG_HD inline T sdpa_softcap_grad(T t) {
  return T(1) - t * t;
}
template <class T>
TG_HD inline T sdpa_alibi(T s, T slope, int64_t ia, int64_t j) {
  return s - slope * static_cast<T>(ia > j ? ia - j : j - ia);
}

// Dropout keeps score (b, h, i, j) when the Philox uniform at offset + its row-major index in
// (B, Hq, Sq, Skv) exceeds p: sdpa_keeps for a uniform already drawn (the CPU draws them a
// row at a time), sdpa_keep from its position.
TG_HD inline bool sdpa_keeps(float uniform, float p) { return uniform > p; }
TG_HD inline bool sdpa_keep(uint64_t seed, uint64_t offset, uint64_t linear, float p) {
  return sdpa_keeps(philox_uniform(seed, offset + linear), p);
}

}  // namespace tg
