#include "core/tensor.h"

namespace tg {

Tensor Tensor::empty_like_shape(const Shape& sizes, DType dtype, Device device) {
  for (int64_t s : sizes)
    TG_CHECK(s >= 0, "empty", "sizes must be non-negative, got ", shape_str(sizes));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(numel_of(sizes) * dtype_size(dtype), device);
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const { return sizes()[normalize_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[normalize_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes().size(); i-- > 0;) {
    if (sizes()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= sizes()[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * dtype_size(dtype());
}

}  // namespace tg
