// Module: a tree of named parameters, in the manner of torch.nn.Module. Parameters are
// leaf tensors that require grad; children are modules registered under a name, so
// named_parameters() yields dotted paths such as "blocks.0.attn.wq.weight".
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tg::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;  // parameters are shared handles: copying would alias them
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // Every parameter, depth first in registration order, with its dotted name.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t parameter_count() const;  // number of scalar parameters

  // Training mode (dropout on) is the default; eval() turns it off, recursively.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves every parameter to `device` in place: the handles modules hold stay valid.
  void to(Device device);
  // The device of the parameters (the CPU for a module without any).
  Device device() const;
  void zero_grad();

 protected:
  // Registers a parameter and returns the handle (a leaf that requires grad).
  Tensor register_parameter(std::string name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> child) {
    children_.emplace_back(std::move(name), child);
    return child;
  }

 private:
  void collect(const std::string& prefix, NamedTensors& out) const;

  NamedTensors params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace tg::nn
