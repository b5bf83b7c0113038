// Every public op under bad input, table-driven like PyTorch's OpInfo error inputs: each row
// names the op, what is wrong, the call, and a phrase its "[op]" message must hold. Rows come
// from two places: generated from the op table (op_table.h) for each of its rows (undefined
// inputs, int64 inputs, mixed floating dtypes, shapes that do not broadcast, empty inputs), and
// written here for what a table row cannot say (wrong ranks and sizes, non-finite and
// out-of-range scalars, options) and for the public API outside the table: the Tensor methods,
// the factories, the backward kernels, the optimizer kernels. A coverage check fails when a
// public op or a Tensor method has no row. Mixed devices are in test_cuda.cpp (they need a GPU).
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "op_table.h"
#include "ops/optimizer_ops.h"
#include "public_api.h"

using namespace tg;
using optable::Inputs;
using optable::OpInfo;

namespace {

struct ErrorInput {
  std::string called;  // the public function or method called
  std::string op;      // its message starts with "[op]": the called one's name, or the shared
                       // check's that refuses (sdpa_forward validates as sdpa)
  std::string what;    // what is wrong with the input
  std::function<void()> call;
  std::string phrase;  // part of the message
};

// A row: ROW("op", "what", "phrase", expression), or ROW_AS("called", "op", ...) where the
// message names another op than the one called.
#define ROW_AS(called, op, what, phrase, ...) \
  rows.push_back(ErrorInput{called, op, what, [=]() mutable { (void)(__VA_ARGS__); }, phrase})
#define ROW(op, what, phrase, ...) ROW_AS(op, op, what, phrase, __VA_ARGS__)

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

Tensor ids(const std::vector<int64_t>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return from_vector(v, {n});
}

// The optimizer kernels on tensors of any value category (they take their state by reference).
int adamw(Tensor p, const Tensor& g, Tensor m, Tensor v) {
  adamw_update_(p, g, m, v, AdamWStep{1e-3, 0.9, 0.999, 1e-8, 0, 1, 1});
  return 0;
}
int sum_of_squares(Tensor acc, const Tensor& x) {
  add_sum_of_squares_(acc, x);
  return 0;
}

// The op-table row's inputs in float32 at the given shapes (prepared as the row prepares them).
Inputs inputs_of(const OpInfo& op, const std::vector<Shape>& shapes, DType dtype = kFloat32) {
  Inputs in;
  uint64_t seed = 5;
  for (const Shape& s : shapes) in.push_back(tgtest::rnd(s, seed++, op.lo, op.hi).to(dtype));
  return op.prepare ? op.prepare(in) : in;
}

std::string error_name(const OpInfo& op) { return op.error_op.empty() ? op.name : op.error_op; }

// Rows generated from the op table.
void generated_rows(std::vector<ErrorInput>& rows) {
  for (const OpInfo& op : optable::op_table()) {
    const std::string name = error_name(op);
    const auto call = op.call;
#define ROW_OF_TABLE(what, phrase, ...) \
  ROW_AS(op.name, name, op.label() + what, phrase, __VA_ARGS__)
    ROW_OF_TABLE(": undefined inputs", "undefined", call(Inputs(op.shapes.size())));
    if (op.floating_only) {
      Inputs ints;
      for (const Shape& s : op.shapes) ints.push_back(zeros(s, kInt64));
      ROW_OF_TABLE(": int64 inputs", "int64", call(ints));
    }
    // Ops that take several floating tensors and do not promote them refuse a float64 beside
    // float32 (the elementwise ones promote, as PyTorch does: the "mixed floating dtypes" case).
    if (op.shapes.size() >= 2 && !op.elementwise) {
      Inputs in = inputs_of(op, op.shapes);
      in[1] = in[1].to(kFloat64);
      ROW_OF_TABLE(": a float64 input beside float32", "float64", call(in));
    }
    if (op.shapes.size() == 2 && op.elementwise) {
      ROW_OF_TABLE(": shapes that do not broadcast", "not broadcastable",
                   call(inputs_of(op, {{3, 4}, {5}})));
    }
#undef ROW_OF_TABLE
  }
}

// Rows written by hand, op by op.
void written_rows(std::vector<ErrorInput>& rows) {
  Tensor U, f = ones({2, 3}), d = ones({2, 3}, kFloat64), i = zeros({2, 3}, kInt64);
  Tensor b = gt(f, 0.0), s0 = scalar_tensor(1.0), e = ones({0, 3});
  Tensor leaf = ones({2}).requires_grad_();

  // --- the Tensor's methods on an undefined tensor
  ROW("sizes", "undefined", "undefined", U.sizes());
  ROW("shape", "undefined", "undefined", U.shape());
  ROW("strides", "undefined", "undefined", U.strides());
  ROW("offset", "undefined", "undefined", U.offset());
  ROW("dim", "undefined", "undefined", U.dim());
  ROW("numel", "undefined", "undefined", U.numel());
  ROW("dtype", "undefined", "undefined", U.dtype());
  ROW("device", "undefined", "undefined", U.device());
  ROW_AS("options", "dtype", "undefined", "undefined", U.options());
  ROW("raw_data", "undefined", "undefined", U.raw_data());
  ROW("data_ptr", "undefined", "undefined", U.data_ptr<float>());
  ROW("requires_grad", "undefined", "undefined", U.requires_grad());
  ROW("requires_grad_", "undefined", "undefined", U.requires_grad_());
  ROW("grad", "undefined", "undefined", U.grad());
  ROW("zero_grad", "undefined", "undefined", (U.zero_grad(), 0));
  ROW("set_grad", "undefined", "undefined", (U.set_grad(f), 0));
  ROW("detach", "undefined", "undefined", U.detach());
  ROW("is_leaf", "undefined", "undefined", U.is_leaf());
  ROW("grad_fn", "undefined", "undefined", U.grad_fn());
  ROW("backward", "undefined", "undefined", (U.backward(), 0));
  ROW("view", "undefined", "undefined", U.view({1}));
  ROW("reshape", "undefined", "undefined", U.reshape({1}));
  ROW("permute", "undefined", "undefined", U.permute({0}));
  ROW("transpose", "undefined", "undefined", U.transpose(0, 1));
  ROW("slice", "undefined", "undefined", U.slice(0, 0, 1));
  ROW("narrow", "undefined", "undefined", U.narrow(0, 0, 1));
  ROW("expand", "undefined", "undefined", U.expand({2}));
  ROW("squeeze", "undefined", "undefined", U.squeeze());
  ROW("squeeze", "undefined, one dim", "undefined", U.squeeze(0));
  ROW("unsqueeze", "undefined", "undefined", U.unsqueeze(0));
  ROW("flatten", "undefined", "undefined", U.flatten());
  ROW_AS("reshape_view_of_dims", "sizes", "undefined", "undefined", U.reshape_view_of_dims({1}));
  ROW("contiguous", "undefined", "undefined", U.contiguous());
  ROW("is_contiguous", "undefined", "undefined", U.is_contiguous());
  ROW("clone", "undefined", "undefined", U.clone());
  ROW("to", "undefined, to a dtype", "undefined", U.to(kFloat64));
  ROW("to", "undefined, to a device", "undefined", U.to(kCPU));
  ROW("size", "undefined", "undefined", U.size(0));
  ROW("stride", "undefined", "undefined", U.stride(0));
  ROW("add_", "undefined self", "'self' is an undefined", U.add_(f));
  ROW("add_", "undefined other", "'other' is an undefined", Tensor(f.clone()).add_(U));
  ROW("add_", "undefined self, scalar", "undefined", U.add_(1.0));
  ROW("mul_", "undefined self", "undefined", U.mul_(f));
  ROW("mul_", "undefined self, scalar", "undefined", U.mul_(2.0));
  ROW("copy_", "undefined src", "'src' is an undefined", Tensor(f.clone()).copy_(U));
  ROW("fill_", "undefined", "undefined", U.fill_(1.0));
  ROW("zero_", "undefined", "undefined", U.zero_());
  ROW("to_vector", "undefined", "undefined", U.to_vector<float>());
  ROW("item", "undefined", "undefined", U.item<float>());

  // --- the Tensor's methods, bad arguments
  ROW("view", "a size below -1", "invalid size -2", f.view({-2, 3}));
  ROW("view", "the wrong element count", "invalid for a tensor of 6", f.view({4, 2}));
  ROW("view", "a non-contiguous tensor", "not contiguous", f.transpose(0, 1).view({6}));
  ROW("reshape", "two inferred dims", "only one dimension", f.reshape({-1, -1}));
  ROW("reshape", "the wrong element count", "invalid for a tensor of 6", f.reshape({7}));
  ROW("view", "a shape whose element count overflows int64", "more elements than an int64",
      e.view({int64_t(1) << 40, int64_t(1) << 40, 0, 3}));
  ROW("permute", "too few dims", "expected 2 dims", f.permute({0}));
  ROW("permute", "a repeated dim", "repeat", f.permute({0, 0}));
  ROW("permute", "a dim out of range", "out of range", f.permute({0, 2}));
  ROW("transpose", "a dim out of range", "out of range", f.transpose(0, 5));
  ROW("slice", "a dim out of range", "out of range", f.slice(2, 0, 1));
  ROW("slice", "a zero step", "step", f.slice(0, 0, 1, 0));
  ROW("narrow", "a negative length", "do not fit", f.narrow(0, 0, -1));
  ROW("narrow", "past the end", "do not fit", f.narrow(1, 2, 2));
  ROW("expand", "fewer dims", "fewer dims", f.expand({3}));
  ROW("expand", "a non-1 dim to another size", "cannot expand", f.expand({2, 4}));
  ROW("expand", "-1 for a new leading dim", "not allowed", f.expand({-1, 2, 3}));
  ROW("squeeze", "a dim out of range", "out of range", f.squeeze(4));
  ROW("unsqueeze", "a dim out of range", "out of range", f.unsqueeze(4));
  ROW("size", "a dim out of range", "out of range", f.size(-3));
  ROW("stride", "a dim out of range", "out of range", f.stride(2));
  ROW("requires_grad_", "an int64 tensor", "int64", Tensor(i.clone()).requires_grad_());
  ROW("requires_grad_", "off on a non-leaf", "non-leaf", mul(leaf, 2.0).requires_grad_(false));
  ROW("set_grad", "a gradient of another shape", "must match", (leaf.set_grad(f), 0));
  ROW("set_grad", "a gradient of another dtype", "must match",
      (leaf.set_grad(ones({2}, kFloat64)), 0));
  ROW("data_ptr", "the wrong element type", "float32", f.data_ptr<double>());
  ROW("item", "more than one element", "one element", f.item<float>());
  ROW("backward", "a non-scalar output without a gradient", "scalar output",
      (mul(leaf, 2.0).backward(), 0));
  ROW("backward", "a gradient of the wrong shape", "expected [2]",
      (mul(leaf, 2.0).backward(ones({3})), 0));
  ROW("backward", "an output that requires no grad", "does not require grad",
      (ones({1}).backward(), 0));
  ROW("add_", "a dtype other than self's", "dtype float64", Tensor(f.clone()).add_(d));
  ROW("add_", "a shape that does not broadcast to self", "must broadcast",
      Tensor(f.clone()).add_(ones({4, 2, 3})));
  ROW("add_", "a bool tensor", "bool", Tensor(b.clone()).add_(1.0));
  ROW("add_", "0.5 into an int64 tensor", "cannot hold", Tensor(i.clone()).add_(0.5));
  ROW("add_", "alpha 0.5 for int64 tensors", "cannot hold",
      Tensor(i.clone()).add_(Tensor(i.clone()), 0.5));
  ROW("add_", "an expanded (stride-0) self", "stride 0",
      ones({3}).view({1, 3}).expand({2, 3}).add_(1.0));
  ROW("add_", "a leaf that requires grad, grad mode on", "requires grad", Tensor(leaf).add_(1.0));
  ROW("mul_", "shapes that do not broadcast", "not broadcastable",
      Tensor(f.clone()).mul_(ones({3, 2})));
  ROW("mul_", "0.5 into an int64 tensor", "cannot hold", Tensor(i.clone()).mul_(0.5));
  ROW("copy_", "a shape that does not broadcast to self", "must broadcast",
      Tensor(f.clone()).copy_(ones({4, 2, 3})));
  ROW("copy_", "an expanded (stride-0) self", "stride 0",
      ones({3}).view({1, 3}).expand({2, 3}).copy_(ones({2, 3})));
  ROW("index_copy_", "an undefined index", "'index' is an undefined",
      Tensor(f.clone()).index_copy_(0, U, f));
  ROW("index_copy_", "a 2-D index", "must be 1-D",
      Tensor(f.clone()).index_copy_(0, zeros({1, 1}, kInt64), f));
  ROW("index_copy_", "an index past the dim", "outside",
      Tensor(f.clone()).index_copy_(0, full({1}, 9, kInt64), f.narrow(0, 0, 1)));
  ROW("index_copy_", "a source of the wrong shape", "must have shape",
      Tensor(f.clone()).index_copy_(0, zeros({1}, kInt64), f));
  ROW("fill_", "NaN into an int64 tensor", "cannot hold", Tensor(i.clone()).fill_(kNaN));
  ROW("fill_", "inf into an int64 tensor", "cannot hold", Tensor(i.clone()).fill_(kInf));
  ROW("fill_", "1e30 into an int64 tensor", "cannot hold", Tensor(i.clone()).fill_(1e30));
  ROW("fill_", "1e10 into a float16 tensor", "beyond the range of float16",
      ones({2}, kFloat16).fill_(1e10));
  ROW("zero_", "an expanded (stride-0) self", "stride 0",
      ones({3}).view({1, 3}).expand({2, 3}).zero_());

  // --- factories
  ROW("empty", "a negative size", "non-negative", empty({-1}));
  ROW_AS("empty", "numel", "an element count beyond int64", "int64",
         empty({int64_t(1) << 40, int64_t(1) << 40}));
  ROW("empty", "a byte count beyond 2^63", "2^63", empty({int64_t(1) << 31, int64_t(1) << 31}));
  ROW_AS("empty", "alloc", "more memory than there is", "out of memory", empty({int64_t(1) << 50}));
  ROW("full", "NaN for int64", "cannot hold", full({2}, kNaN, kInt64));
  ROW("full", "0.5 for int64", "cannot hold", full({2}, 0.5, kInt64));
  ROW("full", "1e300 for float32", "beyond the range of float32", full({2}, 1e300));
  ROW("full", "a negative size", "non-negative", full({-2}, 1.0));
  ROW("zeros", "a negative size", "non-negative", zeros({-2}));
  ROW("ones", "a negative size", "non-negative", ones({2, -1}));
  ROW("scalar_tensor", "inf for int64", "cannot hold", scalar_tensor(kInf, kInt64));
  ROW("zeros_like", "undefined", "undefined", zeros_like(U));
  ROW("ones_like", "undefined", "undefined", ones_like(U));
  ROW("full_like", "undefined", "undefined", full_like(U, 1.0));
  ROW("full_like", "NaN for int64", "cannot hold", full_like(i, kNaN));
  ROW("arange", "a NaN end", "finite", arange(kNaN));
  ROW("arange", "an infinite end", "finite", arange(kInf));
  ROW("arange", "a NaN step", "finite", arange(0, 1, kNaN));
  ROW("arange", "a zero step", "non-zero", arange(0, 1, 0));
  ROW("arange", "more elements than a tensor holds", "more than a tensor", arange(1e30));
  ROW("rand", "a bool dtype", "floating", rand({2}, kBool));
  ROW("rand", "a negative size", "non-negative", rand({-1}));
  ROW("randn", "an int64 dtype", "floating", randn({2}, kInt64));
  ROW("from_vector", "more values than the shape", "3 values",
      from_vector(std::vector<float>{1, 2, 3}, {2}));
  ROW("from_buffer", "a count that is not the shape's", "expected 2",
      from_buffer(f.raw_data(), kFloat32, 3, {2}, kFloat32));
  ROW("from_buffer", "a null pointer", "null", from_buffer(nullptr, kFloat32, 2, {2}, kFloat32));

  // --- elementwise
  ROW("add", "a bool tensor", "bool", add(b, b));
  ROW("add", "0.5 added to an int64 tensor", "cannot hold", add(i, 0.5));
  ROW("add", "NaN added to an int64 tensor", "cannot hold", add(i, kNaN));
  ROW("sub", "1e30 from an int64 tensor", "cannot hold", sub(i, 1e30));
  ROW("sub", "an int64 tensor from 0.5", "cannot hold", sub(0.5, i));
  ROW("mul", "an int64 tensor by inf", "cannot hold", mul(i, kInf));
  ROW("div", "an int64 tensor by 0.5", "cannot hold", div(i, 0.5));
  ROW("div", "an int64 tensor by 0", "division by zero", div(i, 0.0));
  ROW("div", "int64 by an int64 zero", "division by zero", div(i, zeros({3}, kInt64)));
  ROW("add", "1e10 added to a float16 tensor", "beyond the range of float16",
      add(ones({2}, kFloat16), 1e10));
  ROW("neg", "a bool tensor", "bool", neg(b));
  ROW("abs", "a bool tensor", "bool", abs(b));
  ROW("sign", "a bool tensor", "bool", sign(b));
  ROW("maximum", "a bool tensor", "bool", maximum(b, b));
  ROW("pow", "an int64 tensor", "int64", pow(i, 2.0));
  ROW("logical_and", "float tensors", "must be bool", logical_and(f, f));
  ROW("logical_or", "float tensors", "must be bool", logical_or(f, f));
  ROW("logical_not", "a float tensor", "must be bool", logical_not(f));
  ROW("where", "a float condition", "must be bool", where(f, f, f));
  ROW("where", "a condition that does not broadcast", "not broadcastable",
      where(ones({4}, kBool), f, f));
  ROW("where", "0.5 beside an int64 tensor", "cannot hold", where(b, i, 0.5));
  ROW("masked_fill", "a float mask", "must be bool", masked_fill(f, f, 0.0));
  ROW("masked_fill", "a mask that does not broadcast", "not broadcastable",
      masked_fill(f, ones({4}, kBool), 0.0));
  ROW("masked_fill", "a mask larger than self", "must broadcast to self",
      masked_fill(ones({3}), ones({2, 3}, kBool), 0.0));
  ROW("masked_fill", "NaN into an int64 tensor", "cannot hold", masked_fill(i, b, kNaN));
  ROW("eq", "an undefined tensor against a scalar", "undefined", eq(U, 1.0));
  ROW("ne", "an undefined tensor against a scalar", "undefined", ne(U, 1.0));
  ROW("lt", "an undefined tensor against a scalar", "undefined", lt(U, 1.0));
  ROW("gt", "an undefined tensor against a scalar", "undefined", gt(U, 1.0));
  ROW("le", "shapes that do not broadcast", "not broadcastable", le(f, ones({4})));
  ROW("ge", "shapes that do not broadcast", "not broadcastable", ge(f, ones({4})));

  // --- reductions
  ROW("sum", "a dim out of range", "out of range", sum(f, {2}));
  ROW("sum", "a dim twice", "more than once", sum(f, {1, -1}));
  ROW("mean", "an int64 tensor", "floating", mean(i));
  ROW("mean", "a bool tensor", "floating", mean(b));
  ROW("max", "an empty tensor", "size 0", max(e));
  ROW("max", "over an empty dim", "size 0", max(e, {0}));
  ROW("min", "an empty tensor", "size 0", min(e));
  ROW("argmax", "over an empty dim", "size 0", argmax(e, 0));
  ROW("argmax", "a dim out of range", "out of range", argmax(f, 4));
  ROW("logsumexp", "a dim out of range", "out of range", logsumexp(f, {3}));
  ROW("var", "a negative correction", "correction", var(f, {}, -1));
  ROW("var", "a dim out of range", "out of range", var(f, {2}));
  ROW("sum_to", "a shape it does not broadcast from", "cannot sum", sum_to(f, {4}));
  ROW("sum_to", "more dims", "cannot sum", sum_to(f, {2, 1, 3}));

  // --- joins
  ROW("cat", "an empty list", "non-empty", cat({}, 0));
  ROW("cat", "an undefined tensor in the list", "tensors[1]", cat({f, U}, 0));
  ROW("cat", "another rank", "tensors[1]", cat({f, ones({3})}, 0));
  ROW("cat", "other sizes off the dim", "except in dim 0", cat({f, ones({2, 4})}, 0));
  ROW("cat", "a dim out of range", "out of range", cat({f, f}, 2));
  ROW("cat", "an int64 beside float32", "int64", cat({f, i}, 0));
  ROW("stack", "an empty list", "non-empty", stack({}, 0));
  ROW("stack", "another shape", "tensors[1]", stack({f, ones({3, 2})}));
  ROW("stack", "a dim out of range", "out of range", stack({f, f}, 3));
  ROW("split", "a zero split size", "positive", split(f, 0, 0));
  ROW("split", "sizes that do not sum to the dim", "sum to 3, expected 2",
      split(f, std::vector<int64_t>{1, 2}, 0));
  ROW("split", "a negative size", "non-negative", split(f, std::vector<int64_t>{-1, 4}, 1));
  ROW("split", "a dim out of range", "out of range", split(f, 1, 5));
  ROW("chunk", "zero chunks", "positive", chunk(f, 0, 0));
  ROW("chunk", "a dim out of range", "out of range", chunk(f, 2, 7));

  // --- matmul
  ROW("matmul", "a 0-d operand", "at least 1-D", matmul(f, s0));
  ROW("matmul", "inner dims that differ", "inner dims differ", matmul(f, ones({2, 5})));
  ROW("matmul", "vectors of two lengths", "inner dims differ", matmul(ones({3}), ones({4})));
  ROW("matmul", "batch dims that do not broadcast", "not broadcastable",
      matmul(ones({2, 2, 3}), ones({3, 3, 1})));
  ROW("matmul", "bool operands", "floating", matmul(b, b));

  // --- nn
  ROW("softmax", "a dim out of range", "out of range", softmax(f, 2));
  ROW("log_softmax", "a dim out of range", "out of range", log_softmax(f, -3));
  ROW("rms_norm", "a weight of the wrong size", "must have shape [3]", rms_norm(f, ones({2})));
  ROW("rms_norm", "a 2-D weight", "must have shape [3]", rms_norm(f, ones({1, 3})));
  ROW("rms_norm", "a 0-d x", "feature dim", rms_norm(s0, ones({1})));
  ROW("rms_norm", "a negative eps", "eps", rms_norm(f, ones({3}), -1));
  ROW("rms_norm", "a NaN eps", "eps", rms_norm(f, ones({3}), kNaN));
  ROW("rms_norm", "an infinite eps", "eps", rms_norm(f, ones({3}), kInf));
  ROW("swiglu", "an odd last dim", "even", swiglu(ones({2, 3})));
  ROW("swiglu", "a 0-d x", "even", swiglu(s0));
  ROW("embedding", "float ids", "int64", embedding(f, ones({2})));
  ROW("embedding", "an id past the rows", "expected every id in [0, 2)", embedding(f, ids({5})));
  ROW("embedding", "a negative id", "expected every id in [0, 2)", embedding(f, ids({-1})));
  ROW("embedding", "a 1-D weight", "2-D", embedding(ones({3}), ids({0})));
  ROW("embedding", "undefined ids", "undefined", embedding(f, U));
  ROW("cross_entropy", "float targets", "int64", cross_entropy(f, ones({2})));
  ROW("cross_entropy", "a target past the classes", "expected every id in [0, 3)",
      cross_entropy(f, ids({5, 0})));
  ROW("cross_entropy", "a negative target", "expected every id", cross_entropy(f, ids({-1, 0})));
  ROW("cross_entropy", "targets of another shape", "expected [2]",
      cross_entropy(f, zeros({3}, kInt64)));
  ROW("cross_entropy", "targets of another rank", "expected [2, 3]",
      cross_entropy(ones({2, 3, 4}), zeros({2}, kInt64)));
  ROW("cross_entropy", "undefined targets", "undefined", cross_entropy(f, U));
  ROW("dropout", "a negative p", "[0, 1)", dropout(f, -0.1, 1, 0));
  ROW("dropout", "p = 1", "[0, 1)", dropout(f, 1.0, 1, 0));
  ROW("dropout", "a NaN p", "[0, 1)", dropout(f, kNaN, 1, 0));
  ROW("rope", "an odd last dim", "even", rope(ones({1, 1, 2, 3})));
  ROW("rope", "a NaN theta", "theta", rope(ones({1, 1, 2, 4}), RopeOptions{kNaN, 0, -2, false}));
  ROW("rope", "an infinite theta", "theta",
      rope(ones({1, 1, 2, 4}), RopeOptions{kInf, 0, -2, false}));
  ROW("rope", "a zero theta", "theta", rope(ones({1, 1, 2, 4}), RopeOptions{0, 0, -2, false}));
  ROW("rope", "a negative offset", "offset",
      rope(ones({1, 1, 2, 4}), RopeOptions{10000, -3, -2, false}));
  ROW("rope", "seq_dim the last dim", "seq_dim",
      rope(ones({1, 1, 2, 4}), RopeOptions{10000, 0, -1, false}));
  ROW("rope", "seq_dim out of range", "seq_dim",
      rope(ones({1, 1, 2, 4}), RopeOptions{10000, 0, 5, false}));

  // --- the backward kernels
  ROW("rms_norm_backward", "rstd of the wrong shape", "argument 'rstd'",
      rms_norm_backward(f, f, ones({3}), ones({2, 1})));
  ROW("rms_norm_backward", "a weight of the wrong size", "argument 'weight'",
      rms_norm_backward(f, f, ones({2}), ones({2})));
  ROW("rms_norm_backward", "grad of another shape", "argument 'grad'",
      rms_norm_backward(ones({3, 3}), f, ones({3}), ones({2})));
  ROW("rms_norm_backward", "undefined rstd", "undefined", rms_norm_backward(f, f, ones({3}), U));
  ROW("rms_norm_backward", "float64 grad for float32 x", "float64",
      rms_norm_backward(d, f, ones({3}), ones({2})));
  ROW("swiglu_backward", "grad the shape of x, not of the output", "argument 'grad'",
      swiglu_backward(ones({2, 6}), ones({2, 6})));
  ROW("swiglu_backward", "an odd last dim", "even", swiglu_backward(f, f));
  ROW("swiglu_backward", "undefined grad", "undefined", swiglu_backward(U, ones({2, 6})));
  ROW("embedding_backward", "an id past num_rows", "expected every id in [0, 2)",
      embedding_backward(f, ids({7, 0}), 2));
  ROW("embedding_backward", "grad not ids' shape plus a dim", "argument 'grad'",
      embedding_backward(ones({2, 4}), zeros({3}, kInt64), 2));
  ROW("embedding_backward", "a negative num_rows", "num_rows",
      embedding_backward(f, zeros({2}, kInt64), -1));
  ROW("embedding_backward", "float ids", "int64", embedding_backward(f, ones({2}), 2));

  // --- sdpa: its options, shapes and passes
  Tensor q = ones({1, 2, 3, 4}), k = ones({1, 1, 3, 4});
  const auto with = [](auto set) {
    SdpaOptions o;
    set(o);
    return o;
  };
  ROW("sdpa", "a 2-D q", "must be 4-D", sdpa(f, k, k));
  ROW("sdpa", "query heads not a multiple of kv heads", "multiple",
      sdpa(q, ones({1, 3, 3, 4}), ones({1, 3, 3, 4})));
  ROW("sdpa", "k and v of other lengths", "sequence lengths of k and v differ",
      sdpa(q, k, ones({1, 1, 4, 4})));
  ROW("sdpa", "head dims of q and k that differ", "head dims", sdpa(q, ones({1, 1, 3, 5}), k));
  ROW("sdpa", "batch sizes that differ", "batch sizes differ", sdpa(ones({2, 2, 3, 4}), k, k));
  ROW("sdpa", "v with other heads", "heads", sdpa(q, k, ones({1, 2, 3, 4})));
  ROW("sdpa", "an int64 q", "floating", sdpa(q.to(kInt64), k, k));
  ROW("sdpa", "a NaN scale", "scale", sdpa(q, k, k, with([](SdpaOptions& o) { o.scale = kNaN; })));
  ROW("sdpa", "an infinite scale", "scale",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.scale = kInf; })));
  ROW("sdpa", "a negative window", "window",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.window = -1; })));
  ROW("sdpa", "a NaN softcap", "softcap",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.softcap = kNaN; })));
  ROW("sdpa", "an infinite softcap", "softcap",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.softcap = kInf; })));
  ROW("sdpa", "a negative softcap", "softcap",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.softcap = -1; })));
  ROW("sdpa", "a NaN dropout_p", "dropout_p",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.dropout_p = kNaN; })));
  ROW("sdpa", "dropout_p = 1", "dropout_p",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.dropout_p = 1; })));
  ROW("sdpa", "a mask that does not broadcast", "not broadcastable",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.mask = ones({5}); })));
  ROW("sdpa", "an int64 mask", "mask", sdpa(q, k, k, with([](SdpaOptions& o) {
                                              o.mask = ones({3, 3}, kInt64);
                                            })));
  ROW("sdpa", "a float64 mask for float32 q", "mask", sdpa(q, k, k, with([](SdpaOptions& o) {
                                                             o.mask = ones({3, 3}, kFloat64);
                                                           })));
  ROW("sdpa", "an undefined mask", "undefined",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.mask = Tensor(); })));
  ROW("sdpa", "a mask of rank 5", "rank 5", sdpa(q, k, k, with([](SdpaOptions& o) {
                                                   o.mask = ones({1, 1, 1, 3, 3});
                                                 })));
  ROW("sdpa", "seq_len_q of another batch", "must have shape [1]",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.seq_len_q = ones({2}, kInt64); })));
  ROW("sdpa", "float seq_len_q", "int64",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.seq_len_q = ones({1}); })));
  ROW("sdpa", "a negative seq_len_q", "expected each in [0, 3]",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.seq_len_q = ids({-1}); })));
  ROW("sdpa", "seq_len_kv past the keys", "expected each in [0, 3]",
      sdpa(q, k, k, with([](SdpaOptions& o) { o.seq_len_kv = ids({9}); })));
  ROW_AS("sdpa_forward", "sdpa", "a 3-D k", "argument 'k' must be 4-D",
         sdpa_forward(q, ones({1, 3, 4}), k));
  ROW("sdpa_backward", "undefined stats", "undefined", sdpa_backward(q, k, k, q, q, U));
  ROW("sdpa_backward", "dout of another shape", "argument 'dout'",
      sdpa_backward(q, k, k, q, ones({1, 2, 3, 5}), ones({1, 2, 3, 1})));
  ROW("sdpa_backward", "stats of another shape", "argument 'stats'",
      sdpa_backward(q, k, k, q, q, ones({1, 2, 3, 2})));
  ROW("sdpa_backward", "a float64 out", "float64",
      sdpa_backward(q, k, k, q.to(kFloat64), q, ones({1, 2, 3, 1})));
  {
    const Tensor pool = ones({2, 2, 1, 4}), table = zeros({1, 2}, kInt64);
    const Tensor len = full({1}, 3, kInt64);
    ROW("sdpa_paged", "an undefined page table", "undefined", sdpa_paged(q, pool, pool, U, len));
    ROW("sdpa_paged", "a 3-D pool", "(blocks, block, Hk, D)", sdpa_paged(q, f, f, table, len));
    ROW("sdpa_paged", "a float page table", "int64", sdpa_paged(q, pool, pool, ones({1, 2}), len));
    ROW("sdpa_paged", "lengths past the pages", "seq_len_kv",
        sdpa_paged(q, pool, pool, table, full({1}, 5, kInt64)));
    ROW("sdpa_paged", "a page outside the pool", "names block",
        sdpa_paged(q, pool, pool, full({1, 2}, 2, kInt64), len));
  }
  ROW("sdpa_dropout_mask", "a negative size", "sizes must be >= 0",
      sdpa_dropout_mask(-1, 1, 1, 1, SdpaOptions{}));
  ROW("sdpa_dropout_mask", "a NaN dropout_p", "dropout_p",
      sdpa_dropout_mask(1, 1, 1, 1, with([](SdpaOptions& o) { o.dropout_p = kNaN; })));
  ROW("alibi_slopes", "negative heads", "heads", alibi_slopes(-1));

  // --- settings and the optimizer kernels
  ROW_AS("set_autocast_dtype", "autocast", "int64", "int64", (set_autocast_dtype(kInt64), 0));
  ROW_AS("set_autocast_dtype", "autocast", "float64", "float64", (set_autocast_dtype(kFloat64), 0));
  const Tensor p = zeros({2}), m = zeros({2}), v = zeros({2});
  ROW("adamw_update_", "a grad of another shape", "argument 'grad'", adamw(p, ones({3}), m, v));
  ROW("adamw_update_", "a float64 grad", "float64", adamw(p, zeros({2}, kFloat64), m, v));
  ROW("adamw_update_", "an undefined parameter", "undefined", adamw(U, p, m, v));
  ROW("adamw_update_", "a non-contiguous parameter", "contiguous",
      adamw(zeros({2, 2}).transpose(0, 1), zeros({2, 2}), zeros({2, 2}), zeros({2, 2})));
  ROW("adamw_update_", "int64 tensors", "int64",
      adamw(zeros({2}, kInt64), zeros({2}, kInt64), m, v));
  ROW("add_sum_of_squares_", "an undefined x", "undefined", sum_of_squares(zeros({}, kFloat64), U));
  ROW("add_sum_of_squares_", "an int64 x", "int64", sum_of_squares(zeros({}, kFloat64), i));
  ROW("add_sum_of_squares_", "a float32 accumulator", "float64", sum_of_squares(s0, f));
  ROW("add_sum_of_squares_", "a 1-D accumulator", "0-d", sum_of_squares(zeros({2}, kFloat64), f));
}

