// backward(): replays the nodes reachable from the outputs in reverse tape order.
#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autograd.h"
#include "autograd/hooks.h"
#include "ops/ops.h"

namespace tg {

namespace {

// Where tg::grad collects gradients instead of .grad().
struct Capture {
  std::unordered_map<const TensorImpl*, size_t> leaves;  // leaf impl -> input index
  std::unordered_map<const Node*, std::vector<std::pair<int, size_t>>> slots;  // node -> (out, idx)
  std::vector<Tensor> grads;
};

// A gradient that nothing else holds (neither its handle nor its storage) and that fills its
// storage contiguously can become the leaf's .grad as it is; any other is copied, since it
// may alias other gradients or saved tensors. PyTorch's AccumulateGrad steals the same way.
bool can_steal(const Tensor& g) {
  const TensorImpl* impl = g.impl();
  return g.impl_ptr().use_count() == 1 && impl->storage.use_count() == 1 && impl->offset == 0 &&
         g.is_contiguous() &&
         impl->storage->bytes() == static_cast<size_t>(g.numel()) * dtype_size(g.dtype());
}

// Under create_graph (grad mode on) the .grad keeps its graph: the first is stored or cloned
// (a recorded clone), later ones are added out of place, as libtorch's AccumulateGrad does.
void accumulate_leaf(TensorImpl* leaf, const Tensor& g) {
  if (!leaf->grad) {
    leaf->grad = can_steal(g) ? g.impl_ptr() : g.clone().impl_ptr();
  } else if (grad_enabled()) {
    leaf->grad = add(Tensor(leaf->grad), g).impl_ptr();
  } else {
    Tensor(leaf->grad).add_(g);
  }
}

void check_finite(const Node& node, size_t input, const Tensor& g) {
  if (!is_floating(g.dtype())) return;
  if (sum(logical_not(isfinite(g))).item<int64_t>() == 0) return;
  bool nan = sum(ne(g, g)).item<int64_t>() > 0;
  fail("anomaly", "backward of '", node.name, "' (tape position ", node.sequence_nr, ") produced ",
       nan ? "NaN" : "Inf", " in the gradient of its input ", input, " (shape ",
       shape_str(g.sizes()), ")");
}

void run_backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                  bool retain_graph, bool create_graph, Capture* capture) {
  TG_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "backward", "got ",
           grad_outputs.size(), " grad_outputs for ", outputs.size(), " outputs");
  // Backward formulas are recorded only under create_graph: then the gradients they make are
  // differentiable (higher-order derivatives).
  ScopedSetting<grad_enabled, set_grad_enabled> grad_mode(create_graph);
  AutocastGuard no_autocast(kFloat32);  // gradients keep the dtypes the forward chose
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<Node*> roots;

