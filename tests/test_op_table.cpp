// The op table (op_table.h) on the CPU: every public op is in it, each row's values against its
// float64 reference in float64 and float32, its float64 gradcheck plain, strided and
// broadcast, and its gradgradcheck. Its bad-input rows are in test_error_inputs.cpp.
#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "op_table.h"
#include "public_api.h"

using namespace tg;
using namespace optable;

namespace {

// Public ops deliberately not in the table, and where they are tested instead.
const std::map<std::string, std::string>& exemptions() {
  static const std::map<std::string, std::string> m = {
      {"arange", "factory (test_tensor.cpp)"},
      {"empty", "factory (test_tensor.cpp)"},
      {"from_buffer", "factory (test_tensor.cpp)"},
      {"from_vector", "factory (test_tensor.cpp)"},
      {"full", "factory (test_tensor.cpp)"},
      {"full_like", "factory (test_tensor.cpp)"},
      {"ones", "factory (test_tensor.cpp)"},
      {"ones_like", "factory (test_tensor.cpp)"},
      {"zeros", "factory (test_tensor.cpp)"},
      {"zeros_like", "factory (test_tensor.cpp)"},
      {"scalar_tensor", "factory (test_tensor.cpp)"},
      {"rand", "random factory (test_philox.cpp)"},
      {"randn", "random factory (test_philox.cpp)"},
      {"set_fused_kernels", "a setting (test_fused_kernels.cpp)"},
      {"fused_kernels", "a setting (test_fused_kernels.cpp)"},
      {"autocast_dtype", "a setting (test_half.cpp)"},
      {"set_autocast_dtype", "a setting (test_half.cpp)"},
      {"rms_norm_backward", "fused gradient, against its composite (test_fused_kernels.cpp)"},
      {"swiglu_backward", "fused gradient, against its composite (test_fused_kernels.cpp)"},
      {"embedding_backward", "embedding's gradient (through the embedding row)"},
      {"sdpa_forward", "sdpa's passes (test_sdpa.cpp)"},
      {"sdpa_backward", "sdpa's passes (test_sdpa.cpp)"},
      {"sdpa_dropout_mask", "sdpa's dropout stream (test_sdpa.cpp)"},
      {"alibi_slopes", "sdpa's ALiBi slopes (test_sdpa.cpp)"},
      {"sdpa_paged", "sdpa over a paged K/V cache (test_sdpa_paged.cpp)"},
  };
  return m;
}

std::vector<double> values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

// The row's reference applied per element to inputs broadcast to the output's shape.
std::vector<double> reference_of(const OpInfo& op, const Inputs& in, const Shape& out_shape) {
  std::vector<std::vector<double>> cols;
  for (const Tensor& t : in) cols.push_back(values(t.detach().expand(out_shape).contiguous()));
  std::vector<double> want(static_cast<size_t>(numel_of(out_shape)));
  std::vector<double> args(in.size());
  for (size_t e = 0; e < want.size(); ++e) {
    for (size_t i = 0; i < in.size(); ++i) args[i] = cols[i][e];
    want[e] = op.reference(args);
  }
  return want;
}

}  // namespace

TEST_CASE("every public op is in the op table or named in its exemptions") {
  std::set<std::string> covered;
  for (const OpInfo& op : op_table()) covered.insert(op.name);
  const std::set<std::string> ops = tgtest::public_ops();
  CHECK(ops.size() > 50);  // the scan found the headers' declarations
  for (const std::string& name : ops) {
    INFO("public op '" << name << "' is neither in tests/op_table.cpp nor exempted");
    CHECK((covered.count(name) || exemptions().count(name)));
  }
  for (const std::string& name : covered) {
    INFO("table row '" << name << "' names no public op");
    CHECK(ops.count(name));
  }
}

TEST_CASE("op table: values against the float64 reference, in float64 and float32") {
  for (const OpInfo& op : op_table()) {
    if (!op.reference) continue;
    for (Layout layout : {Layout::Plain, Layout::Strided, Layout::Broadcast}) {
      for (DType dtype : {kFloat64, kFloat32}) {
        CAPTURE(op.label());
        CAPTURE(dtype);
        CAPTURE(static_cast<int>(layout));
        Inputs in = make_inputs(op, layout, dtype, false);
        Tensor out = call_for(op, layout)(in);
        Inputs seen = in;
        if (layout == Layout::Broadcast && in.size() == 1) seen = {in[0].expand({3, 4})};
        tgtest::check_close(values(out), reference_of(op, seen, out.sizes()),
                            dtype == kFloat64 ? 1e-13 : op.tol32);
      }
    }
  }
}

// Each row in bfloat16 and float16 against the float32 op on the same (rounded) values. Every
// op computes 16-bit inputs in float32 and rounds its result once, so each element is the
// float32 result to within the unit roundoff u (2^-8 for bfloat16, 2^-11 for float16) relative
// to it, or 2^-25 absolute below float16's normal range (half its subnormal step). Results that
// are not floating (comparisons, indices) must be equal.
TEST_CASE("op table: bfloat16 and float16 against float32 on the same values") {
  for (const OpInfo& op : op_table()) {
    for (Layout layout : {Layout::Plain, Layout::Strided}) {
      for (DType h : {kBFloat16, kFloat16}) {
        CAPTURE(op.label());
        CAPTURE(h);
        CAPTURE(static_cast<int>(layout));
        Inputs in16 = make_inputs(op, layout, kFloat32, false), in32;
        for (Tensor& t : in16) {
          if (is_floating(t.dtype())) t = t.to(h);
          in32.push_back(is_floating(t.dtype()) ? t.to(kFloat32) : t);
        }
        const Tensor got = call_for(op, layout)(in16), want = call_for(op, layout)(in32);
        REQUIRE(got.sizes() == want.sizes());
        const std::vector<double> g = values(got), w = values(want);
        if (!is_floating(want.dtype())) {
          CHECK(got.dtype() == want.dtype());
          CHECK(g == w);
          continue;
        }
        CHECK(got.dtype() == h);
        const double u = h == kBFloat16 ? 0x1p-8 : 0x1p-11;
        for (size_t e = 0; e < w.size(); ++e) {
          INFO("element " << e << ": got " << g[e] << ", want " << w[e]);
          CHECK(std::abs(g[e] - w[e]) <= u * std::abs(w[e]) + 0x1p-25);
        }
      }
    }
  }
}

TEST_CASE("op table: float64 gradcheck, plain, strided and broadcast") {
  for (const OpInfo& op : op_table()) {
    if (!op.differentiable) continue;
    for (Layout layout : {Layout::Plain, Layout::Strided, Layout::Broadcast}) {
      if (layout == Layout::Broadcast && !op.elementwise) continue;
      CAPTURE(op.label());
      CAPTURE(static_cast<int>(layout));
      CHECK_GRADCHECK(call_for(op, layout), make_inputs(op, layout, kFloat64, true));
    }
  }
}

// Every op twice differentiable: its backward formula, recorded under create_graph, against
// central differences of it. Strided rather than plain (the same formula; strided inputs
// also check what a saved view gives back).
TEST_CASE("op table: float64 gradgradcheck, strided and broadcast") {
  for (const OpInfo& op : op_table()) {
    if (!op.differentiable) continue;
    for (Layout layout : {Layout::Strided, Layout::Broadcast}) {
      if (layout == Layout::Broadcast && !op.elementwise) continue;
      CAPTURE(op.label());
      CAPTURE(static_cast<int>(layout));
      CHECK_GRADGRADCHECK(call_for(op, layout), make_inputs(op, layout, kFloat64, true));
    }
  }
}
