// sdpa_reference: SDPA composed from primitive ops, with autograd through them. It
// materializes the (B, Hq, Sq, Skv) scores; it is the yardstick the kernels are tested against.
#include <cmath>

#include "autograd/autograd.h"
#include "ops/ops.h"
#include "ops/sdpa_check.h"

namespace tg {

namespace detail {

SdpaScoreParts sdpa_score_parts(const Tensor& q, const Tensor& k, const SdpaOptions& opts,
                                const SdpaParams& p, const Tensor& row_shift) {
  const int64_t B = q.size(0), Hq = q.size(1), Sq = q.size(2), D = q.size(3);
  const int64_t Hk = k.size(1), G = Hq / Hk, Skv = k.size(2);
  const TensorOptions idx = TensorOptions(kInt64).device(q.device());
  SdpaScoreParts r;
  // GQA without repeating K: query heads of a group share one broadcast K head.
  Tensor s = matmul(q.reshape({B, Hk, G, Sq, D}), k.unsqueeze(2).transpose(-1, -2));
  r.raw = mul(s.reshape({B, Hq, Sq, Skv}), p.scale);

  // (Sq, 1), or (B, 1, Sq, 1) with a shift per sequence.
  Tensor i_aligned =
      row_shift.defined()
          ? add(arange(Sq, idx).reshape({1, 1, Sq, 1}), row_shift)
          : add(arange(Sq, idx), static_cast<double>(p.align_shift())).reshape({Sq, 1});
  Tensor j = arange(Skv, idx).reshape({1, Skv});
  if (p.alibi) {
    Tensor dist = abs(sub(i_aligned, j)).to(q.dtype());
    Tensor slopes = alibi_slopes(Hq).to(q.dtype()).to(q.device()).reshape({Hq, 1, 1});
    r.bias = neg(mul(slopes, dist));
  }
  const bool bool_mask = opts.mask && opts.mask->dtype() == kBool;
  if (opts.mask && !bool_mask) r.bias = r.bias.defined() ? add(r.bias, *opts.mask) : *opts.mask;

  Tensor allowed = ones({1, 1, Sq, Skv}, idx.dtype(kBool));
  if (p.causal) allowed = logical_and(allowed, le(j, i_aligned));
  if (p.window > 0)
    allowed = logical_and(allowed, gt(j, sub(i_aligned, static_cast<double>(p.window))));
  if (bool_mask) allowed = logical_and(allowed, *opts.mask);
  if (opts.seq_len_q)
    allowed = logical_and(
        allowed, lt(arange(Sq, idx).reshape({1, 1, Sq, 1}), opts.seq_len_q->reshape({B, 1, 1, 1})));
  if (opts.seq_len_kv)
    allowed =
        logical_and(allowed, lt(j.reshape({1, 1, 1, Skv}), opts.seq_len_kv->reshape({B, 1, 1, 1})));
  r.allowed = allowed;
  return r;
}

RowLogsumexp sdpa_row_logsumexp(const Tensor& masked) {
  Tensor m = max(masked.detach(), {-1}, true);
  m = where(isfinite(m), m, 0.0);
  Tensor sumexp = sum(exp(sub(masked, m)), {-1}, true);
  Tensor nonempty = gt(sumexp, 0.0);
  return {add(log(where(nonempty, sumexp, 1.0)), m), nonempty};
}

Tensor sdpa_dropout_scale(const Tensor& q, int64_t Skv, const SdpaOptions& opts) {
  Tensor keep = sdpa_dropout_mask(q.size(0), q.size(1), q.size(2), Skv, opts, q.device());
  return mul(keep.to(q.dtype()), 1.0 / (1.0 - opts.dropout_p));
}

}  // namespace detail

namespace {

// The (B, H, S, D) layout; row_shift as in sdpa_score_parts.
SdpaResult dense_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                           const SdpaOptions& opts, const Tensor& row_shift) {
  SdpaParams p = detail::sdpa_params(q, k, v, opts);
  if (is_half(q.dtype())) {  // in float32, the output rounded once (the kernels' contract)
    SdpaOptions o = opts;
    if (o.mask && o.mask->dtype() != kBool) o.mask = o.mask->to(kFloat32);
    SdpaResult r = dense_reference(q.to(kFloat32), k.to(kFloat32), v.to(kFloat32), o, row_shift);
    return {r.out.to(q.dtype()), r.stats};
  }
  const int64_t B = q.size(0), Hq = q.size(1), Sq = q.size(2);
  const int64_t Hk = k.size(1), G = Hq / Hk, Skv = k.size(2), Dv = v.size(3);
  detail::SdpaScoreParts parts = detail::sdpa_score_parts(q, k, opts, p, row_shift);
  Tensor s = parts.raw;
  if (p.softcap > 0) s = mul(tanh(div(s, p.softcap)), p.softcap);
  if (parts.bias.defined()) s = add(s, parts.bias);
  s = where(parts.allowed, s, -INFINITY);

  auto [lse, nonempty] = detail::sdpa_row_logsumexp(s);
  Tensor stats = where(nonempty, lse, -INFINITY);
  Tensor prob = exp(sub(s, lse));
  if (p.dropout_p > 0) prob = mul(prob, detail::sdpa_dropout_scale(q, Skv, opts));
  Tensor out = matmul(prob.reshape({B, Hk, G, Sq, Skv}), v.unsqueeze(2));
  return {out.reshape({B, Hq, Sq, Dv}), stats.detach()};
}

// The ragged layout computed padded: every sequence padded to the longest, its length as
// seq_len_q/kv, its own alignment shift; the padded rows dropped again. The mask and dropout
// already index the padded layout (DESIGN §4).
SdpaResult ragged_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                            const SdpaOptions& opts, const detail::SdpaRagged& r) {
  const detail::SdpaPadded padded = detail::sdpa_padded(opts, r, q.device());
  const SdpaResult d = dense_reference(
      detail::pad_sequences(q, r.cu_q, r.max_q), detail::pad_sequences(k, r.cu_kv, r.max_kv),
      detail::pad_sequences(v, r.cu_kv, r.max_kv), padded.opts, padded.row_shift);
  return {detail::unpad_sequences(d.out, r.cu_q), detail::unpad_sequences(d.stats, r.cu_q)};
}

}  // namespace

SdpaResult sdpa_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                          const SdpaOptions& opts) {
  if (std::optional<detail::SdpaRagged> r = detail::sdpa_ragged(q, k, v, opts)) {
    detail::sdpa_params(q, k, v, opts);  // the checks
    return ragged_reference(q, k, v, opts, *r);
  }
  return dense_reference(q, k, v, opts, Tensor());
}

}  // namespace tg
