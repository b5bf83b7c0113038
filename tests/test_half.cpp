// bfloat16 and float16: the conversions bit for bit (every 16-bit value, every rounding
// boundary between two of them, overflow, NaN), type promotion, factories, printing, to() and
// its gradient, and the float32 accumulation of reductions and matmul.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

using namespace tg;

namespace {

template <class H>
float bits_to_float(uint16_t b) {
  return static_cast<float>(H::from_bits(b));
}

float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float next_down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }

// The rounding rule written out plainly: of the two finite positive 16-bit neighbours of |x|
// (given by their bits, consecutive), the nearer; the even one on a tie.
uint16_t nearest_of(double ax, uint16_t lo_bits, double lo, uint16_t hi_bits, double hi) {
  if (ax - lo < hi - ax) return lo_bits;
  if (hi - ax < ax - lo) return hi_bits;
  return (lo_bits & 1) ? hi_bits : lo_bits;
}

// For every pair of consecutive positive finite values a < b of H (subnormals included): their
// midpoint (exact in float) rounds to the even one, and one float step either side of it rounds
// to the nearer one. The largest finite value's upper midpoint rounds to infinity.
template <class H>
void check_rounding_boundaries(uint16_t max_finite_bits) {
  for (uint16_t b = 0; b < max_finite_bits; ++b) {
    const float a = bits_to_float<H>(b), c = bits_to_float<H>(static_cast<uint16_t>(b + 1));
    const float mid = static_cast<float>((static_cast<double>(a) + c) / 2);
    REQUIRE(static_cast<double>(mid) == (static_cast<double>(a) + c) / 2);  // exact in float
    const uint16_t even = (b & 1) ? static_cast<uint16_t>(b + 1) : b;
    INFO("between bits " << b << " and " << b + 1);
    CHECK(H(mid).bits == even);
    CHECK(H(next_down(mid)).bits == b);
    CHECK(H(next_up(mid)).bits == b + 1);
    CHECK(H(-mid).bits == (even | 0x8000));
    CHECK(H(a).bits == b);  // exact values stay
  }
  const float top = bits_to_float<H>(max_finite_bits);
  const float step = top - bits_to_float<H>(static_cast<uint16_t>(max_finite_bits - 1));
  const float up_mid = top + step / 2;  // ties to the even one: infinity (0x..00)
  CHECK(H(next_down(up_mid)).bits == max_finite_bits);
  CHECK(std::isinf(static_cast<float>(H(up_mid))));
  CHECK(std::isinf(static_cast<float>(H(std::numeric_limits<float>::max()))));
}

// Random floats of every magnitude against the rule applied to the sorted table of H's values.
template <class H>
void check_random_floats(uint16_t max_finite_bits) {
  std::vector<double> table;
  for (uint32_t b = 0; b <= max_finite_bits; ++b)
    table.push_back(bits_to_float<H>(static_cast<uint16_t>(b)));
  const double top = table.back(), inf_from = top + (top - table[table.size() - 2]) / 2;
  std::mt19937 rng(7);
  for (int n = 0; n < 200000; ++n) {
    uint32_t u = rng();
    float x;
    std::memcpy(&x, &u, 4);
    if (std::isnan(x)) continue;
    const double ax = std::fabs(static_cast<double>(x));
    uint16_t want;
    if (ax >= inf_from) {
      want = static_cast<uint16_t>(H(std::numeric_limits<float>::infinity()).bits);
    } else if (ax >= top) {
      want = max_finite_bits;
    } else {
      const auto it = std::lower_bound(table.begin(), table.end(), ax);
      const auto hi = static_cast<uint16_t>(it - table.begin());
      want = *it == ax || hi == 0
                 ? hi
                 : nearest_of(ax, static_cast<uint16_t>(hi - 1), table[hi - 1], hi, *it);
    }
    if (std::signbit(x)) want |= 0x8000;
    INFO("x = " << x << " (bits " << u << ")");
    CHECK(H(x).bits == want);
  }
}

