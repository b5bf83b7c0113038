// sdpa's gradients as a differentiable function of q, k, v, the float mask and dout (what
// backward with create_graph records), and the backward of that function: SDPA's double
// backward, written by hand from the saved stats. docs/SDPA_DOUBLE_BACKWARD.md derives it;
// the names below are the derivation's.
#include <cmath>
#include <optional>

#include "autograd/autograd.h"
#include "backends/cpu_api.h"
#include "ops/fused_kernels.h"
#include "ops/op_util.h"
#include "ops/ops.h"
#include "ops/sdpa_check.h"

namespace tg {

namespace {

constexpr const char* kOp = "sdpa_backward";

struct FirstOrderCotangents {
  Tensor dq, dk, dv, dmask;  // A, B, C, E of the derivation; dmask undefined without mask_grad
};

struct DoubleBackward {
  Tensor q, k, v, mask, dout;  // gradients of the first-order op's inputs
};

// The double backward composed from ops in q's compute dtype: what runs without the tiled
// kernel (a backend that lacks it, fused kernels off, a third derivative) and the reference the
// kernel is tested against. It materializes the (B, Hq, Sq, Skv) scores. Under grad mode (a third
// derivative) it is itself recorded; the softmax statistics are then recomputed from the scores so
// that they are differentiated too.
// `row_shift` as in sdpa_score_parts (the ragged layout computed padded, below).
DoubleBackward double_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& dout, const Tensor& stats, const SdpaOptions& opts,
                               const FirstOrderCotangents& cot,
                               const Tensor& row_shift = Tensor()) {
  const SdpaParams p = detail::sdpa_params(q, k, v, opts);
  const int64_t B = q.size(0), Hq = q.size(1);
  const int64_t Hk = k.size(1), G = Hq / Hk, Skv = k.size(2);
  // K/V-shaped tensors to the query heads, and back (GQA sums over a group's heads).
  const auto to_q_heads = [&](const Tensor& t) {
    return t.unsqueeze(2).expand({B, Hk, G, Skv, t.size(3)}).reshape({B, Hq, Skv, t.size(3)});
  };
  const auto to_kv_heads = [&](const Tensor& t) {
    return sum(t.reshape({B, Hk, G, Skv, t.size(3)}), {2});
  };
  const auto tr = [](const Tensor& t) { return t.transpose(-1, -2); };

  const detail::SdpaScoreParts parts = detail::sdpa_score_parts(q, k, opts, p, row_shift);
  const Tensor& raw = parts.raw;  // scale Q Kᵀ
  Tensor capped = raw, t1, t2;    // softcap(raw) and its first and second derivatives
  if (p.softcap > 0) {
    Tensor th = tanh(div(raw, p.softcap));
    capped = mul(th, p.softcap);
    t1 = sub(1.0, mul(th, th));
    t2 = mul(mul(th, t1), -2.0 / p.softcap);
  }
  Tensor s = parts.bias.defined() ? add(capped, parts.bias) : capped;
  Tensor masked = where(parts.allowed, s, -INFINITY);
  // Under grad mode, differentiable; else the saved stats (a fully masked row: 0, so that
  // P = exp(-inf) = 0).
  const Tensor lse =
      grad_enabled() ? detail::sdpa_row_logsumexp(masked).lse : where(isfinite(stats), stats, 0.0);
  const Tensor P = exp(sub(masked, lse));
  const Tensor Z = p.dropout_p > 0 ? detail::sdpa_dropout_scale(q, Skv, opts) : Tensor();
  const auto dropped = [&Z](const Tensor& t) { return Z.defined() ? mul(t, Z) : t; };
  const Tensor Ke = to_q_heads(k), Ve = to_q_heads(v);

  // The first-order quantities (DESIGN §4).
  const Tensor dP = dropped(matmul(dout, tr(Ve)));
  const Tensor D = sum(mul(P, dP), {-1}, true);  // = rowsum(dO ⊙ O)
  const Tensor dS = mul(P, sub(dP, D));
  const Tensor dS_raw = t1.defined() ? mul(dS, t1) : dS;

  // The cotangent of dS_raw from dQ and dK, then of dS (softcap's slope, the mask's share).
  const Tensor Bk = to_q_heads(cot.dk), C = to_q_heads(cot.dv);
  const Tensor G_raw = mul(add(matmul(cot.dq, tr(Ke)), matmul(q, tr(Bk))), p.scale);
  Tensor G_s = t1.defined() ? mul(G_raw, t1) : G_raw;
  if (cot.dmask.defined()) G_s = add(G_s, cot.dmask);
  const Tensor R = sum(mul(G_s, P), {-1}, true);
  const Tensor g_dP = mul(P, sub(G_s, R));  // of dP; dropped again for dO Vᵀ
  const Tensor g_dPd = dropped(g_dP);
  const Tensor g_P = add(sub(mul(G_s, sub(dP, D)), mul(R, dP)), dropped(matmul(dout, tr(C))));
  const Tensor g_S = mul(P, sub(g_P, sum(mul(P, g_P), {-1}, true)));
  Tensor g_S_raw = g_S;
  if (t1.defined()) g_S_raw = add(mul(g_S, t1), mul(mul(G_raw, dS), t2));

  DoubleBackward r;
  r.q = mul(add(matmul(dS_raw, Bk), matmul(g_S_raw, Ke)), p.scale);
  r.k = to_kv_heads(mul(add(matmul(tr(dS_raw), cot.dq), matmul(tr(g_S_raw), q)), p.scale));
  r.v = to_kv_heads(matmul(tr(g_dPd), dout));
  r.dout = add(matmul(dropped(P), C), matmul(g_dPd, Ve));
  if (cot.dmask.defined()) r.mask = sum_to(g_S, opts.mask->sizes());
  return r;
}

// The ragged layout (DESIGN §4) composed padded: the packed inputs and cotangents padded to
// the longest sequence, the padded call's double backward with each sequence's own lengths and
// alignment, the padding rows dropped again (they see nothing: their gradients are zero). The
// mask, its cotangent and dropout index the padded layout already. Differentiable, like
// double_backward, for a third derivative.
DoubleBackward ragged_double_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& dout, const Tensor& stats,
                                      const SdpaOptions& opts, const FirstOrderCotangents& cot,
                                      const detail::SdpaRagged& r) {
  const detail::SdpaPadded padded = detail::sdpa_padded(opts, r, q.device());
  const auto pad_q = [&r](const Tensor& t) { return detail::pad_sequences(t, r.cu_q, r.max_q); };
  const auto pad_kv = [&r](const Tensor& t) { return detail::pad_sequences(t, r.cu_kv, r.max_kv); };
  const FirstOrderCotangents pc{pad_q(cot.dq), pad_kv(cot.dk), pad_kv(cot.dv), cot.dmask};
  DoubleBackward d = double_backward(pad_q(q), pad_kv(k), pad_kv(v), pad_q(dout), pad_q(stats),
                                     padded.opts, pc, padded.row_shift);
  d.q = detail::unpad_sequences(d.q, r.cu_q);
  d.k = detail::unpad_sequences(d.k, r.cu_kv);
  d.v = detail::unpad_sequences(d.v, r.cu_kv);
  d.dout = detail::unpad_sequences(d.dout, r.cu_q);
  return d;
}

