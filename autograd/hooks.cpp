#include "autograd/hooks.h"

#include <algorithm>
#include <atomic>

namespace tg {
namespace {
std::atomic<uint64_t> g_next_id{1};
std::atomic<int64_t> g_live_hooks{0};  // registered on a live leaf and not removed
thread_local std::vector<std::function<void()>>* g_callbacks = nullptr;
}  // namespace

HookHandle& HookHandle::operator=(HookHandle&& other) noexcept {
  if (this != &other) {
    remove();
    leaf_ = std::move(other.leaf_);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void HookHandle::remove() {
  std::shared_ptr<TensorImpl> leaf = leaf_.lock();
  leaf_.reset();
  if (!leaf || !leaf->grad_hooks) return;
  auto& hooks = leaf->grad_hooks->hooks;
  const auto gone =
      std::remove_if(hooks.begin(), hooks.end(), [this](const auto& h) { return h.first == id_; });
  g_live_hooks -= hooks.end() - gone;
  hooks.erase(gone, hooks.end());
  if (hooks.empty()) leaf->grad_hooks.reset();
}

HookHandle register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook) {
  constexpr const char* kOp = "register_post_accumulate_grad_hook";
  TG_CHECK(leaf.defined(), kOp, "argument 'leaf' is undefined");
  TG_CHECK(leaf.requires_grad() && leaf.is_leaf(), kOp,
           "argument 'leaf' must be a leaf tensor that requires grad (a parameter), got ",
           leaf.requires_grad() ? "the result of an op" : "a tensor that does not require grad");
  TG_CHECK(static_cast<bool>(hook), kOp, "argument 'hook' is empty");
  TensorImpl* impl = leaf.impl();
  if (!impl->grad_hooks) impl->grad_hooks = std::make_shared<GradHooks>();
  const uint64_t id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  impl->grad_hooks->hooks.emplace_back(id, std::move(hook));
  ++g_live_hooks;
  return HookHandle(leaf.impl_ptr(), id);
}

void queue_callback(std::function<void()> fn) {
  TG_CHECK(g_callbacks != nullptr, "queue_callback",
           "called outside a backward pass: queue callbacks from a hook that backward runs");
  TG_CHECK(static_cast<bool>(fn), "queue_callback", "argument 'fn' is empty");
  g_callbacks->push_back(std::move(fn));
}

GradHooks::~GradHooks() { g_live_hooks -= static_cast<int64_t>(hooks.size()); }

namespace detail {

CallbackQueueScope::CallbackQueueScope() : prev_(g_callbacks) { g_callbacks = &callbacks_; }
CallbackQueueScope::~CallbackQueueScope() { g_callbacks = prev_; }

void CallbackQueueScope::run() {
  for (size_t i = 0; i < callbacks_.size(); ++i) {
    std::function<void()> fn = std::move(callbacks_[i]);  // fn may queue more (and reallocate)
    fn();
  }
  callbacks_.clear();
}

bool any_grad_hooks() { return g_live_hooks.load(std::memory_order_relaxed) > 0; }

bool has_grad_hooks(const TensorImpl& leaf) {
  return leaf.grad_hooks && !leaf.grad_hooks->hooks.empty();
}

void run_grad_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  if (!has_grad_hooks(*leaf)) return;
  // A copy: a hook may remove itself (or others) while running.
  const auto hooks = leaf->grad_hooks->hooks;
  const Tensor t(leaf);
  for (const auto& h : hooks) h.second(t);
}

}  // namespace detail
}  // namespace tg