// The float32 product's error bound for 16-bit a (m x k) and b against float64 on the same
// values: the float32 sum's (k u32 sum|a||b|) and one rounding to 16 bits (u |ref|).
void check_within_float32_error(const Tensor& got16, const Tensor& a, const Tensor& b) {
  const Tensor a64 = a.to(kFloat64), b64 = b.to(kFloat64);
  const std::vector<double> got = got16.to(kFloat64).to_vector<double>();
  const std::vector<double> ref = matmul(a64, b64).to_vector<double>();
  const std::vector<double> mag = matmul(abs(a64), abs(b64)).to_vector<double>();
  const double u = got16.dtype() == kBFloat16 ? 0x1p-8 : 0x1p-11;
  const double k = static_cast<double>(a.size(-1));
  REQUIRE(got.size() == ref.size());
  for (size_t e = 0; e < ref.size(); ++e) {
    INFO("element " << e);
    CHECK(std::abs(got[e] - ref[e]) <= u * std::abs(ref[e]) + k * 0x1p-24 * mag[e]);
  }
}

// Runs the CPU's matrix products on Eigen while it lives: 16-bit products then widen to float32
// on every machine, where oneDNN would multiply bfloat16 natively on some.
class WidenedGemm {
 public:
  WidenedGemm() : before_(cpu_gemm()) { set_cpu_gemm("eigen"); }
  ~WidenedGemm() { set_cpu_gemm(before_); }
  WidenedGemm(const WidenedGemm&) = delete;
  WidenedGemm& operator=(const WidenedGemm&) = delete;

 private:
  std::string before_;
};

}  // namespace

TEST_CASE("every bfloat16 and float16 value converts to float and back unchanged") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float fb = bits_to_float<bfloat16>(bits), fh = bits_to_float<float16>(bits);
    if (std::isnan(fb)) {
      CHECK(std::isnan(static_cast<float>(bfloat16(fb))));
    } else {
      CHECK(bfloat16(fb).bits == bits);
    }
    if (std::isnan(fh)) {
      CHECK(std::isnan(static_cast<float>(float16(fh))));
    } else {
      CHECK(float16(fh).bits == bits);
    }
  }
  // A few values spelled out: bfloat16 is float's upper half; float16 as IEEE binary16.
  CHECK(bfloat16(1.0f).bits == 0x3f80);
  CHECK(bfloat16(-2.0f).bits == 0xc000);
  CHECK(float16(1.0f).bits == 0x3c00);
  CHECK(float16(65504.0f).bits == 0x7bff);
  CHECK(float16(0x1p-24f).bits == 0x0001);  // the smallest subnormal
  CHECK(float16(-0.0f).bits == 0x8000);
  CHECK(static_cast<float>(float16::from_bits(0x7c00)) == INFINITY);
  CHECK(static_cast<float>(bfloat16::from_bits(0xff80)) == -INFINITY);
}

TEST_CASE("float to bfloat16 and float16 rounds to nearest, ties to even, at every boundary") {
  check_rounding_boundaries<bfloat16>(0x7f7f);
  check_rounding_boundaries<float16>(0x7bff);
  check_random_floats<bfloat16>(0x7f7f);
  check_random_floats<float16>(0x7bff);
  // float16 overflows to infinity from 65520 (the midpoint above 65504) up.
  CHECK(float16(65519.99f).bits == 0x7bff);
  CHECK(float16(65520.0f).bits == 0x7c00);
  CHECK(float16(-1e10f).bits == 0xfc00);
  CHECK(float16(0x1p-25f).bits == 0x0000);  // half the smallest subnormal: tie to 0
  CHECK(float16(next_up(0x1p-25f)).bits == 0x0001);
  CHECK(std::isnan(static_cast<float>(float16(NAN))));
  CHECK(std::isnan(static_cast<float>(bfloat16(-NAN))));
  CHECK(bfloat16(INFINITY).bits == 0x7f80);
}

