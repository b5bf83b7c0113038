#include "autograd/autograd.h"
#include "ops/autocast.h"
#include "ops/linalg.h"
#include "ops/op_util.h"
#include "ops/reduce.h"

namespace tg {

namespace {

// Each matrix must have a unit stride on one of its two last dims for the GEMM.
Tensor gemm_ready(const Tensor& t) {
  View v = detail::view_of(t);
  return (gemm_row_major(v) || gemm_col_major(v)) ? t : t.contiguous();
}

// A transposed matrix (a weight used as W^T): its gradient is computed as the transpose of a
// row-major product, so that it has the operand's own layout and W's gradient arrives
// contiguous (no copy when it becomes W.grad).
bool transposed(const Tensor& t) {
  const View v = detail::view_of(t);
  return gemm_col_major(v) && !gemm_row_major(v);
}

// Both operands at least 2-D.
Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  const int64_t na = a.dim(), nb = b.dim();
  TG_CHECK(a.sizes()[na - 1] == b.sizes()[nb - 2], "matmul", "inner dims differ: self ",
           shape_str(a.sizes()), " @ other ", shape_str(b.sizes()), " (", a.sizes()[na - 1], " vs ",
           b.sizes()[nb - 2], ")");
  Shape ba(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  const int64_t m = a.sizes()[na - 2], k = a.sizes()[na - 1], n = b.sizes()[nb - 1];
  Shape sa = batch, sb = batch, sc = batch;
  sa.insert(sa.end(), {m, k});
  sb.insert(sb.end(), {k, n});
  sc.insert(sc.end(), {m, n});
  Tensor ea = gemm_ready(a.detach()).expand(sa), eb = gemm_ready(b.detach()).expand(sb);
  Tensor c = Tensor::empty_like_shape(sc, a.dtype(), a.device());
  if (c.numel())
    detail::backend_of(a).matmul(detail::view_of(ea), detail::view_of(eb), detail::view_of(c));
  if (any_requires_grad({a, b})) {
    SavedTensor sva(b.requires_grad() ? a : Tensor()), svb(a.requires_grad() ? b : Tensor());
    record("matmul", {a, b}, {&c},
           [sva, svb, ra = a.requires_grad(), rb = b.requires_grad(), sza = a.sizes(),
            szb = b.sizes(), ta = transposed(a), tb = transposed(b)](const std::vector<Tensor>& g) {
             std::vector<Tensor> r(2);
             const auto t = [](const Tensor& x) { return x.transpose(-1, -2); };
             if (ra) {
               const Tensor other = svb.unpack("matmul");
               r[0] = sum_to(ta ? t(matmul(other, t(g[0]))) : matmul(g[0], t(other)), sza);
             }
             if (rb) {
               const Tensor self = sva.unpack("matmul");
               r[1] = sum_to(tb ? t(matmul(t(g[0]), self)) : matmul(t(self), g[0]), szb);
             }
             return r;
           });
  }
  return c;
}

}  // namespace

Tensor matmul(const Tensor& self, const Tensor& other) {
  detail::check_defined(self, "matmul", "self");
  detail::check_defined(other, "matmul", "other");
  const Tensor a = detail::autocast_low(self), b = detail::autocast_low(other);
  detail::check_same_device(a, b, "matmul", "other");
  detail::check_same_dtype(a, b, "matmul", "other");
  detail::check_floating(a, "matmul", "self");
  TG_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul", "operands must be at least 1-D, got ",
           shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  Tensor x = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor y = b.dim() == 1 ? b.unsqueeze(-1) : b;
  Tensor c;
  if (x.dim() > 2 && y.dim() == 2 && x.sizes().back() > 0) {
    // (..., m, k) @ (k, n) is one GEMM over the folded rows, and its weight gradient one
    // GEMM too, instead of a batch of them and a sum over the batch.
    Shape out_shape(x.sizes().begin(), x.sizes().end() - 1);
    out_shape.push_back(y.sizes()[1]);
    c = matmul_nd(x.reshape({-1, x.sizes().back()}), y).reshape(out_shape);
  } else {
    c = matmul_nd(x, y);
  }
  if (b.dim() == 1) c = c.squeeze(-1);
  if (a.dim() == 1) c = c.squeeze(a.dim() == 1 && b.dim() == 1 ? 0 : -2);
  return c;
}

}  // namespace tg
