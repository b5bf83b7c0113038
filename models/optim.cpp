#include "models/optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/optimizer_ops.h"
#include "ops/reduce.h"

namespace tg::nn {

Optimizer::Optimizer(NamedTensors params) : params_(std::move(params)) {
  for (const auto& [name, p] : params_) {
    TG_CHECK(p.defined() && p.is_leaf(), "Optimizer", "parameter '", name,
             "' must be a defined leaf tensor");
    TG_CHECK(p.dtype() == kFloat32 || p.dtype() == kFloat64, "Optimizer", "parameter '", name,
             "' must be floating, got ", p.dtype());
  }
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.zero_grad();
}

Tensor Optimizer::add_slot(size_t param, const char* slot) {
  Tensor t = zeros_like(params_[param].second);
  state_.emplace_back(params_[param].first + "." + slot, t);
  return t;
}

NamedTensors Optimizer::state() const { return state_; }

void Optimizer::set_steps(int64_t n) {
  TG_CHECK(n >= 0, "Optimizer", "step count must be >= 0, got ", n);
  steps_ = n;
}

SGD::SGD(NamedTensors params, SGDOptions opts) : Optimizer(std::move(params)), opts_(opts) {
  lr = opts.lr;
  TG_CHECK(opts.momentum >= 0, "SGD", "argument 'momentum' must be >= 0, got ", opts.momentum);
  if (opts.momentum > 0) {
    for (size_t i = 0; i < params_.size(); ++i) add_slot(i, "momentum_buffer");
  }
}

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (opts_.weight_decay != 0) g = add(g, mul(p, opts_.weight_decay));
    if (opts_.momentum > 0) {
      Tensor& buf = state_[i].second;
      buf.mul_(opts_.momentum).add_(g);
      g = opts_.nesterov ? add(g, mul(buf, opts_.momentum)) : buf;
    }
    p.add_(g, -lr);
  }
  ++steps_;
}

AdamW::AdamW(NamedTensors params, AdamWOptions opts) : Optimizer(std::move(params)), opts_(opts) {
  lr = opts.lr;
  TG_CHECK(opts.beta1 >= 0 && opts.beta1 < 1 && opts.beta2 >= 0 && opts.beta2 < 1, "AdamW",
           "arguments 'beta1' and 'beta2' must be in [0, 1), got ", opts.beta1, " and ",
           opts.beta2);
  TG_CHECK(opts.eps > 0, "AdamW", "argument 'eps' must be positive, got ", opts.eps);
  for (size_t i = 0; i < params_.size(); ++i) {
    add_slot(i, "exp_avg");
    add_slot(i, "exp_avg_sq");
  }
}

void AdamW::step() {
  NoGradGuard no_grad;
  ++steps_;
  const double t = static_cast<double>(steps_);
  const double bc1 = 1 - std::pow(opts_.beta1, t), bc2 = 1 - std::pow(opts_.beta2, t);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor& m = state_[2 * i].second;
    Tensor& v = state_[2 * i + 1].second;
    adamw_update_(p, g, m, v,
                  {lr, opts_.beta1, opts_.beta2, opts_.eps, opts_.weight_decay, bc1, bc2});
  }
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  TG_CHECK(max_norm > 0, "clip_grad_norm", "argument 'max_norm' must be positive, got ", max_norm);
  NoGradGuard no_grad;
  // The squares summed per device in float64 (one pass over each gradient) and read back
  // once per device: one host sync per step on a GPU instead of one per parameter.
  std::vector<Tensor> per_device;
  for (const auto& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    auto same = std::find_if(per_device.begin(), per_device.end(),
                             [&](const Tensor& t) { return t.device() == g.device(); });
    if (same == per_device.end()) {
      per_device.push_back(zeros({}, TensorOptions(kFloat64).device(g.device())));
      same = per_device.end() - 1;
    }
    add_sum_of_squares_(*same, g);
  }
  double total = 0;
  for (const Tensor& t : per_device) total += t.item<double>();
  const double norm = std::sqrt(total);
  if (norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (const auto& p : params) {
      Tensor g = p.grad();
      if (g.defined()) g.mul_(scale);
    }
  }
  return norm;
}

double WarmupCosine::operator()(int64_t step) const {
  if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  return min_lr + 0.5 * (peak - min_lr) * (1 + std::cos(std::numbers::pi * progress));
}

}  // namespace tg::nn
