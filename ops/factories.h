// Tensor factories. Random ones draw from the Philox stream (DESIGN.md §5).
#pragma once
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"

namespace tg {

Tensor empty(const Shape& sizes, TensorOptions opts = {});
Tensor zeros(const Shape& sizes, TensorOptions opts = {});
Tensor ones(const Shape& sizes, TensorOptions opts = {});
Tensor full(const Shape& sizes, double value, TensorOptions opts = {});
Tensor scalar_tensor(double value, TensorOptions opts = {});  // 0-d
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// [0, end) and [start, end) by step, 1-D.
Tensor arange(double end, TensorOptions opts = {});
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = {});
// Uniform in (0, 1] and standard normal (Box-Muller over uniform pairs). Without a generator
// they use default_generator() (see manual_seed); each call advances its offset.
Tensor rand(const Shape& sizes, TensorOptions opts = {});
Tensor randn(const Shape& sizes, TensorOptions opts = {});
Tensor rand(const Shape& sizes, Generator& gen, TensorOptions opts = {});
Tensor randn(const Shape& sizes, Generator& gen, TensorOptions opts = {});

// Copies n values of type `src` from host memory into a new tensor of `sizes`.
Tensor from_buffer(const void* data, DType src, int64_t n, const Shape& sizes, TensorOptions opts);

namespace detail {
// from_buffer with its errors named for `op`.
Tensor from_host(const void* data, DType src, int64_t n, const Shape& sizes, TensorOptions opts,
                 const char* op);
}  // namespace detail

// tg::from_vector(values, shape, options): the dtype defaults to the vector's element type.
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& sizes) {
  return from_vector(values, sizes, TensorOptions(dtype_of<T>::value));
}
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& sizes, TensorOptions opts) {
  return detail::from_host(values.data(), dtype_of<T>::value, static_cast<int64_t>(values.size()),
                           sizes, opts, "from_vector");
}
Tensor from_vector(const std::vector<bool>& values, const Shape& sizes, TensorOptions opts = kBool);
Tensor from_vector(const std::vector<int>& values, const Shape& sizes, TensorOptions opts = kInt64);

}  // namespace tg
