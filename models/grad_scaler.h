// Dynamic loss scaling for float16 training (as torch.cuda.amp.GradScaler): the loss is
// multiplied by a scale before backward so that small gradients survive float16's range, the
// gradients are divided by it before the update, and a step whose gradients hold Inf or NaN
// (the scale was too large) is skipped and the scale halved. After `growth_interval` steps in
// a row without one, the scale doubles.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tg::nn {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions opts = {});

  // loss * scale, the tensor to call backward on.
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of params by the scale, in place; false when any of them holds Inf
  // or NaN (one host read per device).
  bool unscale(const std::vector<Tensor>& params) const;
  // After a step: a skipped one (found_inf) shrinks the scale, growth_interval good ones in a
  // row grow it.
  void update(bool found_inf);

  double current_scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }  // in a row, since the last change
  int64_t skipped_steps() const { return skipped_; }  // in this object's lifetime
  // The state a checkpoint keeps (scale and the good-step count), and back.
  void set_state(double scale, int64_t good_steps);

 private:
  GradScalerOptions opts_;
  double scale_;
  int64_t good_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace tg::nn
