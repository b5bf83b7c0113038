// A Node is one recorded op on the tape: its backward formula, the tensors it saved, and the
// edges to the nodes (or leaves) that produced its inputs. Tensors own the node that made
// them, so a graph nobody can reach is freed at once.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tg {

// Where an input's gradient goes: the producing node's output slot, or a leaf tensor.
struct Edge {
  std::shared_ptr<Node> node;
  int output_nr = 0;
  std::shared_ptr<TensorImpl> leaf;  // set for leaves that require grad
  bool valid() const { return node || leaf; }
};

// A tensor kept for backward, plus the storage version when saved, to catch in-place
// changes. A backward without create_graph gets its data alone. A backward with create_graph
// (grad mode on) gets it with its place in the graph, so that the gradient it computes is
// itself differentiable: an input as it was (its grad_fn, or the leaf itself), an op's own
// output (Role::Output) as output `output_nr` of the node whose backward is running. The
// output keeps no grad_fn while saved: a node holding its own output would be a cycle.
class SavedTensor {
 public:
  enum class Role { Input, Output };
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t, Role role = Role::Input, int output_nr = 0);
  // Returns the saved tensor, or throws if it was modified in place since it was saved.
  Tensor unpack(const char* op) const;

 private:
  Tensor data_;                        // detached
  std::shared_ptr<TensorImpl> input_;  // an input that required grad: its graph identity
  bool output_ = false;
  int output_nr_ = 0;
  uint64_t version_ = 0;
};

struct OutputMeta {
  Shape sizes;
  DType dtype;
  Device device;
};

using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

struct Node : std::enable_shared_from_this<Node> {
  std::string name;          // the op, for error messages
  uint64_t sequence_nr = 0;  // position on the tape
  std::vector<Edge> next;    // one per input of the op
  std::vector<OutputMeta> outputs;
  BackwardFn backward;    // returns one gradient per input (undefined where none)
  bool released = false;  // saved tensors freed after a backward without retain_graph
};

// Records `outputs` as produced by an op over `inputs` when grad mode is on and any input
// requires grad. `backward` receives one gradient per output and returns one per input.
// Returns true when it recorded.
bool record(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs,
            BackwardFn backward);
bool any_requires_grad(const std::vector<Tensor>& inputs);

namespace detail {
// The node whose backward runs on this thread (null outside backward): where a saved output
// reconnects under create_graph. Set by the engine around each node's backward.
Node* current_backward_node();
class BackwardNodeScope {
 public:
  explicit BackwardNodeScope(Node* node);
  ~BackwardNodeScope();
  BackwardNodeScope(const BackwardNodeScope&) = delete;
  BackwardNodeScope& operator=(const BackwardNodeScope&) = delete;

 private:
  Node* prev_;
};
}  // namespace detail

}  // namespace tg
