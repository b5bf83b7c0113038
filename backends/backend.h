// The small kernel interface every device implements. Backends see raw buffers, sizes and
// strides; never autograd. Ops validate and allocate, then call one of these.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/shape.h"

namespace tg {

// A strided window onto a device buffer: `data` points at element 0.
struct View {
  void* data = nullptr;
  DType dtype = kFloat32;
  Shape sizes;
  Shape strides;
  int64_t numel() const { return numel_of(sizes); }
};

enum class UnaryOp : uint8_t {
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Abs,
  Sign,
  Tanh,
  Sigmoid,
  Relu,
  Silu,
  Gelu,
  SiluGrad,
  GeluGrad,    // derivatives used by backward formulas
  Pow,         // x^param
  IsFinite,    // -> bool
  LogicalNot,  // bool -> bool
};

enum class BinaryOp : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Maximum,
  Minimum,
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,  // -> bool
  LogicalAnd,
  LogicalOr,  // bool
};

enum class ReduceOp : uint8_t { Sum, Max, Min };

// One AdamW update's scalars (models/optim.h); bias_correction_k = 1 - beta_k^step.
struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2;
};

struct SdpaParams;  // backends/sdpa_params.h
struct SdpaGradViews;

struct Backend {
  virtual ~Backend() = default;
  // dst = src (same sizes, any strides, converting dtype).
  virtual void copy(const View& src, const View& dst) = 0;
  virtual void fill(const View& dst, double value) = 0;
  // dst[i] = start + i * step over the row-major index of a contiguous dst.
  virtual void arange(const View& dst, double start, double step) = 0;
  // out = op(x); x is broadcast to out's sizes by its strides.
  virtual void unary(UnaryOp op, const View& x, const View& out, double param) = 0;
  // out = op(a, b); a and b carry strides that broadcast them to out's sizes.
  virtual void binary(BinaryOp op, const View& a, const View& b, const View& out) = 0;
  // out = cond ? a : b, all broadcast to out's sizes.
  virtual void where(const View& cond, const View& a, const View& b, const View& out) = 0;
  // out has x's rank with size 1 on the reduced dims. For Max/Min, `arg` (int64, out's
  // sizes, may have null data) receives the first extremum's row-major index within the
  // reduced dims. Each output is reduced serially, so results do not depend on threads.
  virtual void reduce(ReduceOp op, const View& x, const View& out, const View& arg) = 0;
  // c[..., m, n] = a[..., m, k] * b[..., k, n]; batch dims share c's sizes (stride 0 where
  // broadcast); each matrix of a and b has a unit stride on one of its two dims.
  virtual void matmul(const View& a, const View& b, const View& c) = 0;
  // Philox uniform (0, 1] / standard normal into a contiguous dst (DESIGN.md §5).
  virtual void rand_uniform(const View& dst, uint64_t seed, uint64_t offset) = 0;
  virtual void rand_normal(const View& dst, uint64_t seed, uint64_t offset) = 0;
  // out = keep ? x / (1 - p) : 0, keep = u(offset + n) > p for row-major index n.
  virtual void dropout(const View& x, const View& out, double p, uint64_t seed,
                       uint64_t offset) = 0;
  // Over the last dim of a contiguous x (rows, C): out = softmax(x), or log_softmax(x) when
  // `log`, as exp(x - lse) or x - lse with lse = m + log(sum(exp(x - m))), m the row max (0
  // when not finite): a row of -inf gives NaN, exactly as the composed formula does.
  virtual void softmax(const View& x, const View& out, bool log) = 0;
  // out[i, :] = weight[ids[i], :] (weight (R, D) contiguous, ids int64 contiguous).
  virtual void gather_rows(const View& weight, const View& ids, const View& out) = 0;
  // grad_weight[ids[i], :] += grad[i, :], in index order (deterministic).
  virtual void scatter_add_rows(const View& grad, const View& ids, const View& grad_weight) = 0;
  // Scaled-dot-product attention (DESIGN.md §4): forward writes out and stats; backward
  // rebuilds P from stats and writes dq, dk, dv (and the score gradient when asked).
  virtual void sdpa_forward(const SdpaParams& p) = 0;
  virtual void sdpa_backward(const SdpaParams& p, const View& dout, const SdpaGradViews& g) = 0;
  // RMSNorm over the last dim of a contiguous x (rows, D): rstd (rows) = 1/sqrt(mean(x^2) +
  // eps), y = x * rstd * w (w (D), or null data for no scale).
  virtual void rms_norm_forward(const View& x, const View& w, double eps, const View& y,
                                const View& rstd) = 0;
  // dx = rstd * g - x * rstd^3 * mean(g * x) with g = dy * w; dw (null data when not wanted)
  // = sum over rows of dy * x * rstd, summed in row order.
  virtual void rms_norm_backward(const View& dy, const View& x, const View& w, const View& rstd,
                                 const View& dx, const View& dw) = 0;
  // RoPE on a contiguous x (..., D): the pair (2i, 2i+1) of a row at position t (its index
  // along seq_dim) is rotated by the angle whose cos and sin are tables (S, D/2) [t, i].
  virtual void rope(const View& x, const View& cos, const View& sin, int64_t seq_dim,
                    const View& out) = 0;
  // SwiGLU on a contiguous x (rows, 2F): out (rows, F) = silu(x[:, :F]) * x[:, F:].
  virtual void swiglu_forward(const View& x, const View& out) = 0;
  // dx (rows, 2F) from dout (rows, F): [dout * up * silu'(gate), dout * silu(gate)].
  virtual void swiglu_backward(const View& dout, const View& x, const View& dx) = 0;
  // AdamW on contiguous p, g, m, v of one floating dtype, in place.
  virtual void adamw_step(const View& p, const View& g, const View& m, const View& v,
                          const AdamWStep& s) = 0;
  // Copies between this device and host memory (contiguous bytes).
  virtual void to_host(const void* src, void* dst, size_t bytes) = 0;
  virtual void from_host(const void* src, void* dst, size_t bytes) = 0;
};

// A matrix (the last two dims of v) the GEMM can read directly: unit stride along rows
// (row-major) or along columns (column-major), with a leading dimension that fits.
inline bool gemm_row_major(const View& v) {
  const size_t n = v.sizes.size();
  return v.strides[n - 1] == 1 && v.strides[n - 2] >= v.sizes[n - 1];
}
inline bool gemm_col_major(const View& v) {
  const size_t n = v.sizes.size();
  return v.strides[n - 2] == 1 && v.strides[n - 1] >= v.sizes[n - 2];
}

Backend& cpu_backend();
Backend& cuda_backend(int device = 0);  // throws "built without CUDA" in CPU-only builds
Backend& backend_for(Device d);

}  // namespace tg
