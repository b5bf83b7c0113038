#include "ops/optimizer_ops.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/fused_kernels.h"
#include "ops/op_util.h"
#include "ops/reduce.h"

namespace tg {

namespace {
// The composite update (what the fused kernel computes, as fused::adamw_update spells it).
void adamw_update_composite(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWStep& s) {
  p.mul_(1 - s.lr * s.weight_decay);
  m.mul_(s.beta1).add_(g, 1 - s.beta1);
  v.mul_(s.beta2).add_(mul(g, g), 1 - s.beta2);
  Tensor denom = add(mul(sqrt(v), 1 / std::sqrt(s.bias_correction2)), s.eps);
  p.add_(div(m, denom), -s.lr / s.bias_correction1);
}
}  // namespace

void adamw_update_(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWStep& s) {
  const char* op = "adamw_update_";
  detail::check_defined(p, op, "param");
  detail::check_floating(p, op, "param");
  TG_CHECK(!(grad_enabled() && p.requires_grad()), op,
           "in-place update of a parameter while grad mode is on; wrap it in tg::NoGradGuard");
  for (auto [t, name] :
       {std::pair<const Tensor*, const char*>{&g, "grad"}, {&m, "exp_avg"}, {&v, "exp_avg_sq"}}) {
    detail::check_defined(*t, op, name);
    detail::check_same_dtype(p, *t, op, name);
    detail::check_same_device(p, *t, op, name);
    TG_CHECK(t->sizes() == p.sizes(), op, "argument '", name, "' has shape ", shape_str(t->sizes()),
             ", expected the parameter's ", shape_str(p.sizes()));
  }
  for (auto [t, name] :
       {std::pair<const Tensor*, const char*>{&p, "param"}, {&m, "exp_avg"}, {&v, "exp_avg_sq"}}) {
    TG_CHECK(t->is_contiguous(), op, "argument '", name, "' must be contiguous");
  }
  if (p.numel()) {
    Tensor gc = g.contiguous();
    const bool fused = fused_kernels() &&
                       detail::backend_of(p).adamw_step(detail::view_of(p), detail::view_of(gc),
                                                        detail::view_of(m), detail::view_of(v), s);
    if (!fused) adamw_update_composite(p, gc, m, v, s);
  }
  for (Tensor* t : {&p, &m, &v}) t->impl()->storage->bump_version();
}

void add_sum_of_squares_(Tensor& acc, const Tensor& x) {
  const char* op = "add_sum_of_squares_";
  detail::check_defined(acc, op, "acc");
  detail::check_defined(x, op, "x");
  detail::check_floating(x, op, "x");
  detail::check_dtype(acc, kFloat64, op, "acc");
  detail::check_same_device(x, acc, op, "acc");
  TG_CHECK(acc.dim() == 0, op, "argument 'acc' must be a scalar (0-d), got shape ",
           shape_str(acc.sizes()));
  TG_CHECK(!(grad_enabled() && acc.requires_grad()), op,
           "in-place update of a tensor that requires grad while grad mode is on");
  if (!x.numel()) return;
  const Tensor xc = x.detach().contiguous();
  const bool fused = fused_kernels() &&
                     detail::backend_of(x).sum_squares(detail::view_of(xc), detail::view_of(acc));
  if (fused) {
    acc.impl()->storage->bump_version();
  } else {
    const Tensor wide = xc.to(kFloat64);
    acc.add_(sum(mul(wide, wide)));
  }
}

}  // namespace tg
