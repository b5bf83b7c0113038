// Mixed precision in the manner of torch.autocast. Inside an AutocastGuard(kBFloat16) (or
// kFloat16) scope of the forward pass:
//   - matmul (so nn::Linear) and sdpa run in the low precision: their float32 tensor inputs are
//     cast to it on the tape, so their gradients come back to float32 tensors in float32;
//   - softmax, log_softmax, rms_norm, cross_entropy and the reductions sum, mean, logsumexp and
//     var run in float32: 16-bit inputs are cast up;
//   - every other op runs in its inputs' dtype (promoted when two differ: a 16-bit result
//     added to a float32 residual gives float32).
// Parameters and optimizer state stay float32 (master weights). backward() runs with autocast
// off, whatever the scope it is called from: gradients take the forward's dtypes back.
#pragma once
#include "core/tensor.h"

namespace tg {

// The autocast dtype of this thread: kBFloat16 or kFloat16 while on, kFloat32 when off.
DType autocast_dtype();
// kBFloat16 or kFloat16 turns it on, kFloat32 off; anything else is an [autocast] error.
void set_autocast_dtype(DType dtype);

class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype) : prev_(autocast_dtype()) { set_autocast_dtype(dtype); }
  ~AutocastGuard();  // restores the dtype it found (never throws)
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DType prev_;
};

}  // namespace tg