// The composed double backward in either layout.
DoubleBackward composed_double_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& dout, const Tensor& stats,
                                        const SdpaOptions& opts, const FirstOrderCotangents& cot) {
  if (const std::optional<detail::SdpaRagged> r = detail::sdpa_ragged(q, k, v, opts))
    return ragged_double_backward(q, k, v, dout, stats, opts, cot, *r);
  return double_backward(q, k, v, dout, stats, opts, cot);
}

// The backend's tiled kernel (O(Skv) memory per thread; the CPU has it), when fused kernels
// are on and no higher derivative is being recorded; nothing when it does not run. Inputs in
// q's compute dtype, as double_backward takes them.
std::optional<DoubleBackward> fused_double_backward(const Tensor& q, const Tensor& k,
                                                    const Tensor& v, const Tensor& dout,
                                                    const Tensor& stats, const SdpaOptions& opts,
                                                    const FirstOrderCotangents& cot) {
  if (grad_enabled() || !fused_kernels()) return std::nullopt;
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0) return std::nullopt;
  SdpaParams p = detail::sdpa_params(q, k, v, opts);
  const Tensor st = stats.contiguous();
  p.stats = detail::sdpa_rows(st, p, true);
  const Shape scores{p.batch(), p.heads_q(), p.len_q(), p.len_kv()};
  DoubleBackward r;
  r.q = empty(q.sizes(), q.options());
  r.k = empty(k.sizes(), k.options());
  r.v = empty(v.sizes(), v.options());
  r.dout = empty(dout.sizes(), dout.options());
  Tensor gmask;  // score-shaped; the tiles the kernel skips stay zero
  if (cot.dmask.defined()) gmask = zeros(scores, q.options());
  // Row views of (B, H, S, D) or of the packed (T, H, D) rows; the score-shaped ones padded.
  const auto q_rows = [&p](const Tensor& t) { return detail::sdpa_rows(t, p, true); };
  const auto kv_rows = [&p](const Tensor& t) { return detail::sdpa_rows(t, p, false); };
  SdpaDoubleGradViews views{q_rows(dout),
                            q_rows(cot.dq),
                            kv_rows(cot.dk),
                            kv_rows(cot.dv),
                            cot.dmask.defined() ? detail::view_as(cot.dmask, scores) : View{},
                            q_rows(r.q),
                            kv_rows(r.k),
                            kv_rows(r.v),
                            q_rows(r.dout),
                            gmask.defined() ? detail::view_of(gmask) : View{}};
  if (!detail::backend_of(q).sdpa_double_backward(p, views)) return std::nullopt;
  if (gmask.defined()) r.mask = sum_to(gmask, opts.mask->sizes());
  return r;
}

