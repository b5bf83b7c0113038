#include "models/train.h"

#include <cmath>

#include "ops/autocast.h"
#include "ops/elementwise.h"
#include "ops/host_values.h"

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

namespace {
// t on `device`; sent from the host with its values kept there (detail::int64_to_device), so
// that embedding's and cross-entropy's range checks read nothing back from a GPU.
Tensor ids_on(const Tensor& t, Device device) {
  if (t.device() == device || !t.device().is_cpu() || t.dtype() != kInt64) return t.to(device);
  return detail::int64_to_device(t.to_vector<int64_t>(), t.sizes(), device);
}
}  // namespace

Tensor batch_loss(const Transformer& model, const Batch& batch, Generator& dropout) {
  const Device device = model.device();
  const Tensor ids = ids_on(batch.inputs, device);
  const Tensor loss = lm_loss(
      batch.packed() ? model.forward(ids, batch.cu_seqlens, dropout) : model.forward(ids, dropout),
      ids_on(batch.targets, device));
  return batch.loss_weight == 1.0 ? loss : mul(loss, batch.loss_weight);
}

double train_step(Transformer& model, Optimizer& opt, const Batch& batch, Generator& dropout,
                  const StepOptions& opts) {
  return train_step(
      model, opt, [&] { return batch_loss(model, batch, dropout); }, opts);
}

}  // namespace tg::nn
