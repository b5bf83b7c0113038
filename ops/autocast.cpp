#include "ops/autocast.h"

#include "ops/op_util.h"

namespace tg {

namespace {
thread_local DType t_autocast = kFloat32;
}

DType autocast_dtype() { return t_autocast; }

void set_autocast_dtype(DType dtype) {
  TG_CHECK(dtype == kBFloat16 || dtype == kFloat16 || dtype == kFloat32, "autocast",
           "dtype must be bfloat16 or float16 (on) or float32 (off), got ", dtype);
  t_autocast = dtype;
}

AutocastGuard::~AutocastGuard() { t_autocast = prev_; }

namespace detail {

Tensor autocast_low(const Tensor& t) {
  if (t_autocast == kFloat32 || !t.defined() || t.dtype() != kFloat32) return t;
  return t.to(t_autocast);
}

Tensor autocast_float32(const Tensor& t) {
  if (t_autocast == kFloat32 || !t.defined() || !is_half(t.dtype())) return t;
  return t.to(kFloat32);
}

}  // namespace detail
}  // namespace tg
