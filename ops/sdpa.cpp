// sdpa: validate -> allocate -> backend kernel -> record the hand-written backward.
#include "ops/sdpa.h"

#include <cmath>

#include "autograd/autograd.h"
#include "ops/autocast.h"
#include "ops/host_values.h"
#include "ops/op_util.h"
#include "ops/ops.h"
#include "ops/sdpa_check.h"

namespace tg {

namespace {

constexpr const char* kOp = "sdpa";

// rank 4: (B, H, S, D); 3: the ragged (T, H, D).
void check_input(const Tensor& t, const char* arg, const Tensor& q, int64_t rank) {
  detail::check_defined(t, kOp, arg);
  TG_CHECK(t.dim() == rank, kOp, "argument '", arg, "' must be ",
           rank == 4 ? "4-D (B, H, S, D)" : "3-D (T, H, D)", ", got shape ", shape_str(t.sizes()));
  if (&t != &q) {
    detail::check_same_dtype(q, t, kOp, arg);
    detail::check_same_device(q, t, kOp, arg);
  }
}

void check_lengths(const std::optional<Tensor>& len, const char* arg, int64_t batch, int64_t max,
                   const Tensor& q) {
  if (!len) return;
  const Tensor& t = *len;
  detail::check_defined(t, kOp, arg);
  detail::check_dtype(t, kInt64, kOp, arg);
  detail::check_same_device(q, t, kOp, arg);
  TG_CHECK(t.sizes() == Shape{batch}, kOp, "argument '", arg, "' must have shape [", batch,
           "], got ", shape_str(t.sizes()));
  if (t.numel() == 0) return;
  const auto [lo, hi] = detail::host_range(t);
  TG_CHECK(lo >= 0 && hi <= max, kOp, "argument '", arg, "' holds lengths in [", lo, ", ", hi,
           "], expected each in [0, ", max, "]");
}

bool float_mask(const SdpaOptions& o) { return o.mask && o.mask->dtype() != kBool; }

}  // namespace

SdpaParams detail::sdpa_params(const Tensor& q, const Tensor& k, const Tensor& v,
                               const SdpaOptions& o) {
  const std::optional<detail::SdpaRagged> ragged = detail::sdpa_ragged(q, k, v, o);
  const int64_t rank = ragged ? 3 : 4;
  check_input(q, "q", q, rank);
  detail::check_floating(q, kOp, "q");
  check_input(k, "k", q, rank);
  check_input(v, "v", q, rank);
  // (B, H, S, D) or, ragged, (T, H, D) with B and the longest S from the offsets.
  const int64_t B = ragged ? ragged->batch : q.size(0), Hq = q.size(1);
  const int64_t Sq = ragged ? ragged->max_q : q.size(2), D = q.size(rank - 1);
  const int64_t Hk = k.size(1), Skv = ragged ? ragged->max_kv : k.size(2);
  TG_CHECK(ragged || (k.size(0) == B && v.size(0) == B), kOp, "batch sizes differ: q ",
           shape_str(q.sizes()), ", k ", shape_str(k.sizes()), ", v ", shape_str(v.sizes()));
  TG_CHECK(Hk > 0 && Hq % Hk == 0, kOp, "query heads (", Hq,
           ") must be a multiple of key/value heads (", Hk, ")");
  TG_CHECK(v.size(1) == Hk, kOp, "argument 'v' has ", v.size(1), " heads, expected ", Hk,
           " like 'k'");
  TG_CHECK(k.size(rank - 1) == D, kOp, "head dims of q and k differ: ", D, " vs ",
           k.size(rank - 1));
  TG_CHECK(ragged || v.size(2) == Skv, kOp, "sequence lengths of k and v differ: ", Skv, " vs ",
           v.size(2));
  TG_CHECK(o.dropout_p >= 0 && o.dropout_p < 1, kOp, "dropout_p must be in [0, 1), got ",
           o.dropout_p);
  TG_CHECK(o.window >= 0, kOp, "window must be >= 0, got ", o.window);
  TG_CHECK(o.softcap >= 0 && std::isfinite(o.softcap), kOp,
           "softcap must be finite and >= 0 (0 turns it off), got ", o.softcap);
  TG_CHECK(!o.scale || std::isfinite(*o.scale), kOp, "scale must be finite");
  check_lengths(o.seq_len_q, "seq_len_q", B, Sq, q);
  check_lengths(o.seq_len_kv, "seq_len_kv", B, Skv, q);
  SdpaParams p;
  if (ragged) {
    p.q = detail::ragged_rows(q, B, Sq);
    p.k = detail::ragged_rows(k, B, Skv);
    p.v = detail::ragged_rows(v, B, Skv);
    p.cu_seqlens_q = detail::view_of(*o.cu_seqlens_q);
    p.cu_seqlens_kv = detail::view_of(*o.cu_seqlens_kv);
    p.packed_q = q.size(0);
    p.packed_kv = k.size(0);
  } else {
    p.q = detail::view_of(q);
    p.k = detail::view_of(k);
    p.v = detail::view_of(v);
  }
  const Shape full{B, Hq, Sq, Skv};
  if (o.mask) {
    const Tensor& m = *o.mask;
    detail::check_defined(m, kOp, "mask");
    detail::check_same_device(q, m, kOp, "mask");
    TG_CHECK(m.dtype() == kBool || m.dtype() == q.dtype(), kOp, "argument 'mask' must be bool or ",
             q.dtype(), " like q, got ", m.dtype());
    TG_CHECK(m.dim() <= 4, kOp, "argument 'mask' has rank ", m.dim(), ", expected at most 4");
    Shape b = broadcast_shapes(m.sizes(), full, kOp);
    TG_CHECK(b == full, kOp, "argument 'mask' of shape ", shape_str(m.sizes()),
             " does not broadcast to (B, Hq, Sq, Skv) = ", shape_str(full));
    p.mask = detail::view_as(m, full);
  }
  if (o.seq_len_q) p.seq_len_q = detail::view_of(*o.seq_len_q);
  if (o.seq_len_kv) p.seq_len_kv = detail::view_of(*o.seq_len_kv);
  p.scale = o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(D));
  p.softcap = o.softcap;
  p.causal = o.causal;
  p.bottom_right = o.causal_align == CausalAlign::BottomRight;
  p.window = o.window;
  p.alibi = o.alibi;
  p.dropout_p = o.dropout_p;
  p.seed = o.seed;
  p.offset = o.offset;
  return p;
}