// The forward's statistics of q, k, v under o, outside the tape.
Tensor forward_stats(const Tensor& q, const Tensor& k, const Tensor& v, SdpaOptions o) {
  NoGradGuard no_grad;
  if (o.mask) o.mask = o.mask->detach();
  return sdpa_forward(q.detach(), k.detach(), v.detach(), o).stats;
}

}  // namespace

std::vector<Tensor> detail::sdpa_backward_differentiable(const Tensor& q, const Tensor& k,
                                                         const Tensor& v, const Tensor& out,
                                                         const Tensor& dout, const Tensor& stats,
                                                         const SdpaOptions& opts, bool mask_grad) {
  SdpaGrads d;
  {
    NoGradGuard no_grad;  // the kernel's gradients; the node below makes them differentiable
    d = sdpa_backward_impl(q.detach(), k.detach(), v.detach(), out.detach(),
                           detail::rows_ready(dout.detach()), stats, opts, mask_grad);
  }
  std::vector<Tensor> grads{d.dq, d.dk, d.dv};
  if (mask_grad) grads.push_back(d.dmask);
  std::vector<Tensor> inputs{q, k, v};
  if (mask_grad) inputs.push_back(*opts.mask);
  inputs.push_back(dout);
  std::vector<Tensor*> outputs;
  outputs.reserve(grads.size());
  for (Tensor& g : grads) outputs.push_back(&g);
  if (!any_requires_grad(inputs)) return grads;
  SavedTensor sq(q), sk(k), sv(v), sd(dout), ss(stats);
  record(kOp, inputs, outputs, [sq, sk, sv, sd, ss, opts, mask_grad](const std::vector<Tensor>& g) {
    SdpaOptions o = opts;
    if (o.mask && !grad_enabled()) o.mask = o.mask->detach();
    const Tensor qv = sq.unpack(kOp);
    // 16-bit inputs: the double backward in float32, rounded once at the end.
    const DType cd = compute_dtype(qv.dtype());
    const auto up = [cd](const Tensor& t) { return t.defined() ? t.to(cd) : t; };
    if (o.mask && o.mask->dtype() != kBool) o.mask = up(*o.mask);
    FirstOrderCotangents cot{up(g[0]), up(g[1]), up(g[2]), mask_grad ? up(g[3]) : Tensor()};
    const Tensor q = up(qv), k = up(sk.unpack(kOp)), v = up(sv.unpack(kOp));
    const Tensor dout = up(sd.unpack(kOp));
    // 16-bit inputs whose CPU forward ran on AMX (cpu_sdpa_on_amx): the saved statistics came from
    // AMX's scores, which are not the float32 ones the CPU's double backward recomputes to the bit;
    // from scores of about 10^8 the difference outgrows exp's range (P = exp(S - lse) was inf),
    // so the statistics are taken again from the widened inputs by the float32 forward, whose
    // scores are its own. (Without AMX the 16-bit forward is the float32 one on widened values.
    // CUDA's double backward is composed of ops, whose float32 products match neither forward's
    // scores to the bit.)
    // (Query rows a head as the kernels count them: the longest sequence's in the ragged layout,
    // whose packed (T, H, D) q has no row dim of its own.)
    const auto rows_a_head = [&] {
      const std::optional<detail::SdpaRagged> r = detail::sdpa_ragged(q, k, v, o);
      return r ? r->max_q : q.size(2);
    };
    const bool restat = cd != qv.dtype() && qv.device() == kCPU && cpu_sdpa_on_amx(rows_a_head());
    const Tensor stats = restat ? forward_stats(q, k, v, o) : ss.unpack(kOp);
    std::optional<DoubleBackward> fused = fused_double_backward(q, k, v, dout, stats, o, cot);
    DoubleBackward r = fused ? *fused : composed_double_backward(q, k, v, dout, stats, o, cot);
    const DType dt = qv.dtype();
    std::vector<Tensor> res{r.q.to(dt), r.k.to(dt), r.v.to(dt)};
    if (mask_grad) res.push_back(r.mask.to(dt));
    res.push_back(r.dout.to(dt));
    return res;
  });
  return grads;
}

}  // namespace tg