// Ops with no bad input to give: the settings' getters and a switch.
const std::map<std::string, std::string>& cannot_fail() {
  static const std::map<std::string, std::string> m = {
      {"autocast_dtype", "a getter"},
      {"fused_kernels", "a getter"},
      {"set_fused_kernels", "takes any bool"},
      {"defined", "true or false for any handle"},
      {"impl", "the raw handle, null when undefined"},
      {"impl_ptr", "the raw handle, null when undefined"},
      {"is_same", "compares handles, undefined ones too"},
  };
  return m;
}

std::vector<ErrorInput> all_rows() {
  std::vector<ErrorInput> rows;
  generated_rows(rows);
  written_rows(rows);
  return rows;
}

}  // namespace

TEST_CASE("every row: a tg::Error that starts with [op] and holds the phrase") {
  const std::vector<ErrorInput> rows = all_rows();
  std::set<std::string> ops;
  for (const ErrorInput& r : rows) {
    CAPTURE(r.called);
    CAPTURE(r.what);
    tgtest::check_throws_with_prefix(r.call, "[" + r.op + "]", r.phrase);
    ops.insert(r.called);
  }
  set_autocast_dtype(kFloat32);  // whatever the rows above left
  std::printf("error inputs: %zu rows over %zu ops\n", rows.size(), ops.size());
}