namespace {

// out's shape (last = Dv) and stats' (last = 1) in either layout: q's with another last dim.
Shape rows_of_q(const Tensor& q, int64_t last) {
  Shape s = q.sizes();
  s.back() = last;
  return s;
}

// The forward kernel on checked parameters: out (q's shape, last dim dv) and stats.
SdpaResult run_forward(const Tensor& q, int64_t dv, SdpaParams p) {
  const Shape out_shape = rows_of_q(q, dv), stats_shape = rows_of_q(q, 1);
  const TensorOptions so = q.options().dtype(compute_dtype(q.dtype()));
  // The kernel writes every row; with no rows or no keys there is nothing to run.
  if (numel_of(stats_shape) == 0 || p.len_kv() == 0)
    return {zeros(out_shape, q.options()), full(stats_shape, -INFINITY, so)};
  // Rows, then heads, in memory, as PyTorch's fused kernels return it: (B, Sq, Hq, Dv) seen as
  // (B, Hq, Sq, Dv), so that merging the heads afterwards
  // (out.transpose(1, 2).reshape({B, Sq, Hq * Dv})) is a view, not a copy; ragged, (Tq, Hq, Dv).
  Tensor out =
      p.ragged()
          ? empty(out_shape, q.options())
          : empty({p.batch(), p.len_q(), p.heads_q(), p.dim_v()}, q.options()).transpose(1, 2);
  Tensor stats = empty(stats_shape, so);
  p.out = detail::sdpa_rows(out, p, true);
  p.stats = detail::sdpa_rows(stats, p, true);
  detail::backend_of(q).sdpa_forward(p);
  return {out, stats};
}

}  // namespace

