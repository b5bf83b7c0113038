// What sdpa, its reference and its double backward share: the argument checks, the score
// pieces composed from ops, the differentiable backward.
#pragma once
#include <optional>
#include <vector>

#include "backends/sdpa_params.h"
#include "ops/sdpa.h"

namespace tg::detail {

// The ragged layout of a call (DESIGN §4): the offsets, checked and on the host, the batch
// and the longest sequences. nullopt when the options give no cu_seqlens (the dense layout);
// "[sdpa] ..." errors for offsets or inputs that do not fit it.
struct SdpaRagged {
  std::vector<int64_t> cu_q, cu_kv;
  int64_t batch = 0, max_q = 0, max_kv = 0;
};
std::optional<SdpaRagged> sdpa_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const SdpaOptions& o);
// A packed (T, H, D) tensor as the kernels' (B, H, max, D) row view: batch stride 0, the
// sequences' first rows given by the offsets (SdpaParams::cu_seqlens_q/kv).
View ragged_rows(const Tensor& t, int64_t batch, int64_t max);
// out, stats, dout and the gradients as the kernels' row views: (B, H, S, D) as it is, or the
// ragged rows of a packed (T, H, D) tensor (query rows, or key rows when !query_rows).
View sdpa_rows(const Tensor& t, const SdpaParams& p, bool query_rows);
// Each sequence's length, int64 (B) on `device`.
Tensor sequence_lengths(const std::vector<int64_t>& cu, Device device);
// The ragged call as the padded layout computes it: the options with each sequence's length as
// seq_len_q / seq_len_kv (the offsets dropped) and each sequence's alignment shift, int64
// (B, 1, 1, 1), for sdpa_score_parts (bottom-right: its own len_kv - len_q; else 0).
struct SdpaPadded {
  SdpaOptions opts;
  Tensor row_shift;
};
SdpaPadded sdpa_padded(const SdpaOptions& opts, const SdpaRagged& r, Device device);
// Packed (T, H, D) -> padded (B, H, max, D) (padding rows are copies of row 0, to be masked)
// and back: differentiable, for the reference.
Tensor pad_sequences(const Tensor& t, const std::vector<int64_t>& cu, int64_t max);
Tensor unpad_sequences(const Tensor& t, const std::vector<int64_t>& cu);

// Validates q, k, v and the options ("[sdpa] ..." errors) and returns the kernel parameters
// (out and stats views left empty).
SdpaParams sdpa_params(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& o);

// sdpa's ragged forward (no autograd) with keys and values read in place through row indices:
// sequence b's key j is row kv_rows[cu_seqlens_kv[b] + j] of k_rows (R, Hk, Dqk) and v_rows
// (R, Hk, Dv) (R >= 1), as if those rows had been gathered into the ragged k and v. int64
// contiguous kv_rows on q's device, each in [0, R) (the caller's promise): tg::sdpa_paged's
// path when no gradient is wanted.
SdpaResult sdpa_forward_rows(const Tensor& q, const Tensor& k_rows, const Tensor& v_rows,
                             const Tensor& kv_rows, const SdpaOptions& opts);

// tg::sdpa_paged once its page table is read: ragged q (Tq, Hq, Dqk) with opts.cu_seqlens_q,
// pools (blocks, block, Hk, D), and kv_rows (int64 on q's device) every key's pool row, the
// pools seen as (blocks * block, Hk, D) rows, sequence after sequence as opts.cu_seqlens_kv
// says. Without a gradient wanted the kernel reads the pools in place (sdpa_forward_rows);
// else the rows are gathered and sdpa runs, their gradient flowing back into the pools.
SdpaResult sdpa_pool_rows(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                          const Tensor& kv_rows, const SdpaOptions& opts);

// The scores composed from ops (B, Hq, Sq, Skv): raw = scale Q Kᵀ (before softcap), the
// additive bias after softcap (ALiBi plus a float mask; undefined when neither) and where
// keys are allowed (bool, broadcastable). Materializes the scores.
struct SdpaScoreParts {
  Tensor raw, bias, allowed;
};
// `row_shift` (int64, (B, 1, 1, 1)), when given, replaces p.align_shift(): each sequence's own
// shift (the ragged layout computed padded).
SdpaScoreParts sdpa_score_parts(const Tensor& q, const Tensor& k, const SdpaOptions& opts,
                                const SdpaParams& p, const Tensor& row_shift = Tensor());
// The logsumexp of each row of masked scores (keepdim), NaN-free in value and gradient
// when a row is fully masked: there it is 0 (so exp(-inf - lse) = 0) and nonempty is false.
struct RowLogsumexp {
  Tensor lse, nonempty;
};
RowLogsumexp sdpa_row_logsumexp(const Tensor& masked);

// Dropout's keep mask over the scores, scaled by 1 / (1 - p), in q's dtype.
Tensor sdpa_dropout_scale(const Tensor& q, int64_t Skv, const SdpaOptions& opts);

// The backward kernel (sdpa_backward); dmask (the score gradient reduced to the mask's shape)
// only when want_dmask.
SdpaGrads sdpa_backward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& dout, const Tensor& stats, const SdpaOptions& opts,
                             bool want_dmask);

// sdpa's backward under create_graph: the same gradients (dq, dk, dv, then dmask when
// mask_grad), recorded as an op of q, k, v, the mask and dout whose own backward is the
// hand-written double backward (sdpa_double_backward.cpp).
std::vector<Tensor> sdpa_backward_differentiable(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& out, const Tensor& dout,
                                                 const Tensor& stats, const SdpaOptions& opts,
                                                 bool mask_grad);

}  // namespace tg::detail
