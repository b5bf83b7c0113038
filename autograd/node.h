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

// A tensor kept for backward: its data only (no grad_fn, so saving an op's own output makes
// no reference cycle) plus the storage version when saved, to catch in-place changes.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // Returns the saved tensor, or throws if it was modified in place since it was saved.
  Tensor unpack(const char* op) const;

 private:
  Tensor data_;
  uint64_t version_ = 0;
};

struct OutputMeta {
  Shape sizes;
  DType dtype;
  Device device;
};

using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

struct Node {
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

}  // namespace tg