SdpaResult sdpa_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                        const SdpaOptions& opts) {
  SdpaParams p = detail::sdpa_params(q, k, v, opts);
  return run_forward(q, v.sizes().back(), p);
}

SdpaResult detail::sdpa_forward_rows(const Tensor& q, const Tensor& k_rows, const Tensor& v_rows,
                                     const Tensor& kv_rows, const SdpaOptions& opts) {
  // Checked as the gathered keys would be, by stand-ins of their shape (no copies)...
  const int64_t n = kv_rows.numel();
  auto stand_in = [n](const Tensor& rows) {
    return rows.narrow(0, 0, 1).expand({n, rows.size(1), rows.size(2)});
  };
  SdpaParams p = detail::sdpa_params(q, stand_in(k_rows), stand_in(v_rows), opts);
  TG_CHECK(p.ragged() && kv_rows.dtype() == kInt64 && kv_rows.dim() == 1 &&
               kv_rows.is_contiguous() && kv_rows.device() == q.device(),
           kOp,
           "internal: keys read through row indices need the ragged layout and the indices "
           "on q's device");
  // ...then read where they are.
  p.k = detail::ragged_rows(k_rows, p.batch(), p.len_kv());
  p.v = detail::ragged_rows(v_rows, p.batch(), p.len_kv());
  p.kv_rows = detail::view_of(kv_rows);
  p.packed_kv = k_rows.size(0);
  return run_forward(q, v_rows.sizes().back(), p);
}

// The backward; the score gradient (O(B Hq Sq Skv) memory) is only made when want_dmask.
SdpaGrads detail::sdpa_backward_impl(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& dout, const Tensor& stats,
                                     const SdpaOptions& opts, bool want_dmask) {
  SdpaParams p = detail::sdpa_params(q, k, v, opts);
  const Shape out_shape = rows_of_q(q, v.sizes().back()), stats_shape = rows_of_q(q, 1);
  for (auto [t, name, shape] :
       {std::tuple{&out, "out", out_shape}, std::tuple{&dout, "dout", out_shape},
        std::tuple{&stats, "stats", stats_shape}}) {
    detail::check_defined(*t, "sdpa_backward", name);
    if (t == &stats) {
      detail::check_dtype(stats, compute_dtype(q.dtype()), "sdpa_backward", name);
    } else {
      detail::check_same_dtype(q, *t, "sdpa_backward", name);
    }
    detail::check_same_device(q, *t, "sdpa_backward", name);
    TG_CHECK(t->sizes() == shape, "sdpa_backward", "argument '", name, "' has shape ",
             shape_str(t->sizes()), ", expected ", shape_str(shape));
  }
  Tensor st = stats.contiguous();
  p.out = detail::sdpa_rows(out, p, true);
  p.stats = detail::sdpa_rows(st, p, true);
  // The kernel writes every element of dq, dk and dv when it runs at all.
  const bool run = out.numel() && p.len_kv();
  auto alloc = [run](const Tensor& like) {
    return run ? empty(like.sizes(), like.options()) : zeros(like.sizes(), like.options());
  };
  SdpaGrads g;
  g.dq = alloc(q);
  g.dk = alloc(k);
  g.dv = alloc(v);
  using detail::sdpa_rows;
  SdpaGradViews views{
      sdpa_rows(g.dq, p, true), sdpa_rows(g.dk, p, false), sdpa_rows(g.dv, p, false), {}};
  Tensor dscores;
  if (want_dmask) {
    // Tiles the kernel skips stay zero. float32 for 16-bit q: summed over the mask's
    // broadcast dims before its one rounding.
    dscores = zeros({p.batch(), p.heads_q(), p.len_q(), p.len_kv()},
                    q.options().dtype(compute_dtype(q.dtype())));
    views.dscores = detail::view_of(dscores);
  }
  if (run) detail::backend_of(q).sdpa_backward(p, detail::sdpa_rows(dout, p, true), views);
  if (dscores.defined()) g.dmask = sum_to(dscores, opts.mask->sizes()).to(q.dtype());
  return g;
}

