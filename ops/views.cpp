// Views share storage with their base; each records how to send its gradient back.
#include <algorithm>
#include <numeric>

#include "autograd/autograd.h"
#include "ops/factories.h"
#include "ops/op_util.h"
#include "ops/reduce.h"

namespace tg {

namespace {

Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

Shape infer_size(const Shape& want, int64_t numel, const char* op) {
  Shape s = want;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      TG_CHECK(infer < 0, op, "only one dimension can be -1, got ", shape_str(want));
      infer = static_cast<int64_t>(i);
    } else {
      TG_CHECK(s[i] >= 0, op, "invalid size ", s[i], " in ", shape_str(want));
      TG_CHECK(!__builtin_mul_overflow(known, s[i], &known), op, "shape ", shape_str(want),
               " has more elements than an int64 can count");
    }
  }
  if (infer >= 0) {
    TG_CHECK(known != 0 && numel % known == 0, op, "shape ", shape_str(want),
             " is invalid for a tensor of ", numel, " elements");
    s[infer] = numel / known;
  }
  TG_CHECK(numel_of(s) == numel, op, "shape ", shape_str(want), " is invalid for a tensor of ",
           numel, " elements");
  return s;
}

}  // namespace

Tensor Tensor::view(const Shape& want) const {
  detail::check_defined(*this, "view", "self");
  Shape s = infer_size(want, numel(), "view");
  TG_CHECK(is_contiguous(), "view", "tensor of shape ", shape_str(sizes()), " with strides ",
           shape_str(strides()), " is not contiguous; use reshape() (which copies)");
  Tensor out = make_view(*this, s, contiguous_strides(s), offset());
  record("view", {*this}, {&out}, [orig = sizes()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(orig)};
  });
  return out;
}

Tensor Tensor::reshape(const Shape& want) const {
  detail::check_defined(*this, "reshape", "self");
  const Shape s = infer_size(want, numel(), "reshape");  // errors named for reshape, not view
  return (is_contiguous() ? *this : contiguous()).view(s);
}

Tensor Tensor::flatten() const {
  detail::check_defined(*this, "flatten", "self");
  return reshape({numel()});
}

Tensor Tensor::permute(const Shape& dims) const {
  detail::check_defined(*this, "permute", "self");
  const int64_t nd = dim();
  TG_CHECK(static_cast<int64_t>(dims.size()) == nd, "permute", "expected ", nd,
           " dims for a tensor of shape ", shape_str(sizes()), ", got ", shape_str(dims));
  Shape s(nd), st(nd), inverse(nd);
  std::vector<bool> seen(nd, false);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = normalize_dim(dims[i], nd, "permute");
    TG_CHECK(!seen[d], "permute", "dims ", shape_str(dims), " repeat dim ", d);
    seen[d] = true;
    s[i] = sizes()[d];
    st[i] = strides()[d];
    inverse[d] = i;
  }
  Tensor out = make_view(*this, s, st, offset());
  record("permute", {*this}, {&out}, [inverse](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].permute(inverse)};
  });
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  detail::check_defined(*this, "transpose", "self");
  const int64_t nd = dim();
  Shape p(nd);
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[normalize_dim(d0, nd, "transpose")], p[normalize_dim(d1, nd, "transpose")]);
  return permute(p);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  detail::check_defined(*this, "slice", "self");
  d = normalize_dim(d, dim(), "slice");
  TG_CHECK(step > 0, "slice", "step must be positive, got ", step);
  const int64_t n = sizes()[d];
  auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clamp(start);
  end = std::max(start, clamp(end));
  Shape s = sizes(), st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] = strides()[d] * step;
  Tensor out = make_view(*this, s, st, offset() + start * strides()[d]);
  record("slice", {*this}, {&out},
         [orig = sizes(), d, start, end, step](const std::vector<Tensor>& g) {
           Tensor z = zeros(orig, g[0].options());
           z.slice(d, start, end, step).copy_(g[0].detach());
           // Linear in g: under create_graph its gradient slices the same part back out.
           record("slice_backward", {g[0]}, {&z},
                  [d, start, end, step](const std::vector<Tensor>& gg) {
                    return std::vector<Tensor>{gg[0].slice(d, start, end, step)};
                  });
           return std::vector<Tensor>{z};
         });
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  detail::check_defined(*this, "narrow", "self");
  d = normalize_dim(d, dim(), "narrow");
  const int64_t n = sizes()[d];
  if (start < 0) start += n;
  TG_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow", "start ", start,
           " and length ", length, " do not fit dim ", d, " of size ", n);
  return slice(d, start, start + length);
}

