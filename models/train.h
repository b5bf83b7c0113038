// One optimisation step of a language model, shared by the CLI, the tests and the benchmark.
#pragma once
#include "core/philox.h"
#include "models/data.h"
#include "models/optim.h"
#include "models/transformer.h"

namespace tg::nn {

struct StepOptions {
  double clip = 1.0;  // global gradient-norm clip; 0 turns it off
};

// Forward, loss, backward, clipping and the optimizer update at the optimizer's current lr.
// `dropout` feeds attention dropout. Returns the loss (before the update).
double train_step(Transformer& model, Optimizer& opt, const Batch& batch, Generator& dropout,
                  const StepOptions& opts = {});

// The dropout generator of a training step: a pure function of (seed, step) so a resumed run
// draws the same masks.
inline Generator step_dropout_generator(uint64_t seed, int64_t step) {
  return Generator{seed + 0x5eed, static_cast<uint64_t>(step) << 32};
}

}  // namespace tg::nn