TEST_CASE("every public op and Tensor method has an error row, or says why it cannot fail") {
  std::set<std::string> covered;
  for (const ErrorInput& r : all_rows()) covered.insert(r.called);
  set_autocast_dtype(kFloat32);
  std::set<std::string> api = tgtest::public_ops();
  for (const std::string& m : tgtest::tensor_methods()) api.insert(m);
  api.insert("adamw_update_");
  api.insert("add_sum_of_squares_");
  CHECK(api.size() > 100);  // the scans found the headers
  for (const std::string& name : api) {
    INFO("'" << name << "' has no row in tests/test_error_inputs.cpp");
    CHECK((covered.count(name) || cannot_fail().count(name)));
  }
}

// Elementwise ops promote a float64 beside a float32 (as PyTorch does) instead of refusing it.
TEST_CASE("mixed floating dtypes: elementwise op-table rows promote to float64") {
  for (const OpInfo& op : optable::op_table()) {
    if (op.shapes.size() != 2 || !op.elementwise || !op.floating_only) continue;
    CAPTURE(op.label());
    Inputs in = inputs_of(op, op.shapes);
    in[1] = in[1].to(kFloat64);
    CHECK(op.call(in).dtype() == kFloat64);
  }
}

// Empty inputs (a 0 in the leading dim of every input) for every op-table row: the op returns a
// result, and then its gradient runs and gives each input a gradient of its shape, or it refuses
// with its [op] error; never a crash, another exception or (under the sanitizers) a bad access.
TEST_CASE("empty inputs: every op-table row returns a result and a gradient, or refuses") {
  int returned = 0, refused = 0;
  for (const OpInfo& op : optable::op_table()) {
    CAPTURE(op.label());
    std::vector<Shape> shapes = op.shapes;
    for (Shape& s : shapes) s[0] = 0;
    Inputs in = inputs_of(op, shapes, kFloat64);
    if (op.differentiable)
      for (Tensor& t : in) t.requires_grad_();
    try {
      Tensor out = op.call(in);
      REQUIRE(out.defined());
      if (op.differentiable && out.requires_grad()) {
        sum(out.to(kFloat64)).backward();
        for (const Tensor& t : in)
          if (t.grad().defined()) CHECK(t.grad().sizes() == t.sizes());
      }
      ++returned;
    } catch (const Error& err) {
      const std::string msg = err.what();
      INFO("message: " << msg);
      CHECK(msg.rfind("[" + error_name(op) + "]", 0) == 0);
      ++refused;
    }
  }
  std::printf("empty inputs: %d op-table rows return, %d refuse\n", returned, refused);
  CHECK(returned > 0);
}
