// Optimizers (SGD with momentum, AdamW), global-norm gradient clipping and the linear warmup
// + cosine learning-rate schedule. Updates run in place under NoGradGuard.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/module.h"

namespace tg::nn {

class Optimizer {
 public:
  // Parameters with their names; the names key the optimizer state in checkpoints.
  explicit Optimizer(NamedTensors params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update from the parameters' .grad() (a parameter without a gradient is skipped).
  virtual void step() = 0;
  void zero_grad();

  double lr = 1e-3;  // the schedule sets it before each step
  int64_t steps() const { return steps_; }
  // Live state tensors, named "<param>.<slot>", for checkpoints: loading copies into them.
  NamedTensors state() const;
  void set_steps(int64_t n);

 protected:
  Tensor add_slot(size_t param, const char* slot);  // zeros like the parameter
  NamedTensors params_;
  NamedTensors state_;
  int64_t steps_ = 0;
};

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double weight_decay = 0.0;  // L2, added to the gradient (as torch.optim.SGD)
  bool nesterov = false;
};

// buf = momentum * buf + g; p -= lr * (nesterov ? g + momentum * buf : buf).
class SGD : public Optimizer {
 public:
  SGD(NamedTensors params, SGDOptions opts = {});
  void step() override;

 private:
  SGDOptions opts_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // decoupled: p *= 1 - lr * weight_decay (as torch.optim.AdamW)
};

// Loshchilov & Hutter's AdamW with bias correction, slots "exp_avg" and "exp_avg_sq".
class AdamW : public Optimizer {
 public:
  AdamW(NamedTensors params, AdamWOptions opts = {});
  void step() override;

 private:
  AdamWOptions opts_;
};

// Scales every gradient by max_norm / norm when the global L2 norm of all gradients exceeds
// max_norm; returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// Linear warmup from peak/warmup to peak over `warmup` steps, then cosine decay to min_lr at
// `total` steps (held there after).
struct WarmupCosine {
  double peak = 1e-3;
  double min_lr = 0.0;
  int64_t warmup = 0;
  int64_t total = 1;
  double operator()(int64_t step) const;
};

}  // namespace tg::nn
