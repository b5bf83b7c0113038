#include "models/grad_scaler.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace tg::nn {

GradScaler::GradScaler(GradScalerOptions opts) : opts_(opts), scale_(opts.init_scale) {
  TG_CHECK(opts.init_scale > 0 && std::isfinite(opts.init_scale), "GradScaler",
           "init_scale must be positive and finite, got ", opts.init_scale);
  TG_CHECK(opts.growth_factor > 1, "GradScaler", "growth_factor must be > 1, got ",
           opts.growth_factor);
  TG_CHECK(opts.backoff_factor > 0 && opts.backoff_factor < 1, "GradScaler",
           "backoff_factor must be in (0, 1), got ", opts.backoff_factor);
  TG_CHECK(opts.growth_interval > 0, "GradScaler", "growth_interval must be positive, got ",
           opts.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const { return mul(loss, scale_); }

bool GradScaler::unscale(const std::vector<Tensor>& params) const {
  NoGradGuard no_grad;
  // Non-finite counts summed per device and read once per device.
  std::vector<Tensor> bad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g.mul_(1.0 / scale_);
    Tensor n = sum(logical_not(isfinite(g)));
    auto same = std::find_if(bad.begin(), bad.end(),
                             [&](const Tensor& t) { return t.device() == n.device(); });
    if (same == bad.end()) {
      bad.push_back(n);
    } else {
      *same = add(*same, n);
    }
  }
  for (const Tensor& t : bad)
    if (t.item<int64_t>() != 0) return false;
  return true;
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= opts_.backoff_factor;
    good_steps_ = 0;
    ++skipped_;
  } else if (++good_steps_ >= opts_.growth_interval) {
    scale_ *= opts_.growth_factor;
    good_steps_ = 0;
  }
}

void GradScaler::set_state(double scale, int64_t good_steps) {
  TG_CHECK(scale > 0 && std::isfinite(scale), "GradScaler", "scale must be positive, got ", scale);
  TG_CHECK(good_steps >= 0, "GradScaler", "good_steps must be >= 0, got ", good_steps);
  scale_ = scale;
  good_steps_ = good_steps;
}

}  // namespace tg::nn