Tensor Tensor::expand(const Shape& want) const {
  detail::check_defined(*this, "expand", "self");
  const int64_t nd = static_cast<int64_t>(want.size()), lead = nd - dim();
  TG_CHECK(lead >= 0, "expand", "cannot expand shape ", shape_str(sizes()), " to ", shape_str(want),
           " (fewer dims)");
  Shape s(nd), st(nd, 0);
  for (int64_t i = 0; i < nd; ++i) {
    if (i < lead) {
      TG_CHECK(want[i] >= 0, "expand", "size -1 is not allowed for a new leading dim in ",
               shape_str(want));
      s[i] = want[i];
      continue;
    }
    int64_t have = sizes()[i - lead];
    int64_t w = want[i] == -1 ? have : want[i];
    TG_CHECK(have == w || have == 1, "expand", "cannot expand shape ", shape_str(sizes()), " to ",
             shape_str(want), " (dim ", i, ": ", have, " vs ", w, ")");
    s[i] = w;
    st[i] = (have == w) ? strides()[i - lead] : 0;
  }
  if (s == sizes()) return *this;
  Tensor out = make_view(*this, s, st, offset());
  record("expand", {*this}, {&out}, [orig = sizes()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], orig)};
  });
  return out;
}

Tensor Tensor::squeeze() const {
  detail::check_defined(*this, "squeeze", "self");
  Shape s;
  for (int64_t v : sizes())
    if (v != 1) s.push_back(v);
  return s.size() == sizes().size() ? *this : reshape_view_of_dims(s);
}

Tensor Tensor::squeeze(int64_t d) const {
  detail::check_defined(*this, "squeeze", "self");
  d = normalize_dim(d, dim(), "squeeze");
  if (sizes()[d] != 1) return *this;
  Shape s = sizes();
  s.erase(s.begin() + d);
  return reshape_view_of_dims(s);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  detail::check_defined(*this, "unsqueeze", "self");
  d = normalize_dim(d, dim() + 1, "unsqueeze");
  Shape s = sizes();
  s.insert(s.begin() + d, 1);
  return reshape_view_of_dims(s);
}

// Adds or drops size-1 dims only: always a view, whatever the strides.
Tensor Tensor::reshape_view_of_dims(const Shape& s) const {
  Shape st;
  size_t j = 0;
  for (int64_t v : s) {
    while (j < sizes().size() && sizes()[j] == 1 && v != 1) ++j;
    if (j < sizes().size() && sizes()[j] == v) {
      st.push_back(strides()[j]);
      ++j;
    } else {
      st.push_back(1);  // an inserted size-1 dim
    }
  }
  Tensor out = make_view(*this, s, st, offset());
  record("view", {*this}, {&out}, [orig = sizes()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(orig)};
  });
  return out;
}

Tensor Tensor::clone() const {
  detail::check_defined(*this, "clone", "self");
  Tensor out = Tensor::empty_like_shape(sizes(), dtype(), device());
  if (numel()) detail::backend_of(*this).copy(detail::view_of(*this), detail::view_of(out));
  record("clone", {*this}, {&out}, [](const std::vector<Tensor>& g) { return g; });
  return out;
}

Tensor Tensor::contiguous() const {
  detail::check_defined(*this, "contiguous", "self");
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::to(DType t) const {
  detail::check_defined(*this, "to", "self");
  if (t == dtype()) return *this;
  Tensor out = Tensor::empty_like_shape(sizes(), t, device());
  if (numel()) detail::backend_of(*this).copy(detail::view_of(*this), detail::view_of(out));
  if (is_floating(t) && is_floating(dtype())) {
    record("to", {*this}, {&out}, [orig = dtype()](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].to(orig)};
    });
  }
  return out;
}

Tensor Tensor::to(Device d) const {
  detail::check_defined(*this, "to", "self");
  if (d == device()) return *this;
  Tensor src = contiguous();
  Tensor out = Tensor::empty_like_shape(sizes(), dtype(), d);
  size_t bytes = numel() * dtype_size(dtype());
  if (d.is_cpu()) {
    backend_for(device()).to_host(src.raw_data(), out.raw_data(), bytes);
  } else {
    Tensor host = src.to(kCPU);
    backend_for(d).from_host(host.raw_data(), out.raw_data(), bytes);
  }
  record("to_device", {*this}, {&out}, [orig = device()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].to(orig)};
  });
  return out;
}

namespace detail {
Tensor readable(const Tensor& t, DType dtype) {
  TG_CHECK(t.defined(), "to_vector",
           "the tensor is undefined (e.g. the grad() of a tensor that "
           "received no gradient)");
  NoGradGuard ng;
  return t.detach().to(kCPU).to(dtype).contiguous();
}
}  // namespace detail

}  // namespace tg
