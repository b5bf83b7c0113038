#include "ops/rope.h"

#include <cmath>
#include <vector>

#include "autograd/autograd.h"
#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/join.h"
#include "ops/op_util.h"

namespace tg {

namespace {

// cos and sin of the angles, shaped (S, 1, ..., 1, D/2) so that they broadcast against x's
// pairs (..., D/2) with S on seq_dim. Angles are computed in double, then cast.
void rope_tables(const Tensor& x, int64_t seq, const RopeOptions& o, Tensor& cos_t, Tensor& sin_t) {
  const int64_t s_len = x.size(seq), half = x.sizes().back() / 2;
  std::vector<double> c(static_cast<size_t>(s_len * half)), s(c.size());
  for (int64_t t = 0; t < s_len; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double freq = std::pow(o.theta, -2.0 * static_cast<double>(i) / (2.0 * half));
      const double angle = static_cast<double>(t + o.offset) * freq;
      c[t * half + i] = std::cos(angle);
      s[t * half + i] = o.inverse ? -std::sin(angle) : std::sin(angle);
    }
  }
  Shape table(static_cast<size_t>(x.dim() - seq), 1);
  table.front() = s_len;
  table.back() = half;
  cos_t = from_vector(c, table).to(x.dtype()).to(x.device());
  sin_t = from_vector(s, table).to(x.dtype()).to(x.device());
}

Tensor rope_values(const Tensor& x, int64_t seq, const RopeOptions& o) {
  Tensor cos_t, sin_t;
  rope_tables(x, seq, o, cos_t, sin_t);
  Shape pairs(x.sizes().begin(), x.sizes().end() - 1);
  pairs.push_back(x.sizes().back() / 2);
  pairs.push_back(2);
  Tensor xp = x.reshape(pairs);
  Tensor even = xp.slice(-1, 0, 1).squeeze(-1), odd = xp.slice(-1, 1, 2).squeeze(-1);
  Tensor out_even = sub(mul(even, cos_t), mul(odd, sin_t));
  Tensor out_odd = add(mul(even, sin_t), mul(odd, cos_t));
  return stack({out_even, out_odd}, -1).reshape(x.sizes());
}

}  // namespace

Tensor rope(const Tensor& x, const RopeOptions& opts) {
  detail::check_defined(x, "rope", "x");
  detail::check_floating(x, "rope", "x");
  TG_CHECK(x.dim() >= 2, "rope", "argument 'x' must have at least 2 dims (positions, features), "
           "got shape ", shape_str(x.sizes()));
  TG_CHECK(x.sizes().back() % 2 == 0, "rope", "argument 'x' must have an even last dim (pairs), "
           "got ", x.sizes().back());
  const int64_t seq = opts.seq_dim < 0 ? opts.seq_dim + x.dim() : opts.seq_dim;
  TG_CHECK(seq >= 0 && seq < x.dim() - 1, "rope", "argument 'seq_dim' must name a dim before the "
           "last of a ", x.dim(), "-d tensor, got ", opts.seq_dim);
  TG_CHECK(opts.offset >= 0, "rope", "argument 'offset' must be >= 0, got ", opts.offset);
  TG_CHECK(opts.theta > 0 && std::isfinite(opts.theta), "rope",
           "argument 'theta' must be a positive finite number, got ", opts.theta);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = rope_values(x.detach(), seq, opts);
  }
  if (any_requires_grad({x})) {
    RopeOptions back = opts;
    back.inverse = !opts.inverse;
    record("rope", {x}, {&out},
           [back](const std::vector<Tensor>& g) { return std::vector<Tensor>{rope(g[0], back)}; });
  }
  return out;
}

}  // namespace tg
