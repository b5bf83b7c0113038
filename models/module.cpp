#include "models/module.h"

#include "ops/factories.h"

namespace tg::nn {

Tensor Module::register_parameter(std::string name, Tensor value) {
  TG_CHECK(value.defined(), "Module", "parameter '", name, "' is undefined");
  for (const auto& [n, p] : params_) {
    TG_CHECK(n != name, "Module", "parameter '", name, "' is registered twice");
  }
  value = value.detach();
  value.requires_grad_(true);
  params_.emplace_back(std::move(name), value);
  return value;
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, p] : params_) out.emplace_back(prefix + name, p);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

Device Module::device() const {
  std::vector<Tensor> ps = parameters();
  return ps.empty() ? kCPU : ps.front().device();
}

void Module::to(Device device) {
  for (auto& p : parameters()) {
    if (p.device() == device) continue;
    // Swap the data under the same TensorImpl so every holder of the handle sees the move.
    Tensor moved = p.to(device);
    TensorImpl* impl = p.impl();
    impl->storage = moved.impl()->storage;
    impl->strides = moved.strides();
    impl->offset = moved.offset();
    impl->grad.reset();
  }
}

void Module::zero_grad() {
  for (auto& p : parameters()) p.zero_grad();
}

}  // namespace tg::nn
