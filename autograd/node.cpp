#include "autograd/node.h"

#include <atomic>

#include "autograd/grad_mode.h"

namespace tg {
namespace {
std::atomic<uint64_t> g_sequence{0};
thread_local Node* g_current_node = nullptr;
}  // namespace

namespace detail {
Node* current_backward_node() { return g_current_node; }
BackwardNodeScope::BackwardNodeScope(Node* node) : prev_(g_current_node) { g_current_node = node; }
BackwardNodeScope::~BackwardNodeScope() { g_current_node = prev_; }
}  // namespace detail

SavedTensor::SavedTensor(const Tensor& t, Role role, int output_nr) {
  if (!t.defined()) return;
  data_ = t.detach();
  version_ = t.impl()->storage->version();
  output_ = role == Role::Output;
  output_nr_ = output_nr;
  if (!output_ && t.requires_grad()) input_ = t.impl_ptr();
}

Tensor SavedTensor::unpack(const char* op) const {
  if (data_.defined()) {
    uint64_t now = data_.impl()->storage->version();
    TG_CHECK(now == version_, "backward", "a tensor of shape ", shape_str(data_.sizes()),
             " saved by '", op, "' for its backward was modified in place afterwards (version ",
             version_, " -> ", now,
             "); clone it before the in-place op, or run the in-place op after backward");
  }
  if (!grad_enabled()) return data_;  // a plain backward: data only
  if (input_) return Tensor(input_);
  Node* node = detail::current_backward_node();
  if (!output_ || !node) return data_;
  // The op's own output, as the output of the node whose backward is running.
  auto impl = std::make_shared<TensorImpl>(*data_.impl());
  impl->grad_fn = node->shared_from_this();
  impl->output_nr = output_nr_;
  impl->requires_grad = true;
  return Tensor(std::move(impl));
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

bool record(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs,
            BackwardFn backward) {
  if (!grad_enabled() || !any_requires_grad(inputs)) return false;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->sequence_nr = g_sequence.fetch_add(1, std::memory_order_relaxed);
  node->backward = std::move(backward);
  node->next.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    Edge e;
    if (in.defined() && in.requires_grad()) {
      if (in.grad_fn()) {
        e.node = in.grad_fn();
        e.output_nr = in.impl()->output_nr;
      } else {
        e.leaf = in.impl_ptr();
      }
    }
    node->next.push_back(std::move(e));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    TensorImpl* o = outputs[i]->impl();
    node->outputs.push_back({o->sizes, o->dtype, o->storage->device()});
    o->grad_fn = node;
    o->output_nr = static_cast<int>(i);
    o->requires_grad = true;
  }
  return true;
}

}  // namespace tg
