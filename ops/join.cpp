#include "ops/join.h"

#include "autograd/autograd.h"
#include "autograd/grad_mode.h"
#include "ops/op_util.h"

namespace tg {

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  TG_CHECK(!ts.empty(), "cat", "expected a non-empty list of tensors");
  const Tensor& first = ts[0];
  detail::check_defined(first, "cat", "tensors[0]");
  TG_CHECK(first.dim() > 0, "cat", "zero-dimensional tensors cannot be concatenated");
  const int64_t d = normalize_dim(dim, first.dim(), "cat");
  Shape out_shape = first.sizes();
  out_shape[d] = 0;
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    std::string arg = "tensors[" + std::to_string(i) + "]";
    detail::check_defined(t, "cat", arg.c_str());
    detail::check_same_device(first, t, "cat", arg.c_str());
    detail::check_same_dtype(first, t, "cat", arg.c_str());
    bool same = t.dim() == first.dim();
    for (int64_t k = 0; same && k < t.dim(); ++k) same = k == d || t.sizes()[k] == first.sizes()[k];
    TG_CHECK(same, "cat", "argument '", arg, "' has shape ", shape_str(t.sizes()), ", expected ",
             shape_str(first.sizes()), " except in dim ", d);
    lengths.push_back(t.sizes()[d]);
    out_shape[d] += t.sizes()[d];
  }
  Tensor out = Tensor::empty_like_shape(out_shape, first.dtype(), first.device());
  int64_t at = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    Tensor part = out.detach().narrow(d, at, lengths[i]);
    if (part.numel()) detail::backend_of(out).copy(detail::view_of(ts[i]), detail::view_of(part));
    at += lengths[i];
  }
  record("cat", ts, {&out}, [d, lengths](const std::vector<Tensor>& g) {
    std::vector<Tensor> r;
    int64_t at = 0;
    for (int64_t len : lengths) {
      r.push_back(g[0].narrow(d, at, len));
      at += len;
    }
    return r;
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  TG_CHECK(!ts.empty(), "stack", "expected a non-empty list of tensors");
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string arg = "tensors[" + std::to_string(i) + "]";
    detail::check_defined(ts[i], "stack", arg.c_str());
    detail::check_same_dtype(ts[0], ts[i], "stack", arg.c_str());
    detail::check_same_device(ts[0], ts[i], "stack", arg.c_str());
  }
  const int64_t d = normalize_dim(dim, ts[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < ts.size(); ++i) {
    TG_CHECK(ts[i].sizes() == ts[0].sizes(), "stack", "argument 'tensors[", i, "]' has shape ",
             shape_str(ts[i].sizes()), ", expected ", shape_str(ts[0].sizes()));
    parts.push_back(ts[i].unsqueeze(d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  detail::check_defined(x, "split", "self");
  const int64_t d = normalize_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    TG_CHECK(s >= 0, "split", "split sizes must be non-negative, got ", shape_str(sizes));
    total += s;
  }
  TG_CHECK(total == x.sizes()[d], "split", "split sizes ", shape_str(sizes), " sum to ", total,
           ", expected ", x.sizes()[d], " (dim ", d, " of shape ", shape_str(x.sizes()), ")");
  // The parts are views of x; one node sends all their gradients back as one cat (each part's
  // gradient copied once) where a node per part would build a zero tensor of x's size per part
  // and add them up (the transformer splits its packed q/k/v projection this way every layer).
  std::vector<Tensor> out;
  {
    NoGradGuard views_only;
    int64_t at = 0;
    for (int64_t s : sizes) {
      out.push_back(x.narrow(d, at, s));
      at += s;
    }
  }
  std::vector<Tensor*> parts;
  parts.reserve(out.size());
  for (Tensor& t : out) parts.push_back(&t);
  record("split", {x}, parts,
         [d](const std::vector<Tensor>& g) { return std::vector<Tensor>{cat(g, d)}; });
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  detail::check_defined(x, "split", "self");
  TG_CHECK(split_size > 0, "split", "split_size must be positive, got ", split_size);
  const int64_t n = x.sizes()[normalize_dim(dim, x.dim(), "split")];
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  if (sizes.empty()) sizes.push_back(0);  // an empty dim splits into one empty part (PyTorch)
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  detail::check_defined(x, "chunk", "self");
  TG_CHECK(chunks > 0, "chunk", "chunks must be positive, got ", chunks);
  const int64_t n = x.sizes()[normalize_dim(dim, x.dim(), "chunk")];
  return split(x, std::max<int64_t>(1, n / chunks + (n % chunks != 0)), dim);
}

}  // namespace tg
