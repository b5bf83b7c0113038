// In-place ops for optimizers and initialisation. They are not recorded on the tape; each
// bumps the storage's version so a backward that saved the old values refuses to run.
#include "autograd/autograd.h"
#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/host_values.h"
#include "ops/op_util.h"

namespace tg {

namespace {

void check_inplace(const Tensor& self, const char* op) {
  detail::check_defined(self, op, "self");
  TG_CHECK(!(grad_enabled() && self.requires_grad()), op,
           "in-place op on a tensor that requires grad (shape ", shape_str(self.sizes()),
           ") while grad mode is on; wrap optimizer and initialisation code in tg::NoGradGuard");
  // A dim of stride 0 (an expand) makes several elements one memory location: writing them
  // would apply the op once per alias (x.expand(...).add_(1) adding 2 to x). PyTorch refuses
  // the same case; other overlaps cannot be made with tapegrad's views.
  for (int64_t d = 0; d < self.dim(); ++d) {
    TG_CHECK(self.strides()[d] != 0 || self.sizes()[d] <= 1, op, "argument 'self' of shape ",
             shape_str(self.sizes()), " has stride 0 in dim ", d,
             " (an expanded view): more than one of its elements is one memory location, so "
             "it cannot be written in place; clone() it first");
  }
}

// self = op(self, other), other broadcast to self's shape.
Tensor& binary_inplace(Tensor& self, BinaryOp op, const Tensor& other, const char* name) {
  check_inplace(self, name);
  detail::check_defined(other, name, "other");
  detail::check_same_device(self, other, name, "other");
  detail::check_same_dtype(self, other, name, "other");
  TG_CHECK(scalar::accepts(op, self.dtype()), name, "argument 'self' has dtype ", self.dtype(),
           ", which this op does not take");
  Shape shape = broadcast_shapes(self.sizes(), other.sizes(), name);
  TG_CHECK(shape == self.sizes(), name, "argument 'other' of shape ", shape_str(other.sizes()),
           " must broadcast to self's shape ", shape_str(self.sizes()));
  if (self.numel()) {
    detail::backend_of(self).binary(op, detail::view_of(self), detail::view_as(other, shape),
                                    detail::view_of(self));
  }
  self.impl()->storage->bump_version();
  return self;
}

}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  if (alpha == 1.0) return binary_inplace(*this, BinaryOp::Add, other, "add_");
  detail::check_defined(*this, "add_", "self");
  detail::check_defined(other, "add_", "other");
  detail::check_scalar(alpha, dtype(), "add_", "alpha");
  NoGradGuard ng;
  return binary_inplace(*this, BinaryOp::Add, mul(other.detach(), alpha), "add_");
}
Tensor& Tensor::add_(double value) {
  detail::check_defined(*this, "add_", "self");
  detail::check_scalar(value, dtype(), "add_", "value");
  return binary_inplace(*this, BinaryOp::Add, scalar_tensor(value, options()), "add_");
}
Tensor& Tensor::mul_(const Tensor& other) {
  return binary_inplace(*this, BinaryOp::Mul, other, "mul_");
}
Tensor& Tensor::mul_(double value) {
  detail::check_defined(*this, "mul_", "self");
  detail::check_scalar(value, dtype(), "mul_", "value");
  return binary_inplace(*this, BinaryOp::Mul, scalar_tensor(value, options()), "mul_");
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  detail::check_defined(src, "copy_", "src");
  Shape shape = broadcast_shapes(sizes(), src.sizes(), "copy_");
  TG_CHECK(shape == sizes(), "copy_", "argument 'src' of shape ", shape_str(src.sizes()),
           " must broadcast to self's shape ", shape_str(sizes()));
  Tensor s = src.detach().to(device());
  if (numel()) detail::backend_of(*this).copy(detail::view_as(s, shape), detail::view_of(*this));
  impl()->storage->bump_version();
  return *this;
}

Tensor& Tensor::index_copy_(int64_t dim, const Tensor& index, const Tensor& source) {
  constexpr const char* kOp = "index_copy_";
  check_inplace(*this, kOp);
  detail::check_defined(index, kOp, "index");
  detail::check_defined(source, kOp, "source");
  detail::check_dtype(index, kInt64, kOp, "index");
  TG_CHECK(index.dim() == 1, kOp, "argument 'index' must be 1-D, got shape ",
           shape_str(index.sizes()));
  detail::check_same_device(*this, index, kOp, "index");
  detail::check_same_device(*this, source, kOp, "source");
  detail::check_same_dtype(*this, source, kOp, "source");
  TG_CHECK(this->dim() >= 1, kOp, "argument 'self' must have at least 1 dim, got a scalar");
  const int64_t d = normalize_dim(dim, this->dim(), kOp);
  Shape want = sizes();
  want[static_cast<size_t>(d)] = index.numel();
  TG_CHECK(source.sizes() == want, kOp, "argument 'source' must have shape ", shape_str(want),
           " (self's with index's ", index.numel(), " entries along dim ", d, "), got ",
           shape_str(source.sizes()));
  // Checked on the host: read from a device once per version of the indices (a decoding
  // step writes every layer's cache through the same slots).
  const std::vector<int64_t> at = detail::host_int64(index);
  std::vector<bool> seen(static_cast<size_t>(size(d)), false);
  for (size_t i = 0; i < at.size(); ++i) {
    TG_CHECK(at[i] >= 0 && at[i] < size(d), kOp, "argument 'index' holds ", at[i], " at ", i,
             ", outside [0, ", size(d), ")");
    TG_CHECK(!seen[static_cast<size_t>(at[i])], kOp, "argument 'index' holds ", at[i],
             " twice: which source row would win is undefined");
    seen[static_cast<size_t>(at[i])] = true;
  }
  if (at.empty() || numel() == 0) return *this;
  if (d == 0 && is_contiguous()) {
    const int64_t width = numel() / size(0);
    const Tensor src = source.detach().contiguous(), ids = index.contiguous();
    detail::backend_of(*this).scatter_rows(
        View{src.raw_data(), dtype(), {src.size(0), width}, {width, 1}}, detail::view_of(ids),
        View{raw_data(), dtype(), {size(0), width}, {width, 1}});
    impl()->storage->bump_version();
    return *this;
  }
  for (size_t i = 0; i < at.size(); ++i)
    narrow(d, at[i], 1).copy_(source.narrow(d, static_cast<int64_t>(i), 1));
  return *this;
}

namespace {

// self = value, with errors named for `op` (fill_ or zero_).
Tensor& fill_inplace(Tensor& self, double value, const char* op) {
  check_inplace(self, op);
  detail::check_scalar(value, self.dtype(), op, "value");
  if (self.numel()) detail::backend_of(self).fill(detail::view_of(self), value);
  self.impl()->storage->bump_version();
  return self;
}

}  // namespace

Tensor& Tensor::fill_(double value) { return fill_inplace(*this, value, "fill_"); }
Tensor& Tensor::zero_() { return fill_inplace(*this, 0.0, "zero_"); }

}  // namespace tg
