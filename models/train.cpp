#include "models/train.h"

#include <cmath>

namespace tg::nn {

double train_step(Transformer& model, Optimizer& opt, const Batch& batch, Generator& dropout,
                  const StepOptions& opts) {
  const Device device = model.parameters().front().device();
  Tensor loss = lm_loss(model.forward(batch.inputs.to(device), dropout), batch.targets.to(device));
  opt.zero_grad();
  loss.backward();
  if (opts.clip > 0) clip_grad_norm(model.parameters(), opts.clip);
  opt.step();
  return loss.item<double>();
}

}  // namespace tg::nn
