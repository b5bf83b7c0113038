#include "ops/nn.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "autograd/autograd.h"
#include "ops/autocast.h"
#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/fused_kernels.h"
#include "ops/host_values.h"
#include "ops/join.h"
#include "ops/op_util.h"
#include "ops/reduce.h"
#include "ops/unary_op.h"

namespace tg {

namespace {

// softmax's (or log_softmax's) gradient from its output y through the backend's fused kernel,
// dim d moved last; undefined where the backend lacks it or y is 16-bit (the composite then).
Tensor softmax_backward_fused(const Tensor& y, const Tensor& g, int64_t d, bool log) {
  const int64_t last = y.dim() - 1;
  if (y.dim() == 0 || y.numel() == 0 || g.dtype() != y.dtype()) return {};
  const Tensor yc = (d == last ? y : y.transpose(d, last)).contiguous();
  const Tensor gc = (d == last ? g : g.transpose(d, last)).contiguous();
  Tensor dx = Tensor::empty_like_shape(yc.sizes(), y.dtype(), y.device());
  if (!detail::backend_of(y).softmax_backward(detail::view_of(yc), detail::view_of(gc),
                                              detail::view_of(dx), log))
    return {};
  return d == last ? dx : dx.transpose(d, last);
}

// One fused kernel over rows (the dim moved last); the backward from the saved output:
// softmax y (g - sum(g y)), log_softmax g - exp(y) sum(g).
Tensor softmax_impl(const Tensor& input, int64_t dim, bool log, const char* op) {
  detail::check_defined(input, op, "self");
  const Tensor x = detail::autocast_float32(input);
  detail::check_floating(x, op, "self");
  if (x.dim() == 0) return softmax_impl(x.reshape({1}), 0, log, op).reshape({});
  const int64_t d = normalize_dim(dim, x.dim(), op), last = x.dim() - 1;
  Tensor xc = (d == last ? x.detach() : x.detach().transpose(d, last)).contiguous();
  Tensor out = Tensor::empty_like_shape(xc.sizes(), x.dtype(), x.device());
  if (out.numel()) detail::backend_of(x).softmax(detail::view_of(xc), detail::view_of(out), log);
  if (d != last) out = out.transpose(d, last).contiguous();
  if (any_requires_grad({x})) {
    SavedTensor saved(out, SavedTensor::Role::Output);
    record(op, {x}, {&out}, [saved, d, log, op](const std::vector<Tensor>& g) {
      Tensor y = saved.unpack(op);
      if (!grad_enabled() && fused_kernels()) {  // one pass over each row (create_graph: below)
        if (Tensor dx = softmax_backward_fused(y, g[0], d, log); dx.defined())
          return std::vector<Tensor>{dx};
      }
      if (log) return std::vector<Tensor>{sub(g[0], mul(exp(y), sum(g[0], {d}, true)))};
      return std::vector<Tensor>{mul(y, sub(g[0], sum(mul(g[0], y), {d}, true)))};
    });
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false, "softmax"); }

Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(x, dim, true, "log_softmax");
}

namespace {

// The composite formulas of the fused kernels below: the reference they are tested against
// (FusedKernelsGuard) and what runs where a backend lacks them.
// 1 / rms of the rows of x (x's shape without its last dim).
Tensor rms_rstd(const Tensor& x, double eps) { return rsqrt(add(mean(mul(x, x), {-1}), eps)); }

Tensor rms_norm_composite(const Tensor& x, const Tensor& weight, double eps) {
  Tensor y = mul(x, rms_rstd(x, eps).unsqueeze(-1));
  return weight.defined() ? mul(y, weight) : y;
}

std::vector<Tensor> rms_norm_backward_composite(const Tensor& grad, const Tensor& x,
                                                const Tensor& weight, const Tensor& rstd) {
  Tensor g = weight.defined() ? mul(grad, weight) : grad;
  Tensor rs = rstd.unsqueeze(-1);
  Tensor dx = sub(mul(rs, g), mul(mul(x, mul(rs, mul(rs, rs))), mean(mul(g, x), {-1}, true)));
  Tensor dw;
  if (weight.defined()) dw = sum_to(mul(mul(grad, x), rs), weight.sizes()).to(weight.dtype());
  return {dx.to(x.dtype()), dw};  // rstd is float32 for 16-bit x: back to x's dtype
}

Tensor swiglu_composite(const Tensor& x) {
  const int64_t f = x.sizes().back() / 2;
  return mul(silu(x.narrow(-1, 0, f)), x.narrow(-1, f, f));
}

Tensor swiglu_backward_composite(const Tensor& grad, const Tensor& x) {
  const int64_t f = x.sizes().back() / 2;
  Tensor gate = x.narrow(-1, 0, f), up = x.narrow(-1, f, f);
  return cat({mul(mul(grad, up), silu_grad(gate)), mul(grad, silu(gate))}, -1);
}

// grad defined, of x's dtype and device and of `grad_shape`; x (defined) floating.
void check_grad_and_x(const Tensor& grad, const Tensor& x, const Shape& grad_shape,
                      const char* op) {
  detail::check_defined(grad, op, "grad");
  detail::check_floating(x, op, "x");
  detail::check_same_device(x, grad, op, "grad");
  detail::check_same_dtype(x, grad, op, "grad");
  TG_CHECK(grad.sizes() == grad_shape, op, "argument 'grad' has shape ", shape_str(grad.sizes()),
           ", expected ", shape_str(grad_shape), " (the forward's output for x ",
           shape_str(x.sizes()), ")");
}

// An RMSNorm weight, when defined: x's dtype and device, shape [x's last dim].
void check_norm_weight(const Tensor& x, const Tensor& weight, const char* op) {
  if (!weight.defined()) return;
  detail::check_same_dtype(x, weight, op, "weight");
  detail::check_same_device(x, weight, op, "weight");
  const int64_t d = x.sizes().back();
  TG_CHECK(weight.sizes() == Shape{d}, op, "argument 'weight' must have shape [", d,
           "] (x's last dim), got ", shape_str(weight.sizes()));
}

}  // namespace

std::vector<Tensor> rms_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                      const Tensor& rstd) {
  const char* op = "rms_norm_backward";
  detail::check_defined(x, op, "x");
  TG_CHECK(x.dim() >= 1, op, "argument 'x' must have a feature dim, got a 0-d tensor");
  check_grad_and_x(grad, x, x.sizes(), op);
  const Shape rows(x.sizes().begin(), x.sizes().end() - 1);
  detail::check_defined(rstd, op, "rstd");
  detail::check_same_device(x, rstd, op, "rstd");
  TG_CHECK(rstd.sizes() == rows && rstd.dtype() == compute_dtype(x.dtype()), op,
           "argument 'rstd' must be ", compute_dtype(x.dtype()), " of shape ", shape_str(rows),
           " (rms_norm's statistics for x ", shape_str(x.sizes()), "), got ", rstd.dtype(), " ",
           shape_str(rstd.sizes()));
  check_norm_weight(x, weight, op);
  if (!fused_kernels()) return rms_norm_backward_composite(grad, x, weight, rstd);
  const int64_t d = x.sizes().back();
  Tensor g = grad.contiguous(), xc = x.contiguous();
  Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  Tensor dx = Tensor::empty_like_shape(x.sizes(), x.dtype(), x.device()), dw;
  if (weight.defined()) dw = Tensor::empty_like_shape({d}, x.dtype(), x.device());
  const View none{nullptr, x.dtype(), {d}, {1}};
  if (!x.numel()) {
    if (dw.defined()) dw = zeros({d}, x.options());
  } else if (!detail::backend_of(x).rms_norm_backward(
                 detail::view_of(g), detail::view_of(xc), w.defined() ? detail::view_of(w) : none,
                 detail::view_of(rstd.contiguous()), detail::view_of(dx),
                 dw.defined() ? detail::view_of(dw) : none)) {
    return rms_norm_backward_composite(grad, x, weight, rstd);
  }
  return {dx, dw};
}

