#include "backends/half_as_float.h"

namespace tg {

namespace {
// v with size 1 on its broadcast (stride 0) dims: the elements it really holds.
View distinct(View v) {
  for (size_t d = 0; d < v.sizes.size(); ++d)
    if (v.strides[d] == 0) v.sizes[d] = 1;
  return v;
}
}  // namespace

View HalfAsFloat::buffer_like(const View& v) {
  View f = distinct(v);
  f.dtype = kFloat32;
  f.strides = contiguous_strides(f.sizes);
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
