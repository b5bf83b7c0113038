#include "models/train.h"

#include <cmath>

#include "ops/autocast.h"
#include "ops/elementwise.h"

namespace tg::nn {

double train_step(Module& model, Optimizer& opt, const std::function<Tensor()>& loss,
                  const StepOptions& opts) {
  opt.zero_grad();
  Tensor value;
  {
    AutocastGuard autocast(opts.precision);
    value = loss();
  }
  TG_CHECK(value.defined() && value.numel() == 1, "train_step",
           "the loss function must return a one-element tensor, got ",
           value.defined() ? shape_str(value.sizes()) : std::string("an undefined tensor"));
  (opts.scaler ? opts.scaler->scale(value) : value).backward();
  const std::vector<Tensor> params = model.parameters();
  if (opts.scaler) {
    const bool finite = opts.scaler->unscale(params);
    opts.scaler->update(!finite);
    if (!finite) return value.item<double>();  // skipped: the scale was too large
  }
  if (opts.clip > 0) clip_grad_norm(params, opts.clip);
  opt.step();
  return value.item<double>();
}

Tensor batch_loss(const Transformer& model, const Batch& batch, Generator& dropout) {
  const Device device = model.device();
  const Tensor ids = batch.inputs.to(device);
  const Tensor loss = lm_loss(
      batch.packed() ? model.forward(ids, batch.cu_seqlens, dropout) : model.forward(ids, dropout),
      batch.targets.to(device));
  return batch.loss_weight == 1.0 ? loss : mul(loss, batch.loss_weight);
}

double train_step(Transformer& model, Optimizer& opt, const Batch& batch, Generator& dropout,
                  const StepOptions& opts) {
  return train_step(
      model, opt, [&] { return batch_loss(model, batch, dropout); }, opts);
}

}  // namespace tg::nn
