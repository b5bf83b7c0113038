// What the CUDA SDPA kernels (the simple ones of cuda_sdpa.cu, the tiled ones of
// cuda_sdpa_flash.cu, the tensor-core ones of cuda_sdpa_mma*.cu) share: their argument block, a
// plain struct passed by value with the per-element masking rules of sdpa_params.h, the key
// range of a query tile, a score's gradient, the delta pass, the head-dim dispatch, and small
// warp helpers.
#pragma once
#include <limits>
#include <type_traits>

#include "backends/cuda/cuda_util.cuh"
#include "backends/scalar_ops.h"
#include "backends/sdpa_params.h"

namespace tg::cuda {

// The row views are (B, H, S, D) at any strides; in the ragged layout (SdpaParams) their batch
// stride is 0, S is the longest sequence, and sequence b's rows start at seq(b).q0 / kv0.
// T is the arithmetic's type (scalars, statistics, delta, the score gradient); S the rows'
// and the float mask's storage type: T itself, or bfloat16 / float16 with T = float for the
// tensor-core kernels.
template <class T, class S = T>
struct Args {
  const S *q, *k, *v, *o, *dout;
  int64_t qs[4], ks[4], vs[4], os[4], dos[4];
  S *out, *dq, *dk, *dv;
  T *stats, *delta, *dscores;
  // The tensor-core backward's dQ sums (B, Hq, Sq, Dqk) in float32, when its dK/dV pass adds
  // them up (cuda_sdpa_deterministic() false); else null.
  T* dq_sum;
  // The same sums in fixed point (cuda_sdpa_deterministic_dq() "fixed"; cuda_sdpa_dq_fixed.cuh):
  // integer counts of each row's unit dq_unit[row], and the bounds of K and V per key chunk
  // that the units come from; else null.
  unsigned long long* dq_fixed;
  float *dq_unit, *kv_bounds;
  int64_t outs[4], sts[4], dqs[4], dks[4], dvs[4];
  const void* mask;
  bool mask_bool;
  int64_t ms[4];
  SdpaLengths lens;        // each sequence's place, lengths and alignment
  const int64_t* kv_rows;  // forward, ragged: key row kv0 + j is row kv_rows[kv0 + j]
  int64_t B, Hq, Hk, Sq, Skv, Dqk, Dv;
  T scale, softcap, keep_scale;
  bool causal, alibi;
  int64_t window;
  float dropout_p;
  uint64_t seed, offset;

  __device__ SdpaSequence seq(int64_t b) const { return lens.of(b); }
  // Where sequence s's key j lies in the k and v row views.
  __device__ int64_t key_row(const SdpaSequence& s, int64_t j) const {
    return kv_rows ? kv_rows[s.kv0 + j] : s.kv0 + j;
  }
  // The logsumexp of query row `row` (of the row views) of head h.
  __device__ T& stat(int64_t b, int64_t h, int64_t row) const {
    return stats[b * sts[0] + h * sts[1] + row * sts[2]];
  }
  // Dropout's draw for sequence b's row i and key j: their place in the padded (B, Hq, Sq, Skv)
  // layout in either layout (DESIGN §4).
  __device__ bool keep(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const uint64_t linear = ((static_cast<uint64_t>(b) * Hq + h) * Sq + i) * Skv + j;
    return sdpa_keep(seed, offset, linear, dropout_p);
  }
  // The final score of sequence b's row i and key j of head h (indices within the sequence)
  // from its scaled dot product: -inf where causal, window, padding or a boolean mask hide the
  // key; else softcap, ALiBi and the float mask, in the CPU's order. *t receives
  // tanh(dot / softcap) for the backward's chain rule.
  __device__ T score(int64_t b, int64_t h, int64_t i, int64_t j, T dot, T slope,
                     const SdpaSequence& s, T* t) const {
    const T ninf = -std::numeric_limits<T>::infinity();
    const int64_t ia = i + s.shift;
    if (i >= s.len_q || j >= s.len_kv || !sdpa_visible(causal, window, ia, j)) return ninf;
    T v = dot;
    if (softcap > T(0)) v = sdpa_softcap(v, softcap, *t);
    if (alibi) v = sdpa_alibi(v, slope, ia, j);
    if (mask) {
      const int64_t off = b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3];
      if (mask_bool) {
        if (!static_cast<const bool*>(mask)[off]) return ninf;
      } else {
        v += static_cast<T>(static_cast<const S*>(mask)[off]);
      }
    }
    return v;
  }
  // No mask, ALiBi or softcap: where causal, window and padding leave a key visible, its score
  // is the scaled dot product itself.
  __host__ __device__ bool plain() const { return !mask && !alibi && !(softcap > T(0)); }
  __device__ T slope_of(int64_t h) const {
    return alibi ? static_cast<T>(alibi_slope(h, Hq)) : T(0);
  }
};

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = 16; o > 0; o /= 2) {
    const T u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  return v;
}

__device__ __forceinline__ int64_t at4(const int64_t* st, int64_t a, int64_t b, int64_t c,
                                       int64_t d) {
  return a * st[0] + b * st[1] + c * st[2] + d * st[3];
}

