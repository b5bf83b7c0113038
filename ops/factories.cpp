#include "ops/factories.h"

#include <cmath>

#include "ops/op_util.h"

namespace tg {
using detail::view_of;

namespace {
Tensor finish(Tensor t, const TensorOptions& opts) {
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

// A new tensor of `sizes`, its size errors named for the factory `op` called.
Tensor fresh(const Shape& sizes, const TensorOptions& opts, const char* op) {
  return Tensor::empty_like_shape(sizes, opts.dtype(), opts.device(), op);
}

Tensor filled(const Shape& sizes, double value, const TensorOptions& opts, const char* op) {
  detail::check_scalar(value, opts.dtype(), op, "value");
  Tensor t = fresh(sizes, opts, op);
  if (t.numel()) detail::backend_of(t).fill(view_of(t), value);
  return finish(t, opts);
}
}  // namespace

Tensor empty(const Shape& sizes, TensorOptions opts) {
  return finish(fresh(sizes, opts, "empty"), opts);
}

Tensor full(const Shape& sizes, double value, TensorOptions opts) {
  return filled(sizes, value, opts, "full");
}
Tensor zeros(const Shape& sizes, TensorOptions opts) { return filled(sizes, 0.0, opts, "zeros"); }
Tensor ones(const Shape& sizes, TensorOptions opts) { return filled(sizes, 1.0, opts, "ones"); }
Tensor scalar_tensor(double value, TensorOptions opts) {
  return filled({}, value, opts, "scalar_tensor");
}
Tensor zeros_like(const Tensor& t) {
  detail::check_defined(t, "zeros_like", "self");
  return filled(t.sizes(), 0.0, t.options(), "zeros_like");
}
Tensor ones_like(const Tensor& t) {
  detail::check_defined(t, "ones_like", "self");
  return filled(t.sizes(), 1.0, t.options(), "ones_like");
}
Tensor full_like(const Tensor& t, double value) {
  detail::check_defined(t, "full_like", "self");
  return filled(t.sizes(), value, t.options(), "full_like");
}

Tensor arange(double end, TensorOptions opts) { return arange(0.0, end, 1.0, opts); }

Tensor arange(double start, double end, double step, TensorOptions opts) {
  TG_CHECK(step != 0.0, "arange", "step must be non-zero");
  TG_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange",
           "start, end and step must be finite, got ", start, ", ", end, " and ", step);
  const double n = std::ceil((end - start) / step);
  TG_CHECK(n < 0x1p62, "arange", "start ", start, ", end ", end, " and step ", step, " give ", n,
           " elements, more than a tensor can hold");
  const int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
  Tensor t = fresh({count}, opts, "arange");
  if (count) detail::backend_of(t).arange(view_of(t), start, step);
  return finish(t, opts);
}

Tensor rand(const Shape& sizes, Generator& gen, TensorOptions opts) {
  TG_CHECK(is_floating(opts.dtype()), "rand", "dtype must be floating, got ", opts.dtype());
  Tensor t = fresh(sizes, opts, "rand");
  uint64_t off = gen.take(static_cast<uint64_t>(t.numel()));
  if (t.numel()) detail::backend_of(t).rand_uniform(view_of(t), gen.seed, off);
  return finish(t, opts);
}

Tensor randn(const Shape& sizes, Generator& gen, TensorOptions opts) {
  TG_CHECK(is_floating(opts.dtype()), "randn", "dtype must be floating, got ", opts.dtype());
  Tensor t = fresh(sizes, opts, "randn");
  uint64_t off = gen.take(2 * static_cast<uint64_t>(t.numel()));
  if (t.numel()) detail::backend_of(t).rand_normal(view_of(t), gen.seed, off);
  return finish(t, opts);
}

Tensor rand(const Shape& sizes, TensorOptions opts) {
  return rand(sizes, default_generator(), opts);
}
Tensor randn(const Shape& sizes, TensorOptions opts) {
  return randn(sizes, default_generator(), opts);
}

Tensor from_buffer(const void* data, DType src, int64_t n, const Shape& sizes, TensorOptions opts) {
  return detail::from_host(data, src, n, sizes, opts, "from_buffer");
}

Tensor detail::from_host(const void* data, DType src, int64_t n, const Shape& sizes,
                         TensorOptions opts, const char* op) {
  TG_CHECK(n == numel_of(sizes), op, "got ", n, " values for shape ", shape_str(sizes),
           " (expected ", numel_of(sizes), ")");
  TG_CHECK(data != nullptr || n == 0, op, "argument 'data' is a null pointer, expected ", n,
           " values");
  Tensor host = Tensor::empty_like_shape(sizes, src, kCPU, op);
  if (n) cpu_backend().from_host(data, host.raw_data(), n * dtype_size(src));
  Tensor out = host.to(opts.dtype()).to(opts.device());
  if (out.is_same(host)) out = host;
  return finish(out, opts);
}

Tensor from_vector(const std::vector<bool>& values, const Shape& sizes, TensorOptions opts) {
  std::vector<uint8_t> bytes(values.begin(), values.end());
  return detail::from_host(bytes.data(), kBool, static_cast<int64_t>(bytes.size()), sizes, opts,
                           "from_vector");
}

Tensor from_vector(const std::vector<int>& values, const Shape& sizes, TensorOptions opts) {
  std::vector<int64_t> wide(values.begin(), values.end());
  return detail::from_host(wide.data(), kInt64, static_cast<int64_t>(wide.size()), sizes, opts,
                           "from_vector");
}

}  // namespace tg
