// Helpers the op implementations share: backend views and argument checks.
#pragma once
#include <utility>

#include "backends/backend.h"
#include "backends/scalar_ops.h"
#include "core/tensor.h"

namespace tg::detail {

inline View view_of(const Tensor& t) {
  return View{t.raw_data(), t.dtype(), t.sizes(), t.strides()};
}
// t seen with target's sizes (stride 0 on broadcast dims).
inline View view_as(const Tensor& t, const Shape& target) {
  return View{t.raw_data(), t.dtype(), target, broadcast_strides(t.sizes(), t.strides(), target)};
}
inline Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }

void check_defined(const Tensor& t, const char* op, const char* arg);
void check_same_device(const Tensor& a, const Tensor& b, const char* op, const char* arg);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op, const char* arg);
void check_floating(const Tensor& t, const char* op, const char* arg);
void check_dtype(const Tensor& t, DType want, const char* op, const char* arg);
// An "[op] argument 'arg'" error unless scalar v can be an element of dtype (scalar_fits).
void check_scalar(double v, DType dtype, const char* op, const char* arg);

// t for a kernel that reads rows at any strides but needs adjacent elements within a row
// (RoPE, SDPA): t itself when its last dim has unit stride, else a contiguous copy. Detached.
Tensor rows_ready(const Tensor& t);

// a and b, defined and on one device, cast (differentiably) to promote_types of their dtypes:
// the operands of a binary op, as PyTorch promotes them.
std::pair<Tensor, Tensor> promoted(const Tensor& a, const Tensor& b, const char* op);

// The casts of autocast (ops/autocast.h): t in the autocast dtype when autocast is on and t is
// float32, and t in float32 when autocast is on and t is 16-bit; else t itself.
Tensor autocast_low(const Tensor& t);
Tensor autocast_float32(const Tensor& t);

// f(x) for a composite op: for 16-bit x it runs on x in float32 and its result is rounded back
// to x's dtype once, so that none of its intermediates round to 16 bits (the casts are on the
// tape, so the gradient takes the same way back).
template <class F>
Tensor in_compute_dtype(const Tensor& x, F&& f) {
  if (!is_half(x.dtype())) return f(x);
  return f(x.to(compute_dtype(x.dtype()))).to(x.dtype());
}

}  // namespace tg::detail