// The keys [lo, hi) that causal, window and padding leave visible to some row of the query
// tile [i0, i0 + tile) of sequence sq.
template <class T, class S>
__device__ __forceinline__ void key_range(const Args<T, S>& a, const SdpaSequence& sq, int64_t i0,
                                          int64_t tile, int64_t& lo, int64_t& hi) {
  const int64_t rows = min(tile, sq.rows_q - i0);
  const IndexRange r = sdpa_key_range(a.causal, a.window, i0 + sq.shift, i0 + rows - 1 + sq.shift,
                                      i0 < sq.len_q ? sq.len_kv : 0);
  lo = r.lo;
  hi = r.hi < r.lo ? r.lo : r.hi;
}

// The gradient of one score from its recomputed parts (float arithmetic): returns dS
// (softcap's factor applied) and sets *pd to the probability as the forward used it (after
// dropout), *ds_raw to dS before softcap's factor (the float mask's gradient).
template <class S>
__device__ __forceinline__ float score_grad(const Args<float, S>& a, int64_t b, int64_t h,
                                            int64_t i, int64_t j, bool valid, float dot, float dp,
                                            float lse, float delta, float slope,
                                            const SdpaSequence& sq, float* pd, float* ds_raw) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  float t = 0;
  const float s = valid ? a.score(b, h, i, j, dot, slope, sq, &t) : ninf;
  // At most 1, as the forward's: at scores near 10^9 s and lse, rounded apart, can differ by
  // more than exp's range (NaN kept).
  const float d = s - lse;
  const float p = s == ninf || lse == ninf ? 0.0f : scalar::exp_f32(d > 0.0f ? 0.0f : d);
  *pd = p;
  if (a.dropout_p > 0 && p != 0.0f) {
    const bool kept = a.keep(b, h, i, j);
    *pd = kept ? p * a.keep_scale : 0.0f;
    dp = kept ? dp * a.keep_scale : 0.0f;
  }
  float ds = p * (dp - delta);
  *ds_raw = ds;
  if (a.softcap > 0) ds *= sdpa_softcap_grad(t);
  return ds;
}

// D = rowsum(dO * O) of padded query row `row` of (B, Hq, Sq) into a.delta, by one warp (the
// backward's first pass; rows past a ragged sequence's own are skipped); returns it to every
// lane (0 for a skipped row), and |dO|^2 of the row into *dout_sq where asked, in the same walk.
template <class S>
__device__ __forceinline__ float delta_row(const Args<float, S>& a, int64_t row, int lane,
                                           float* dout_sq = nullptr) {
  if (row >= a.B * a.Hq * a.Sq) return 0;
  const int64_t i = row % a.Sq, h = (row / a.Sq) % a.Hq, b = row / (a.Sq * a.Hq);
  const SdpaSequence sq = a.seq(b);
  if (i >= sq.rows_q) return 0;
  if (a.dq_sum)  // the row's dQ sums start at 0 (the dK/dV pass adds to them)
    for (int64_t d = lane; d < a.Dqk; d += 32) a.dq_sum[row * a.Dqk + d] = 0;
  float acc = 0, sq_sum = 0;
  for (int64_t d = lane; d < a.Dv; d += 32) {
    const float x = static_cast<float>(a.dout[at4(a.dos, b, h, sq.q0 + i, d)]);
    acc += x * static_cast<float>(a.o[at4(a.os, b, h, sq.q0 + i, d)]);
    if (dout_sq) sq_sum += x * x;
  }
  acc = warp_sum(acc);
  if (lane == 0) a.delta[row] = acc;
  if (dout_sq) *dout_sq = warp_sum(sq_sum);
  return acc;
}

// Calls f(std::integral_constant<int, width>) for the smallest of the kernels' head-dim
// widths {32, 64, 128, 256} that holds head dim `dim`; false when none does.
template <class F>
bool with_head_width(int64_t dim, F&& f) {
  if (dim <= 32) {
    f(std::integral_constant<int, 32>{});
  } else if (dim <= 64) {
    f(std::integral_constant<int, 64>{});
  } else if (dim <= 128) {
    f(std::integral_constant<int, 128>{});
  } else if (dim <= 256) {
    f(std::integral_constant<int, 256>{});
  } else {
    return false;
  }
  return true;
}

template <class T, class S = T>
Args<T, S> make_args(const SdpaParams& p);
// The backward's extra pointers (dout, the gradients, the score gradient).
template <class T, class S>
void set_grad_args(Args<T, S>& a, const View& dout, const SdpaGradViews& g);

// The tiled kernels (float32, head dims up to 128); false when they do not apply and the
// simple kernels should run. `delta` holds rowsum(dO * O) per query row for the backward,
// indexed as the padded (B, Hq, Sq) rows in either layout.
bool sdpa_flash_forward(int device, const Args<float>& a);
bool sdpa_flash_backward(int device, const Args<float>& a);

// The tensor-core kernels (cuda_sdpa_mma.cu) for bfloat16 and float16 rows (and float32 ones
// under set_float32_matmul_precision("high")) on devices of compute capability 8.0 and later,
// head dims up to 256, while cuda_sdpa_tensor_cores() is on; false when they do not apply
// (nothing was run).
bool sdpa_mma_forward(int device, const SdpaParams& p);
bool sdpa_mma_backward(int device, const SdpaParams& p, const View& dout, const SdpaGradViews& g);

}  // namespace tg::cuda
