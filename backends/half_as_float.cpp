#include "backends/half_as_float.h"

#include <vector>

#include "backends/strided_coalesce.h"

namespace tg {

namespace {
// v with size 1 on its broadcast (stride 0) dims: the elements it really holds.
View distinct(View v) {
  for (size_t d = 0; d < v.sizes.size(); ++d)
    if (v.strides[d] == 0) v.sizes[d] = 1;
  return v;
}

// Dense strides for sizes, laid out in the memory order of `like`: a transposed operand gets a
// transposed buffer, so the conversion reads and writes in sequence instead of gathering across
// rows.
Shape strides_in_order_of(const Shape& sizes, const Shape& like) {
  const std::vector<size_t> order = memory_order(like);
  Shape strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = order.size(); i-- > 0;) {
    strides[order[i]] = stride;
    stride *= sizes[order[i]];
  }
  return strides;
}
}  // namespace

View HalfAsFloat::buffer_like(const View& v) {
  View f = distinct(v);
  f.dtype = kFloat32;
  f.strides = strides_in_order_of(f.sizes, v.strides);
  buffers_.push_back(std::make_unique<Storage>(f.numel() * sizeof(float), device_));
  f.data = buffers_.back()->data();
  for (size_t d = 0; d < v.sizes.size(); ++d)
    if (v.strides[d] == 0) f.strides[d] = 0;
  f.sizes = v.sizes;
  return f;
}

View HalfAsFloat::in(const View& v) {
  if (!v.data || !is_half(v.dtype)) return v;
  View f = buffer_like(v);
  backend_.copy(distinct(v), distinct(f));
  return f;
}

View HalfAsFloat::out(const View& v) {
  if (!v.data || !is_half(v.dtype)) return v;
  View f = buffer_like(v);
  outputs_.emplace_back(f, v);
  return f;
}

View HalfAsFloat::inout(const View& v) {
  View f = in(v);
  if (f.data != v.data) outputs_.emplace_back(f, v);
  return f;
}

void HalfAsFloat::done() {
  for (const auto& [f, v] : outputs_) backend_.copy(distinct(f), distinct(v));
  outputs_.clear();
}

}  // namespace tg
