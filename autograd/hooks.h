// Hooks into backward, for code that acts while it runs: data-parallel training starts
// reducing a parameter's gradient as soon as backward has finished it, and waits for the
// reductions when the pass ends. The same two hooks as PyTorch's
// Tensor.register_post_accumulate_grad_hook and the engine's queue_callback.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tg {

using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// A leaf's hooks, in registration order (TensorImpl::grad_hooks). Not copied: it keeps the
// count of live hooks that lets backward skip the search for hooked leaves when there are none.
struct GradHooks {
  GradHooks() = default;
  GradHooks(const GradHooks&) = delete;
  GradHooks& operator=(const GradHooks&) = delete;
  ~GradHooks();
  std::vector<std::pair<uint64_t, PostAccumulateGradHook>> hooks;
};

// Owns one registered hook: removes it when destroyed or on remove(). Move-only.
class [[nodiscard]] HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<TensorImpl> leaf, uint64_t id) : leaf_(std::move(leaf)), id_(id) {}
  HookHandle(HookHandle&& other) noexcept { *this = std::move(other); }
  HookHandle& operator=(HookHandle&& other) noexcept;
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;
  ~HookHandle() { remove(); }
  void remove();

 private:
  std::weak_ptr<TensorImpl> leaf_;
  uint64_t id_ = 0;
};

// Calls hook(leaf) in every backward (tg::backward, Tensor::backward) that accumulates into
// leaf.grad(), once the pass has accumulated its last gradient there: after the last node with
// an edge to the leaf has run, while the nodes before it on the tape are still to come. Not
// called by tg::grad, which fills no .grad(). Hooks run on the thread that runs backward, in
// registration order; one that throws ends the backward with its error.
HookHandle register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook);

// Called from within backward (a hook): runs fn once the pass has run its last node, before
// backward returns; callbacks run in the order queued and may queue more. Outside a backward
// pass, an error.
void queue_callback(std::function<void()> fn);

namespace detail {
// The engine's side: the callbacks of the backward pass running on this thread.
class CallbackQueueScope {
 public:
  CallbackQueueScope();
  ~CallbackQueueScope();
  CallbackQueueScope(const CallbackQueueScope&) = delete;
  CallbackQueueScope& operator=(const CallbackQueueScope&) = delete;
  void run();  // runs the queued callbacks (and those they queue)

 private:
  std::vector<std::function<void()>> callbacks_;
  std::vector<std::function<void()>>* prev_;
};
bool any_grad_hooks();  // on any leaf; none: backward skips the search for hooked leaves
bool has_grad_hooks(const TensorImpl& leaf);
void run_grad_hooks(const std::shared_ptr<TensorImpl>& leaf);
}  // namespace detail

}  // namespace tg
