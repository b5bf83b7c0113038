// One optimisation step of a language model, shared by the CLI, the tests and the benchmark.
#pragma once
#include <functional>

#include "core/philox.h"
#include "models/data.h"
#include "models/optim.h"
#include "models/transformer.h"

namespace tg::nn {

struct StepOptions {
  double clip = 1.0;  // global gradient-norm clip; 0 turns it off
};

// One step of any model: zero the gradients, loss(), backward, clip the model's gradients to
// opts.clip, and the optimizer's update at its current lr. `loss` runs the forward pass and
// returns a 0-d loss. Returns the loss (before the update).
double train_step(Module& model, Optimizer& opt, const std::function<Tensor()>& loss,
                  const StepOptions& opts = {});

// The language model's step: lm_loss of model.forward(batch.inputs) against batch.targets, both
// moved to the model's device. `dropout` feeds attention dropout.
double train_step(Transformer& model, Optimizer& opt, const Batch& batch, Generator& dropout,
                  const StepOptions& opts = {});

// The dropout generator of a training step: a pure function of (seed, step) so a resumed run
// draws the same masks.
inline Generator step_dropout_generator(uint64_t seed, int64_t step) {
  return Generator{seed + 0x5eed, static_cast<uint64_t>(step) << 32};
}

}  // namespace tg::nn
