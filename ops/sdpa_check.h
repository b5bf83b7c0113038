// What sdpa, its reference and its double backward share: the argument checks, the score
// pieces composed from ops, the differentiable backward.
#pragma once
#include "backends/sdpa_params.h"
#include "ops/sdpa.h"

namespace tg::detail {

// Validates q, k, v and the options ("[sdpa] ..." errors) and returns the kernel parameters
// (out and stats views left empty).
SdpaParams sdpa_params(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& o);

// The scores composed from ops (B, Hq, Sq, Skv): raw = scale Q Kᵀ (before softcap), the
// additive bias after softcap (ALiBi plus a float mask; undefined when neither) and where
// keys are allowed (bool, broadcastable). Materializes the scores.
struct SdpaScoreParts {
  Tensor raw, bias, allowed;
};
SdpaScoreParts sdpa_score_parts(const Tensor& q, const Tensor& k, const SdpaOptions& opts,
                                const SdpaParams& p);
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