Tensor rms_norm(const Tensor& input, const Tensor& weight_in, double eps) {
  detail::check_defined(input, "rms_norm", "x");
  const Tensor x = detail::autocast_float32(input), weight = detail::autocast_float32(weight_in);
  detail::check_floating(x, "rms_norm", "x");
  TG_CHECK(x.dim() >= 1, "rms_norm", "argument 'x' must have a feature dim, got a 0-d tensor");
  TG_CHECK(eps >= 0 && std::isfinite(eps), "rms_norm",
           "argument 'eps' must be finite and >= 0, got ", eps);
  const int64_t d = x.sizes().back();
  check_norm_weight(x, weight, "rms_norm");
  if (!fused_kernels()) return rms_norm_composite(x, weight, eps);
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor xc = x.detach().contiguous();
  Shape rows(x.sizes().begin(), x.sizes().end() - 1);
  Tensor y = Tensor::empty_like_shape(x.sizes(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty_like_shape(rows, compute_dtype(x.dtype()), x.device());
  const View none{nullptr, x.dtype(), {d}, {1}};
  if (x.numel() && !detail::backend_of(x).rms_norm_forward(
                       detail::view_of(xc), w.defined() ? detail::view_of(w) : none, eps,
                       detail::view_of(y), detail::view_of(rstd))) {
    return rms_norm_composite(x, weight, eps);
  }
  if (any_requires_grad({x, weight})) {
    SavedTensor sx(x), sw(weight), sr(rstd);
    record("rms_norm", {x, weight}, {&y}, [sx, sw, sr, eps](const std::vector<Tensor>& g) {
      const Tensor xs = sx.unpack("rms_norm"), ws = sw.unpack("rms_norm");
      if (!grad_enabled()) return rms_norm_backward(g[0], xs, ws, sr.unpack("rms_norm"));
      // create_graph: the composite formula, with rstd recomputed from x so that it is
      // differentiated too.
      return rms_norm_backward_composite(g[0], xs, ws, rms_rstd(xs, eps));
    });
  }
  return y;
}

Tensor swiglu_backward(const Tensor& grad, const Tensor& x) {
  detail::check_defined(x, "swiglu_backward", "x");
  TG_CHECK(x.dim() >= 1 && x.sizes().back() % 2 == 0, "swiglu_backward",
           "argument 'x' must end in an even dim (gate and up halves), got shape ",
           shape_str(x.sizes()));
  Shape out_shape = x.sizes();
  out_shape.back() /= 2;
  check_grad_and_x(grad, x, out_shape, "swiglu_backward");
  if (!fused_kernels()) return swiglu_backward_composite(grad, x);
  Tensor g = grad.contiguous(), xc = x.contiguous();  // the kernel reads dense rows
  Tensor dx = Tensor::empty_like_shape(x.sizes(), x.dtype(), x.device());
  if (x.numel() && !detail::backend_of(x).swiglu_backward(detail::view_of(g), detail::view_of(xc),
                                                          detail::view_of(dx))) {
    return swiglu_backward_composite(grad, x);
  }
  return dx;
}

Tensor swiglu(const Tensor& x) {
  detail::check_defined(x, "swiglu", "x");
  detail::check_floating(x, "swiglu", "x");
  TG_CHECK(x.dim() >= 1 && x.sizes().back() % 2 == 0, "swiglu",
           "argument 'x' must end in an even dim (gate and up halves), got shape ",
           shape_str(x.sizes()));
  if (!fused_kernels()) return swiglu_composite(x);
  Shape out_shape = x.sizes();
  out_shape.back() /= 2;
  Tensor xc = x.detach().contiguous();
  Tensor out = Tensor::empty_like_shape(out_shape, x.dtype(), x.device());
  if (out.numel() &&
      !detail::backend_of(x).swiglu_forward(detail::view_of(xc), detail::view_of(out))) {
    return swiglu_composite(x);
  }
  if (any_requires_grad({x})) {
    SavedTensor sx(x);
    record("swiglu", {x}, {&out}, [sx](const std::vector<Tensor>& g) {
      const Tensor xs = sx.unpack("swiglu");
      // create_graph: the composite formula, differentiable.
      return std::vector<Tensor>{grad_enabled() ? swiglu_backward_composite(g[0], xs)
                                                : swiglu_backward(g[0], xs)};
    });
  }
  return out;
}

namespace {
void check_range(detail::Int64Range r, int64_t rows, const char* op, const char* arg) {
  TG_CHECK(r.lo >= 0 && r.hi < rows, op, "argument '", arg, "' holds ids in [", r.lo, ", ", r.hi,
           "], expected every id in [0, ", rows, ")");
}

void check_ids_in_range(const Tensor& ids, int64_t rows, const char* op, const char* arg) {
  if (ids.numel() == 0) return;
  check_range(detail::host_range(ids), rows, op, arg);
}

// Targets in [0, classes) where they are not ignore_index (read as 0 in the message, as `safe`
// holds them): from the host's copy where it has one, else from `safe` on its device.
void check_targets(const Tensor& targets, const Tensor& safe, int64_t ignore, int64_t classes) {
  if (targets.numel() == 0) return;
  std::optional<std::vector<int64_t>> known = detail::known_int64(targets);
  if (!known) return check_ids_in_range(safe, classes, "cross_entropy", "targets");
  for (int64_t& v : *known) v = v == ignore ? 0 : v;
  const auto [lo, hi] = std::minmax_element(known->begin(), known->end());
  check_range({*lo, *hi}, classes, "cross_entropy", "targets");
}

// embedding_backward without its checks: the tape's call, whose ids embedding checked. Linear
// in grad: its own gradient (create_graph) gathers the rows back, embedding's forward.
Tensor embedding_grad(const Tensor& grad, const Tensor& ids, int64_t num_rows) {
  const int64_t d = grad.sizes().back();
  Tensor g = grad.detach().contiguous(), i = ids.contiguous();
  Tensor gw = zeros({num_rows, d}, grad.options());
  if (i.numel() && d) {
    detail::backend_of(grad).scatter_add_rows(detail::view_of(g.reshape({i.numel(), d})),
                                              detail::view_of(i), detail::view_of(gw));
  }
  if (any_requires_grad({grad})) {
    SavedTensor si(i);
    record("embedding_backward", {grad}, {&gw}, [si](const std::vector<Tensor>& gg) {
      return std::vector<Tensor>{embedding(gg[0], si.unpack("embedding_backward"))};
    });
  }
  return gw;
}
}  // namespace

Tensor embedding_backward(const Tensor& grad, const Tensor& ids, int64_t num_rows) {
  const char* op = "embedding_backward";
  detail::check_defined(grad, op, "grad");
  detail::check_defined(ids, op, "ids");
  detail::check_floating(grad, op, "grad");
  detail::check_dtype(ids, kInt64, op, "ids");
  detail::check_same_device(grad, ids, op, "ids");
  TG_CHECK(num_rows >= 0, op, "argument 'num_rows' must be >= 0, got ", num_rows);
  TG_CHECK(grad.dim() == ids.dim() + 1 &&
               std::equal(ids.sizes().begin(), ids.sizes().end(), grad.sizes().begin()),
           op, "argument 'grad' has shape ", shape_str(grad.sizes()), ", expected ids' shape ",
           shape_str(ids.sizes()), " and one more dim (the embedding's)");
  check_ids_in_range(ids, num_rows, op, "ids");
  return embedding_grad(grad, ids, num_rows);
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  detail::check_defined(weight, "embedding", "weight");
  detail::check_defined(ids, "embedding", "ids");
  TG_CHECK(weight.dim() == 2, "embedding", "argument 'weight' must be 2-D (rows, dim), got shape ",
           shape_str(weight.sizes()));
  detail::check_dtype(ids, kInt64, "embedding", "ids");
  detail::check_same_device(weight, ids, "embedding", "ids");
  const int64_t rows = weight.sizes()[0], d = weight.sizes()[1];
  check_ids_in_range(ids, rows, "embedding", "ids");
  Shape out_shape = ids.sizes();
  out_shape.push_back(d);
  Tensor out = Tensor::empty_like_shape(out_shape, weight.dtype(), weight.device());
  Tensor w = weight.detach().contiguous(), i = ids.contiguous();
  if (out.numel())
    detail::backend_of(w).gather_rows(detail::view_of(w), detail::view_of(i), detail::view_of(out));
  if (any_requires_grad({weight})) {
    SavedTensor si(i);
    record("embedding", {weight}, {&out}, [si, rows](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{embedding_grad(g[0], si.unpack("embedding"), rows)};
    });
  }
  return out;
}

namespace {

// The one-hot (bool, (..., C)) of targets in [0, C) over x's C classes.
Tensor one_hot_of(const Tensor& safe, const Tensor& x) {
  const int64_t classes = x.sizes().back();
  Tensor classes_iota =
      arange(static_cast<double>(classes), TensorOptions(kInt64).device(x.device()));
  return eq(safe.unsqueeze(-1), classes_iota);
}

// Per-row losses (0 on ignored rows) as composed ops: log_softmax picked by a one-hot of the
// targets. The reference the fused kernels are tested against, and what runs without them.
Tensor nll_rows_composite(const Tensor& x, const Tensor& safe, const Tensor& valid) {
  Tensor pick = one_hot_of(safe, x);
  Tensor nll = neg(sum(where(pick, log_softmax(x, -1), 0.0), {-1}));
  return where(valid, nll, 0.0);
}

// The gradient of those losses (g per row) as composed ops: g (softmax(x) - onehot(target)) on
// rows whose target is not ignore_index. What create_graph differentiates.
Tensor nll_rows_grad_composite(const Tensor& g, const Tensor& x, const Tensor& targets,
                               int64_t ignore_index) {
  Tensor valid = ne(targets, static_cast<double>(ignore_index));
  Tensor onehot = one_hot_of(where(valid, targets, 0.0), x).to(x.dtype());
  return mul(where(valid, g, 0.0).unsqueeze(-1), sub(softmax(x, -1), onehot));
}

// The same losses in one pass over the logits, and their gradient in one more, from the rows'
// logsumexp saved by the forward. Undefined where the backend lacks the kernels.
Tensor nll_rows_fused(const Tensor& x, const Tensor& targets, int64_t ignore_index) {
  const Tensor xc = x.detach().contiguous(), tc = targets.contiguous();
  Tensor loss = Tensor::empty_like_shape(targets.sizes(), x.dtype(), x.device());
  Tensor lse = Tensor::empty_like_shape(targets.sizes(), x.dtype(), x.device());
  if (loss.numel() && !detail::backend_of(x).cross_entropy_forward(
                          detail::view_of(xc), detail::view_of(tc), ignore_index,
                          detail::view_of(loss), detail::view_of(lse))) {
    return Tensor();
  }
  if (any_requires_grad({x})) {
    SavedTensor sx(x), st(tc), sl(lse);
    record("cross_entropy", {x}, {&loss}, [sx, st, sl, ignore_index](const std::vector<Tensor>& g) {
      if (grad_enabled()) {  // create_graph: g (softmax(x) - onehot(target)), differentiable
        return std::vector<Tensor>{nll_rows_grad_composite(
            g[0], sx.unpack("cross_entropy"), st.unpack("cross_entropy"), ignore_index)};
      }
      const Tensor xs = sx.unpack("cross_entropy").contiguous(), gc = g[0].contiguous();
      Tensor dx = Tensor::empty_like_shape(xs.sizes(), xs.dtype(), xs.device());
      const bool ran =
          !dx.numel() ||
          detail::backend_of(xs).cross_entropy_backward(
              detail::view_of(gc), detail::view_of(xs), detail::view_of(st.unpack("cross_entropy")),
              detail::view_of(sl.unpack("cross_entropy")), ignore_index, detail::view_of(dx));
      TG_CHECK(ran, "cross_entropy",
               "internal: the backend ran the fused forward, not its backward");
      return std::vector<Tensor>{dx};
    });
  }
  return loss;
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& targets, CrossEntropyOptions opts) {
  detail::check_defined(input, "cross_entropy", "logits");
  const Tensor logits = detail::autocast_float32(input);
  detail::check_defined(targets, "cross_entropy", "targets");
  detail::check_floating(logits, "cross_entropy", "logits");
  detail::check_dtype(targets, kInt64, "cross_entropy", "targets");
  detail::check_same_device(logits, targets, "cross_entropy", "targets");
  TG_CHECK(logits.dim() >= 1, "cross_entropy", "argument 'logits' must have a class dim");
  Shape batch(logits.sizes().begin(), logits.sizes().end() - 1);
  TG_CHECK(targets.sizes() == batch, "cross_entropy", "argument 'targets' has shape ",
           shape_str(targets.sizes()), ", expected ", shape_str(batch), " (logits ",
           shape_str(logits.sizes()), " without the class dim)");
  const int64_t classes = logits.sizes().back();
  Tensor valid = ne(targets, static_cast<double>(opts.ignore_index));
  Tensor safe = where(valid, targets, 0.0);
  check_targets(targets, safe, opts.ignore_index, classes);
  return detail::in_compute_dtype(logits, [&](const Tensor& x) {
    Tensor losses;
    if (fused_kernels() && classes > 0) losses = nll_rows_fused(x, targets, opts.ignore_index);
    if (!losses.defined()) losses = nll_rows_composite(x, safe, valid);
    switch (opts.reduction) {
      case Reduction::None:
        return losses;
      case Reduction::Sum:
        return sum(losses);
      case Reduction::Mean: {
        // The count stays on the device (no host sync on a GPU); 0 / 1 when all are ignored.
        Tensor count = maximum(sum(valid).to(x.dtype()), ones({}, x.options()));
        return div(sum(losses), count);
      }
    }
    return losses;
  });
}

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  detail::check_defined(x, "dropout", "self");
  detail::check_floating(x, "dropout", "self");
  TG_CHECK(p >= 0.0 && p < 1.0, "dropout", "p must be in [0, 1), got ", p);
  if (p == 0.0) return x;
  Tensor src = x.detach().contiguous();
  Tensor out = Tensor::empty_like_shape(x.sizes(), x.dtype(), x.device());
  if (out.numel())
    detail::backend_of(x).dropout(detail::view_of(src), detail::view_of(out), p, seed, offset);
  record("dropout", {x}, {&out}, [p, seed, offset](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{dropout(g[0], p, seed, offset)};
  });
  return out;
}

Tensor dropout(const Tensor& x, double p, Generator& gen) {
  uint64_t at = gen.take(static_cast<uint64_t>(x.numel()));
  return dropout(x, p, gen.seed, at);
}

}  // namespace tg
