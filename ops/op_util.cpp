#include "ops/op_util.h"

#include <atomic>

#include "ops/fused_kernels.h"

namespace tg {

namespace {
std::atomic<bool> g_fused{true};
}

void set_fused_kernels(bool on) { g_fused = on; }
bool fused_kernels() { return g_fused; }

}  // namespace tg

namespace tg::detail {

void check_defined(const Tensor& t, const char* op, const char* arg) {
  TG_CHECK(t.defined(), op, "argument '", arg, "' is an undefined tensor");
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op, const char* arg) {
  TG_CHECK(a.device() == b.device(), op, "argument '", arg, "' is on ", b.device(), ", expected ",
           a.device(), " like the first argument");
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op, const char* arg) {
  TG_CHECK(a.dtype() == b.dtype(), op, "argument '", arg, "' has dtype ", b.dtype(), ", expected ",
           a.dtype(), " like the first argument (convert with .to(dtype))");
}

void check_floating(const Tensor& t, const char* op, const char* arg) {
  TG_CHECK(is_floating(t.dtype()), op, "argument '", arg, "' must be a floating dtype, got ",
           t.dtype());
}

Tensor rows_ready(const Tensor& t) {
  return t.strides().back() == 1 ? t.detach() : t.detach().contiguous();
}

std::pair<Tensor, Tensor> promoted(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "self");
  check_defined(b, op, "other");
  check_same_device(a, b, op, "other");
  const DType t = promote_types(a.dtype(), b.dtype());
  return {a.to(t), b.to(t)};
}

void check_scalar(double v, DType dtype, const char* op, const char* arg) {
  if (scalar_fits(v, dtype)) return;
  if (dtype == kInt64) {
    fail(op, "argument '", arg, "' is ", v,
         ", which an int64 tensor cannot hold (a C++ scalar "
         "does not promote a tensor: convert the tensor with .to(kFloat32) first)");
  }
  fail(op, "argument '", arg, "' is ", v, ", beyond the range of ", dtype,
       " (it would become inf)");
}

void check_dtype(const Tensor& t, DType want, const char* op, const char* arg) {
  TG_CHECK(t.dtype() == want, op, "argument '", arg, "' must be ", want, ", got ", t.dtype());
}

}  // namespace tg::detail