  auto deliver = [&](const Edge& e, const Tensor& g) {
    if (e.node) {
      auto& buf = buffers[e.node.get()];
      if (buf.empty()) buf.resize(e.node->outputs.size());
      Tensor& slot = buf[e.output_nr];
      slot = slot.defined() ? add(slot, g) : g;
    } else if (e.leaf) {
      if (capture) {
        auto it = capture->leaves.find(e.leaf.get());
        if (it != capture->leaves.end()) {
          Tensor& c = capture->grads[it->second];
          c = c.defined() ? add(c, g) : g;
        }
      } else {
        accumulate_leaf(e.leaf.get(), g);
      }
    }
  };

  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    TG_CHECK(out.defined() && out.requires_grad(), "backward", "output ", i,
             " does not require grad and has no grad_fn (was it computed under NoGradGuard, "
             "or from tensors without requires_grad?)");
    Tensor g;
    if (grad_outputs.empty() || !grad_outputs[i].defined()) {
      TG_CHECK(out.numel() == 1, "backward",
               "grad can be created implicitly only for a scalar output; output ", i, " has shape ",
               shape_str(out.sizes()), ", so pass a gradient of that shape");
      g = ones(out.sizes(), out.options());
    } else {
      g = grad_outputs[i];
      TG_CHECK(g.sizes() == out.sizes(), "backward", "gradient ", i, " has shape ",
               shape_str(g.sizes()), ", expected ", shape_str(out.sizes()));
      TG_CHECK(g.dtype() == out.dtype() && g.device() == out.device(), "backward", "gradient ", i,
               " is ", g.dtype(), " on ", g.device(), ", expected ", out.dtype(), " on ",
               out.device());
    }
    Edge e;
    if (out.grad_fn()) {
      e.node = out.grad_fn();
      e.output_nr = out.impl()->output_nr;
      roots.push_back(e.node.get());
    } else {
      e.leaf = out.impl_ptr();
    }
    deliver(e, g);
  }

  // Every node reachable from the roots, then in reverse tape order.
  std::vector<Node*> order;
  std::unordered_set<Node*> seen(roots.begin(), roots.end());
  std::vector<Node*> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (const Edge& e : n->next)
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  std::sort(order.begin(), order.end(),
            [](Node* a, Node* b) { return a->sequence_nr > b->sequence_nr; });

  // Leaves with post-accumulate-grad hooks (hooks.h): how many nodes still to run have an edge
  // to each; when none, its gradient for this pass is final. Only where .grad() is filled.
  struct HookedLeaf {
    int pending = 0;
    bool accumulated = false;
  };
  std::unordered_map<TensorImpl*, HookedLeaf> hooked;
  detail::CallbackQueueScope callbacks;
  if (!capture && detail::any_grad_hooks()) {
    for (Node* n : order)
      for (const Edge& e : n->next)
        if (e.leaf && detail::has_grad_hooks(*e.leaf)) ++hooked[e.leaf.get()].pending;
    for (const Tensor& out : outputs)  // a leaf passed as an output
      if (!out.grad_fn() && detail::has_grad_hooks(*out.impl())) {
        auto [it, fresh] = hooked.try_emplace(out.impl());
        it->second.accumulated = true;
        if (fresh) detail::run_grad_hooks(out.impl_ptr());
      }
  }
  // After `node` has run (or had nothing to run): the leaves it was the last to feed.
  auto settle_leaves = [&](const Node& node, const std::vector<Tensor>& in_grads) {
    if (hooked.empty()) return;
    for (size_t i = 0; i < node.next.size(); ++i) {
      const Edge& e = node.next[i];
      if (!e.leaf) continue;
      auto it = hooked.find(e.leaf.get());
      if (it == hooked.end()) continue;
      if (i < in_grads.size() && in_grads[i].defined()) it->second.accumulated = true;
      if (--it->second.pending == 0 && it->second.accumulated) detail::run_grad_hooks(e.leaf);
    }
  };

  for (Node* node : order) {
    auto it = buffers.find(node);
    if (it == buffers.end()) {
      settle_leaves(*node, {});
      continue;
    }
    std::vector<Tensor> grads = std::move(it->second);
    buffers.erase(it);
    TG_CHECK(!node->released, "backward",
             "trying to backward through the graph a second time: "
             "the saved tensors of '",
             node->name,
             "' were freed by the first backward; pass "
             "retain_graph=true to it if you need to backward twice");
    for (size_t k = 0; k < grads.size(); ++k) {
      if (!grads[k].defined()) {
        const OutputMeta& m = node->outputs[k];
        grads[k] = zeros(m.sizes, TensorOptions(m.dtype).device(m.device));
      }
    }
    if (capture) {
      auto s = capture->slots.find(node);
      if (s != capture->slots.end())
        for (auto [out_nr, idx] : s->second) capture->grads[idx] = grads[out_nr];
    }
    std::vector<Tensor> in_grads;
    {
      detail::BackwardNodeScope scope(node);  // where saved outputs reconnect (create_graph)
      in_grads = node->backward(grads);
    }
    grads.clear();  // no longer held here: a leaf can take an input gradient that is a view of them
    TG_CHECK(in_grads.size() == node->next.size(), "backward", "internal: backward of '",
             node->name, "' returned ", in_grads.size(), " gradients for ", node->next.size(),
             " inputs");
    if (!retain_graph) {
      node->backward = nullptr;  // frees the saved tensors
      node->released = true;
    }
    for (size_t i = 0; i < in_grads.size(); ++i) {
      const Edge& e = node->next[i];
      const Tensor& g = in_grads[i];
      if (!e.valid() || !g.defined()) continue;
      const Shape& want = e.node ? e.node->outputs[e.output_nr].sizes : e.leaf->sizes;
      TG_CHECK(g.sizes() == want, "backward", "internal: backward of '", node->name,
               "' gave a gradient of shape ", shape_str(g.sizes()), " for input ", i, " of shape ",
               shape_str(want));
      if (anomaly_enabled()) check_finite(*node, i, g);
      deliver(e, g);
    }
    settle_leaves(*node, in_grads);
  }
  callbacks.run();
}

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              std::optional<bool> retain_graph, bool create_graph) {
  run_backward(outputs, grad_outputs, retain_graph.value_or(create_graph), create_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph,
                         bool allow_unused, bool create_graph) {
  Capture cap;
  cap.grads.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    TG_CHECK(in.defined() && in.requires_grad(), "grad", "input ", i, " does not require grad");
    if (in.grad_fn()) {
      cap.slots[in.grad_fn().get()].push_back({in.impl()->output_nr, i});
    } else {
      cap.leaves[in.impl()] = i;
    }
  }
  run_backward(outputs, grad_outputs, retain_graph.value_or(create_graph), create_graph, &cap);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (cap.grads[i].defined()) continue;
    TG_CHECK(allow_unused, "grad", "input ", i,
             " was not used to compute the outputs (pass allow_unused=true for zeros)");
    cap.grads[i] = zeros(inputs[i].sizes(), inputs[i].options());
  }
  return cap.grads;
}

// --- Tensor's autograd members

Tensor& Tensor::requires_grad_(bool r) {
  checked("requires_grad_");
  TG_CHECK(!r || is_floating(dtype()), "requires_grad_",
           "only floating tensors can require grad, got ", dtype());
  TG_CHECK(r || is_leaf(), "requires_grad_",
           "cannot turn off requires_grad on a non-leaf tensor; use detach()");
  impl_->requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const {
  const TensorImpl& t = checked("grad");
  return t.grad ? Tensor(t.grad) : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  TensorImpl& t = checked("set_grad");
  if (g.defined()) {
    TG_CHECK(g.sizes() == t.sizes && g.dtype() == t.dtype && g.device() == device(), "set_grad",
             "the gradient must match the tensor: expected ", shape_str(t.sizes), " ", t.dtype,
             " on ", device(), ", got ", shape_str(g.sizes()), " ", g.dtype(), " on ", g.device());
  }
  t.grad = g.defined() ? g.impl_ptr() : nullptr;
}

void Tensor::zero_grad() const { checked("zero_grad").grad.reset(); }

Tensor Tensor::detach() const {
  checked("detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->sizes = impl_->sizes;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

void Tensor::backward(const Tensor& grad_output, std::optional<bool> retain_graph,
                      bool create_graph) const {
  checked("backward");
  tg::backward({*this}, {grad_output}, retain_graph, create_graph);
}

}  // namespace tg
