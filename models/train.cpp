#include "models/train.h"

#include <cmath>

namespace tg::nn {

double train_step(Module& model, Optimizer& opt, const std::function<Tensor()>& loss,
                  const StepOptions& opts) {
  opt.zero_grad();
  Tensor value = loss();
  TG_CHECK(value.defined() && value.numel() == 1, "train_step",
           "the loss function must return a one-element tensor, got ",
           value.defined() ? shape_str(value.sizes()) : std::string("an undefined tensor"));
  value.backward();
  if (opts.clip > 0) clip_grad_norm(model.parameters(), opts.clip);
  opt.step();
  return value.item<double>();
}

double train_step(Transformer& model, Optimizer& opt, const Batch& batch, Generator& dropout,
                  const StepOptions& opts) {
  const Device device = model.device();
  return train_step(
      model, opt,
      [&] {
        return lm_loss(model.forward(batch.inputs.to(device), dropout), batch.targets.to(device));
      },
      opts);
}

}  // namespace tg::nn