TEST_CASE("double and integers round once, not through float") {
  // 1 + 2^-8 + 2^-40: through float it would be the tie 1 + 2^-8 and go to even (1.0).
  CHECK(bfloat16(1.0 + 0x1p-8 + 0x1p-40).bits == 0x3f81);
  CHECK(bfloat16(-(1.0 + 0x1p-8 + 0x1p-40)).bits == 0xbf81);
  CHECK(float16(1.0 + 0x1p-11 + 0x1p-40).bits == 0x3c01);
  CHECK(bfloat16(1.0 + 0x1p-8).bits == 0x3f80);  // a true tie still goes to even
  CHECK(float16(1e300).bits == 0x7c00);
  CHECK(bfloat16(1e300).bits == 0x7f80);
  CHECK(bfloat16(1e-300).bits == 0x0000);
  CHECK(std::isnan(static_cast<float>(float16(std::nan("")))));
  CHECK(float16(int64_t{2049}).bits == 0x6800);  // 2049 is a tie between 2048 and 2050
  CHECK(float16(int64_t{2051}).bits == 0x6802);  // and 2051 one between 2050 and 2052
  CHECK(static_cast<double>(bfloat16(float16(3.0f))) == 3.0);
}

TEST_CASE("bfloat16 and float16 tensors: names, factories, printing, item, from_vector") {
  CHECK(dtype_size(kBFloat16) == 2);
  CHECK(dtype_size(kFloat16) == 2);
  CHECK(is_floating(kBFloat16));
  CHECK(std::string(dtype_name(kFloat16)) == "float16");
  Tensor t = full({2, 3}, 1.0 / 3.0, kBFloat16);
  CHECK(t.dtype() == kBFloat16);
  CHECK(t.to_vector<bfloat16>()[5].bits == bfloat16(1.0 / 3.0).bits);
  CHECK(sum(t.to(kFloat64)).item<double>() == 6 * static_cast<double>(bfloat16(1.0 / 3.0)));
  std::ostringstream os;
  os << ones({2}, kFloat16);
  CHECK(os.str().find("dtype=float16") != std::string::npos);
  CHECK(os.str().find("[1, 1]") != std::string::npos);
  Tensor a = arange(0, 300, 1, kBFloat16);  // 257 is not a bfloat16: it rounds to 256 (even)
  CHECK(a.to(kFloat64).to_vector<double>()[257] == 256.0);
  Tensor v = from_vector(std::vector<float16>{float16(1.5f), float16(-2.0f)}, {2});
  CHECK(v.dtype() == kFloat16);
  CHECK(v.to(kFloat32).to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  // rand and randn round the draws of the same stream once (from float and double).
  Generator g1{5, 0}, g2{5, 0}, g3{6, 0}, g4{6, 0};
  Tensor r16 = rand({1000}, g1, kFloat16), r32 = rand({1000}, g2, kFloat32);
  CHECK(r16.to(kFloat64).to_vector<double>() == r32.to(kFloat16).to(kFloat64).to_vector<double>());
  Tensor n16 = randn({1000}, g3, kBFloat16), n64 = randn({1000}, g4, kFloat64);
  CHECK(n16.to(kFloat64).to_vector<double>() == n64.to(kBFloat16).to(kFloat64).to_vector<double>());
}

TEST_CASE("type promotion as PyTorch's: float32 wins over 16 bits, bf16 with f16 is float32") {
  CHECK(promote_types(kBFloat16, kFloat32) == kFloat32);
  CHECK(promote_types(kFloat16, kBFloat16) == kFloat32);
  CHECK(promote_types(kFloat16, kFloat64) == kFloat64);
  CHECK(promote_types(kInt64, kBFloat16) == kBFloat16);
  CHECK(promote_types(kBool, kFloat16) == kFloat16);
  CHECK(promote_types(kBool, kInt64) == kInt64);
  for (DType a : kAllDTypes)
    for (DType b : kAllDTypes) CHECK(promote_types(a, b) == promote_types(b, a));
  Tensor h = full({3}, 1.5, kBFloat16), f = full({3}, 0.25, kFloat32);
  Tensor s = add(h, f);
  CHECK(s.dtype() == kFloat32);
  CHECK(s.to_vector<float>() == std::vector<float>{1.75f, 1.75f, 1.75f});
  CHECK(mul(h, full({3}, 2.0, kFloat16)).dtype() == kFloat32);
  CHECK(mul(h, 2.5).dtype() == kBFloat16);  // a C++ scalar does not promote
  CHECK(gt(h, f).dtype() == kBool);
  CHECK(where(gt(h, 1.0), h, f).dtype() == kFloat32);
  CHECK(add(ones({2}, kInt64), ones({2}, kFloat16)).dtype() == kFloat16);
  // The gradient reaches each input in its own dtype.
  Tensor a = full({3}, 1.5, kBFloat16).requires_grad_(), b = full({3}, 2.0).requires_grad_();
  sum(mul(a, b)).backward();
  CHECK(a.grad().dtype() == kBFloat16);
  CHECK(b.grad().dtype() == kFloat32);
  CHECK(a.grad().to(kFloat32).to_vector<float>() == std::vector<float>{2, 2, 2});
  CHECK(b.grad().to_vector<float>() == std::vector<float>{1.5f, 1.5f, 1.5f});
}

TEST_CASE("to(dtype) is differentiable: the gradient is cast back") {
  Tensor x = tgtest::rnd({4}, 3).to(kFloat32).requires_grad_();
  Tensor y = x.to(kFloat16);
  CHECK(y.dtype() == kFloat16);
  sum(mul(y, y)).backward();
  CHECK(x.grad().dtype() == kFloat32);
  // d/dx y^2 = 2y, computed in float16 (one rounding of 2y: exact) and cast back.
  CHECK(x.grad().to_vector<float>() == mul(y, 2.0).to(kFloat32).to_vector<float>());
}

// 16-bit elementwise ops take unit-stride runs a block of 256 at a time (widened to float, the
// float op, rounded back) and other runs element by element: each way, every element must be
// the float32 op's result rounded once. 601 elements: two blocks and a part, each with whole
// vectors and a tail; values past float16's range and below its normals, zeros, inf, NaN.
TEST_CASE("16-bit elementwise ops: the float32 op rounded once, in blocks and element by element") {
  std::vector<float> xs = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-6f, -3e-7f, 7e4f, -7e4f};
  while (xs.size() < 601) xs.push_back(-12.0f + 0.0401f * static_cast<float>(xs.size()));
  std::vector<float> ys(xs.size());
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = 3.0f * std::cos(0.37f * static_cast<float>(i));
  const int64_t n = static_cast<int64_t>(xs.size());
  using Unary = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, Unary>> unary = {
      {"exp", +[](const Tensor& v) { return exp(v); }},
      {"log", +[](const Tensor& v) { return log(v); }},
      {"sqrt", +[](const Tensor& v) { return sqrt(v); }},
      {"rsqrt", +[](const Tensor& v) { return rsqrt(v); }},
      {"tanh", +[](const Tensor& v) { return tanh(v); }},
      {"sigmoid", +[](const Tensor& v) { return sigmoid(v); }},
      {"silu", +[](const Tensor& v) { return silu(v); }},
      {"gelu", +[](const Tensor& v) { return gelu(v); }},
      {"relu", +[](const Tensor& v) { return relu(v); }},
      {"softplus", +[](const Tensor& v) { return softplus(v); }},
      {"expm1", +[](const Tensor& v) { return expm1(v); }},
      {"pow 2", +[](const Tensor& v) { return pow(v, 2.0); }},
      {"pow 1/2", +[](const Tensor& v) { return pow(v, 0.5); }},
      {"pow 1.7", +[](const Tensor& v) { return pow(v, 1.7); }},
  };
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, Binary>> binary = {
      {"add", +[](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"mul", +[](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", +[](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"maximum", +[](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"logaddexp", +[](const Tensor& a, const Tensor& b) { return logaddexp(a, b); }},
  };
  const auto bits = [](const Tensor& t) {
    std::vector<uint32_t> u;
    for (float v : t.to_vector<float>())
      u.push_back(v != v ? 0x7fc00000u : std::bit_cast<uint32_t>(v));
    return u;
  };
  for (DType h : {kBFloat16, kFloat16}) {
    const Tensor x = from_vector(xs, {n}).to(h), y = from_vector(ys, {n}).to(h);
    const Tensor y0 = y.narrow(0, 1, 1).reshape({});  // a 0-d operand: broadcast along the run
    // Element by element: every element of x read twice at stride 0.
    const Tensor x2 = x.unsqueeze(1).expand({n, 2}), y2 = y.unsqueeze(1).expand({n, 2});
    for (const auto& [name_c, op] : unary) {
      const std::string name = name_c;  // a copy: doctest's INFO captures it in a lambda
      INFO(name << ", " << h);
      const std::vector<uint32_t> want = bits(op(x.to(kFloat32)).to(h));
      CHECK(bits(op(x)) == want);
      CHECK(bits(op(x2).narrow(1, 1, 1)) == want);
    }
    for (const auto& [name_c, op] : binary) {
      const std::string name = name_c;
      INFO(name << ", " << h);
      CHECK(bits(op(x, y)) == bits(op(x.to(kFloat32), y.to(kFloat32)).to(h)));
      CHECK(bits(op(x2, y2).narrow(1, 0, 1)) == bits(op(x, y)));
      CHECK(bits(op(x, y0)) == bits(op(x.to(kFloat32), y0.to(kFloat32)).to(h)));
    }
  }
}

TEST_CASE("reductions, softmax and matmul accumulate 16-bit inputs in float32, rounded once") {
  for (DType h : {kBFloat16, kFloat16}) {
    CAPTURE(h);
    // 0.01 added 4096 times: a 16-bit accumulator would stall far below 40.96.
    Tensor x = full({4096}, 0.01, h);
    const double one = static_cast<double>(x.to(kFloat64).to_vector<double>()[0]);
    CHECK(std::abs(sum(x).to(kFloat64).item<double>() - 4096 * one) <= 4096 * one / 128);
    // And exactly the float32 result of the same values, rounded once.
    Tensor r = tgtest::rnd({64, 300}, 11).to(h);
    Tensor r32 = r.to(kFloat32);
    auto same = [](const Tensor& a, const Tensor& b) {
      return a.to(kFloat64).to_vector<double>() == b.to(kFloat64).to_vector<double>();
    };
    CHECK(same(sum(r, {1}), sum(r32, {1}).to(h)));
    CHECK(same(mean(r, {0}), mean(r32, {0}).to(h)));
    CHECK(same(softmax(r, -1), softmax(r32, -1).to(h)));
    Tensor w = tgtest::rnd({300, 40}, 12).to(h);
    {
      WidenedGemm widened;  // the native bfloat16 product sums in its own order: next test
      CHECK(same(matmul(r, w), matmul(r32, w.to(kFloat32)).to(h)));
    }
  }
}

TEST_CASE("a large 16-bit matmul in blocks of rows: within float32's error, rounded once") {
  // K = 4096 makes the CPU's widening 16-bit GEMM convert `a` and `c` 256 rows at a time: 300
  // rows are two blocks. Both paths where this machine has the native bfloat16 one.
  for (bool widen : {false, true}) {
    std::optional<WidenedGemm> widened;
    if (widen) widened.emplace();
    for (DType h : {kBFloat16, kFloat16}) {
      for (bool transposed : {false, true}) {
        CAPTURE(widen);
        CAPTURE(h);
        CAPTURE(transposed);
        Tensor a = transposed ? tgtest::rnd({4096, 300}, 31).to(h).transpose(0, 1)
                              : tgtest::rnd({300, 4096}, 31).to(h);
        Tensor b = tgtest::rnd({4096, 8}, 32).to(h);
        check_within_float32_error(matmul(a, b), a, b);
      }
    }
  }
}

TEST_CASE("bfloat16 matmul at every layout: within float32's error, on both CPU paths") {
  // Where cpu_gemm_bf16_native() holds, oneDNN multiplies bfloat16 itself: transposed and
  // column-major operands, rows with padding, batches with a broadcast operand, one row; the
  // layouts it is not handed widen.
  INFO("native bfloat16 GEMM here: " << cpu_gemm_bf16_native());
  for (bool widen : {false, true}) {
    CAPTURE(widen);
    std::optional<WidenedGemm> widened;
    if (widen) widened.emplace();
    const Tensor a = tgtest::rnd({3, 37, 70}, 41).to(kBFloat16);
    const Tensor b = tgtest::rnd({3, 70, 29}, 42).to(kBFloat16);
    const Tensor at = tgtest::rnd({3, 70, 37}, 43).to(kBFloat16).transpose(1, 2);
    const Tensor bt = tgtest::rnd({3, 29, 70}, 44).to(kBFloat16).transpose(1, 2);
    const Tensor a_padded = tgtest::rnd({3, 37, 80}, 45).to(kBFloat16).narrow(2, 0, 70);
    const Tensor b_shared = tgtest::rnd({70, 29}, 46).to(kBFloat16);
    for (const auto& xy : std::vector<std::pair<Tensor, Tensor>>{
             {a, b}, {at, b}, {a, bt}, {at, bt}, {a_padded, b}, {a, b_shared}}) {
      const Tensor &x = xy.first, &y = xy.second;  // not a binding: CAPTURE's lambda reads them
      CAPTURE(x.strides());
      CAPTURE(y.strides());
      const Tensor got = matmul(x, y);
      CHECK(got.dtype() == kBFloat16);
      CHECK(got.sizes() == Shape{3, 37, 29});
      check_within_float32_error(got, x, y);
    }
    // Batches of two dims: one stride steps through them (one native call), a weight shared by
    // every item (stride 0), a weight shared along one dim only and a batch in permuted order
    // (no single stride: widened).
    const Tensor a4 = tgtest::rnd({2, 3, 37, 70}, 48).to(kBFloat16);
    const Tensor at4 = tgtest::rnd({2, 3, 70, 37}, 49).to(kBFloat16).transpose(2, 3);
    const Tensor b4 = tgtest::rnd({2, 3, 70, 29}, 50).to(kBFloat16);
    const Tensor b_all = tgtest::rnd({1, 1, 70, 29}, 51).to(kBFloat16);
    const Tensor b_dim1 = tgtest::rnd({1, 3, 70, 29}, 52).to(kBFloat16);
    const Tensor a_permuted = tgtest::rnd({3, 2, 37, 70}, 53).to(kBFloat16).transpose(0, 1);
    for (const auto& xy : std::vector<std::pair<Tensor, Tensor>>{
             {a4, b4}, {at4, b4}, {at4, b_all}, {a4, b_dim1}, {a_permuted, b4}}) {
      const Tensor &x = xy.first, &y = xy.second;  // not a binding: CAPTURE's lambda reads them
      CAPTURE(x.strides());
      CAPTURE(y.strides());
      const Tensor got = matmul(x, y);
      CHECK(got.sizes() == Shape{2, 3, 37, 29});
      check_within_float32_error(got, x, y);
    }
    const Tensor row = tgtest::rnd({1, 70}, 47).to(kBFloat16);
    check_within_float32_error(matmul(row, b_shared), row, b_shared);
    CHECK(matmul(zeros({4, 0}, kBFloat16), zeros({0, 5}, kBFloat16))
              .to(kFloat32)
              .to_vector<float>() == std::vector<float>(20, 0.0f));
  }
}

TEST_CASE(
    "fused SwiGLU and RoPE on 16-bit tensors: the float32 result on the same values, rounded "
    "once") {
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.to(kFloat64).to_vector<double>() == b.to(kFloat64).to_vector<double>();
  };
  for (DType h : {kBFloat16, kFloat16}) {
    CAPTURE(h);
    Tensor x = tgtest::rnd({6, 20}, 21, -3, 3).to(h), g = tgtest::rnd({6, 10}, 22).to(h);
    const Tensor x32 = x.to(kFloat32), g32 = g.to(kFloat32);
    CHECK(same(swiglu(x), swiglu(x32).to(h)));
    CHECK(same(swiglu_backward(g, x), swiglu_backward(g32, x32).to(h)));
    // (B, S, H, D) heads read at their strides from (B, H, S, D) memory.
    Tensor q = tgtest::rnd({2, 3, 5, 8}, 23).to(h).transpose(1, 2);
    RopeOptions o;
    o.seq_dim = 1;
    CHECK(same(rope(q, o), rope(q.to(kFloat32), o).to(h)));
  }
}

TEST_CASE("autocast: matmul and sdpa in the low precision, norms, softmax and losses in float32") {
  Tensor x = tgtest::rnd({4, 8}, 21).to(kFloat32).requires_grad_();
  Tensor w = tgtest::rnd({8, 6}, 22).to(kFloat32).requires_grad_();
  Tensor norm_w = ones({6}).requires_grad_();
  Tensor targets = from_vector(std::vector<int64_t>{0, 5, 2, 3}, {4});
  for (DType low : {kBFloat16, kFloat16}) {
    CAPTURE(low);
    Tensor loss;
    {
      AutocastGuard guard(low);
      CHECK(autocast_dtype() == low);
      Tensor h = matmul(x, w);
      CHECK(h.dtype() == low);
      CHECK(h.to(kFloat64).to_vector<double>() ==
            matmul(x.to(low), w.to(low)).to(kFloat64).to_vector<double>());
      CHECK(softmax(h, -1).dtype() == kFloat32);
      CHECK(sum(h).dtype() == kFloat32);
      CHECK(mean(h).dtype() == kFloat32);
      CHECK(add(h, x.narrow(1, 0, 6)).dtype() == kFloat32);  // promotion with a float32 residual
      CHECK(relu(h).dtype() == low);                         // other ops keep their input's dtype
      Tensor q = tgtest::rnd({1, 2, 3, 4}, 23).to(kFloat32);
      CHECK(sdpa(q, q, q).out.dtype() == low);
      CHECK(matmul(x.to(kFloat64), w.to(kFloat64)).dtype() == kFloat64);  // float64 untouched
      Tensor n = rms_norm(h, norm_w);
      CHECK(n.dtype() == kFloat32);
      loss = cross_entropy(n, targets);
      CHECK(loss.dtype() == kFloat32);
      loss.backward();  // inside the scope: backward runs with autocast off all the same
    }
    CHECK(autocast_dtype() == kFloat32);
    CHECK(x.grad().dtype() == kFloat32);
    CHECK(w.grad().dtype() == kFloat32);
    CHECK(norm_w.grad().dtype() == kFloat32);
    // The same loss in float32 with the roundings autocast makes written out: equal.
    Tensor xr = x.detach().to(low).to(kFloat32).requires_grad_();
    Tensor wr = w.detach().to(low).to(kFloat32).requires_grad_();
    Tensor ref =
        cross_entropy(rms_norm(matmul(xr, wr).to(low).to(kFloat32), norm_w.detach()), targets);
    ref.backward();
    CHECK(loss.item<float>() == ref.item<float>());
    // x's gradient is the 16-bit matmul's (g w^T rounded once); the reference's is unrounded.
    const double u = low == kBFloat16 ? 0x1p-8 : 0x1p-11;
    const std::vector<float> gx = x.grad().to_vector<float>(), gr = xr.grad().to_vector<float>();
    for (size_t i = 0; i < gx.size(); ++i) CHECK(std::abs(gx[i] - gr[i]) <= u * std::abs(gr[i]));
    x.zero_grad();
    w.zero_grad();
    norm_w.zero_grad();
  }
  tgtest::check_throws_with_prefix([] { AutocastGuard g(kFloat64); }, "[autocast]", "got float64");
}
