#include "core/tensor.h"

namespace tg {

Tensor Tensor::empty_like_shape(const Shape& sizes, DType dtype, Device device, const char* op) {
  for (int64_t s : sizes)
    TG_CHECK(s >= 0, op, "sizes must be non-negative, got ", shape_str(sizes));
  const int64_t n = numel_of(sizes);
  TG_CHECK(n <= INT64_MAX / static_cast<int64_t>(dtype_size(dtype)), op, "shape ", shape_str(sizes),
           " of ", dtype, " needs more than 2^63 bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(n * dtype_size(dtype), device);
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void Tensor::undefined(const char* op) {
  fail(op,
       "the tensor is undefined (a default-constructed Tensor, or the grad() of a tensor "
       "that received no gradient)");
}

int64_t Tensor::size(int64_t d) const {
  const Shape& s = checked("size").sizes;
  return s[normalize_dim(d, static_cast<int64_t>(s.size()), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  const Shape& s = checked("stride").strides;
  return s[normalize_dim(d, static_cast<int64_t>(s.size()), "stride")];
}

bool Tensor::is_contiguous() const {
  checked("is_contiguous");
  if (numel() == 0) return true;  // no element to be out of place (PyTorch agrees)
  int64_t expected = 1;
  for (size_t i = sizes().size(); i-- > 0;) {
    if (sizes()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= sizes()[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  const TensorImpl& t = checked("raw_data");
  return static_cast<char*>(t.storage->data()) + t.offset * dtype_size(t.dtype);
}

}  // namespace tg