SdpaGrads sdpa_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& dout, const Tensor& stats, const SdpaOptions& opts) {
  return detail::sdpa_backward_impl(q, k, v, out, dout, stats, opts, float_mask(opts));
}

SdpaResult sdpa(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                const SdpaOptions& opts_in) {
  detail::check_defined(q_in, kOp, "q");  // before detach(), which needs a tensor
  detail::check_defined(k_in, kOp, "k");
  detail::check_defined(v_in, kOp, "v");
  const Tensor q = detail::autocast_low(q_in), k = detail::autocast_low(k_in),
               v = detail::autocast_low(v_in);
  SdpaOptions opts = opts_in;
  if (opts.mask) opts.mask = detail::autocast_low(*opts.mask);
  SdpaResult r = sdpa_forward(q.detach(), k.detach(), v.detach(), opts);
  const bool mask_grad = float_mask(opts) && opts.mask->requires_grad();
  std::vector<Tensor> inputs{q, k, v};
  if (mask_grad) inputs.push_back(*opts.mask);
  if (any_requires_grad(inputs)) {
    SavedTensor sq(q), sk(k), sv(v), so(r.out), ss(r.stats);
    // The options (their mask and lengths) are kept alive for backward.
    record(kOp, inputs, {&r.out},
           [sq, sk, sv, so, ss, saved = std::move(opts), mask_grad](const std::vector<Tensor>& g) {
             if (grad_enabled()) {  // create_graph: gradients that are differentiable
               return detail::sdpa_backward_differentiable(sq.unpack(kOp), sk.unpack(kOp),
                                                           sv.unpack(kOp), so.unpack(kOp), g[0],
                                                           ss.unpack(kOp), saved, mask_grad);
             }
             SdpaGrads d = detail::sdpa_backward_impl(
                 sq.unpack(kOp), sk.unpack(kOp), sv.unpack(kOp), so.unpack(kOp),
                 detail::rows_ready(g[0]), ss.unpack(kOp), saved, mask_grad);
             std::vector<Tensor> r{d.dq, d.dk, d.dv};
             if (mask_grad) r.push_back(d.dmask);
             return r;
           });
  }
  return r;
}

Tensor alibi_slopes(int64_t heads) {
  TG_CHECK(heads >= 0, "alibi_slopes", "argument 'heads' must be >= 0, got ", heads);
  std::vector<double> s(heads);
  for (int64_t h = 0; h < heads; ++h) s[h] = alibi_slope(h, heads);
  return from_vector(s, {heads});
}

Tensor sdpa_dropout_mask(int64_t batch, int64_t heads_q, int64_t len_q, int64_t len_kv,
                         const SdpaOptions& opts, Device device) {
  TG_CHECK(opts.dropout_p >= 0 && opts.dropout_p < 1, "sdpa_dropout_mask",
           "dropout_p must be in [0, 1), got ", opts.dropout_p);
  TG_CHECK(batch >= 0 && heads_q >= 0 && len_q >= 0 && len_kv >= 0, "sdpa_dropout_mask",
           "sizes must be >= 0, got batch ", batch, ", heads_q ", heads_q, ", len_q ", len_q,
           ", len_kv ", len_kv);
  Generator gen{opts.seed, opts.offset};
  Tensor u = rand({batch, heads_q, len_q, len_kv}, gen, TensorOptions(kFloat32).device(device));
  return gt(u, static_cast<double>(static_cast<float>(opts.dropout_p)));
}

}  // namespace tg
