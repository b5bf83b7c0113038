// One optimisation step of a language model, shared by the CLI, the tests and the benchmark.
#pragma once
#include <functional>

#include "core/philox.h"
#include "models/data.h"
#include "models/grad_scaler.h"
#include "models/optim.h"
#include "models/transformer.h"

namespace tg::nn {

struct StepOptions {
  double clip = 1.0;  // global gradient-norm clip; 0 turns it off
  // kFloat32, or kBFloat16 / kFloat16: the forward pass runs under AutocastGuard(precision)
  // (ops/autocast.h); parameters and optimizer state stay float32.
  DType precision = kFloat32;
  // Loss scaling (for float16): the loss is scaled before backward, the gradients unscaled,
  // and a step whose gradients hold Inf or NaN is skipped (scaler->update() says so in its
  // skipped_steps()). Null: none.
  GradScaler* scaler = nullptr;
};

// One step of any model: zero the gradients, loss() (under autocast when asked), backward,
// clip the model's gradients to opts.clip, and the optimizer's update at its current lr.
// `loss` runs the forward pass and returns a 0-d loss. Returns the loss (before the update).
double train_step(Module& model, Optimizer& opt, const std::function<Tensor()>& loss,
                  const StepOptions& opts = {});

// A language-model batch's loss: lm_loss of model.forward(batch.inputs) (packed batches: with
// batch.cu_seqlens) against batch.targets, moved to the model's device, times
// batch.loss_weight (a shard's). `dropout` feeds attention dropout (training mode only).
Tensor batch_loss(const Transformer& model, const Batch& batch, Generator& dropout);

// The language model's step: train_step of batch_loss.
double train_step(Transformer& model, Optimizer& opt, const Batch& batch, Generator& dropout,
                  const StepOptions& opts = {});

// The dropout generator of a training step: a pure function of (seed, step) so a resumed run
// draws the same masks.
inline Generator step_dropout_generator(uint64_t seed, int64_t step) {
  return Generator{seed + 0x5eed, static_cast<uint64_t>(step) << 32};
}

}  // namespace tg::nn
