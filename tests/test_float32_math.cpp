// The float32 math functions the CPU kernels evaluate on whole vectors (exp, log, log1p, expm1,
// tanh, sigmoid, silu, softplus, log_sigmoid, sqrt, rsqrt, logaddexp): their accuracy against
// float64, their special values, and the same bits from the vector loop (unit-stride runs) as
// from the lane-by-lane one (strided runs and a run's tail), checked through the public ops.
#include <bit>
#include <cmath>
#include <cstdint>

#include "ops/unary_op.h"
#include "test_util.h"

using namespace tg;

namespace {
// Each row's two elements of a (n, 2) float32 tensor, if they are the same bits; else NaN.
std::vector<float> pairs_of(const Tensor& t) {
  const auto v = t.to_vector<float>();
  std::vector<float> out(v.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] =
        std::bit_cast<uint32_t>(v[2 * i]) == std::bit_cast<uint32_t>(v[2 * i + 1]) ? v[2 * i] : NAN;
  return out;
}
}  // namespace

// tg::tanh on float32 runs simd::tanh on unit-stride runs and scalar::tanh_f32 on strided ones and
// a run's tail, which must agree bit for bit: checked through the op, both loops.
TEST_CASE("tg::tanh on float32 is within 2 ulp of a double-precision tanh") {
  std::vector<float> xs;
  xs.reserve(2920 + 9);
  for (int i = 0; i < 2920; ++i) xs.push_back(-20.f + 0.0137f * static_cast<float>(i));
  xs.insert(xs.end(), {0.f, -0.f, 1e-8f, -1e-8f, 0.625f, -0.625f, 0.6249f, 9.1f, -9.1f});
  Tensor t = from_vector(xs, {static_cast<int64_t>(xs.size())});
  auto got = tanh(t).to_vector<float>();
  CHECK(pairs_of(tanh(t.unsqueeze(1).expand({-1, 2}))) == got);  // x read at stride 0
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = static_cast<float>(std::tanh(static_cast<double>(xs[i])));
    INFO("x = " << xs[i] << ": got " << got[i] << ", want " << want);
    CHECK(std::abs(got[i] - want) <= 2.4e-7f * std::abs(want));
    CHECK(std::signbit(got[i]) == std::signbit(want));
  }
}

// sigmoid, silu, silu_grad, softplus and log_sigmoid on float32 evaluate their functors on whole
// vectors in unit-stride runs (their exp: simd::exp) and lane by lane elsewhere: the same bits
// both ways, and sigmoid within 3 ulp of a double-precision reference.
TEST_CASE(
    "sigmoid, silu, silu_grad, softplus, log_sigmoid on float32: the vector loop gives the scalar "
    "loop's bits") {
  std::vector<float> xs;
  xs.reserve(3000 + 5);
  for (int i = 0; i < 3000; ++i) xs.push_back(-30.f + 0.02f * static_cast<float>(i));
  xs.insert(xs.end(), {-200.f, 200.f, 0.f, -0.f, 1e-20f});
  Tensor t = from_vector(xs, {static_cast<int64_t>(xs.size())});
  for (auto op :
       {+[](const Tensor& x) { return sigmoid(x); }, +[](const Tensor& x) { return silu(x); },
        +[](const Tensor& x) { return silu_grad(x); }, +[](const Tensor& x) { return softplus(x); },
        +[](const Tensor& x) { return log_sigmoid(x); }}) {
    CHECK(pairs_of(op(t.unsqueeze(1).expand({-1, 2}))) == op(t).to_vector<float>());
  }
  auto got = sigmoid(t).to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(xs[i])));
    INFO("x = " << xs[i] << ": got " << got[i] << ", want " << want);
    CHECK(std::abs(got[i] - want) <= 3.6e-7 * want + 1e-45);
  }
}

// tg::log on float32 runs simd::log on unit-stride runs and scalar::log_f32 on strided ones and a
// run's tail: the same bits both ways, within 1 ulp of a double-precision log (0.92 at most over
// every 97th positive float, a /tmp sweep), special values exact.
TEST_CASE(
    "tg::log on float32 is within 1 ulp of a double-precision log, the same bits both loops") {
  std::vector<float> xs;
  xs.reserve(21500 + 2001 + 9);
  for (uint32_t u = 1; u < 0x7f800000u; u += 99991) xs.push_back(std::bit_cast<float>(u));
  for (int i = -1000; i <= 1000; ++i) xs.push_back(1.0f + 1.19e-7f * static_cast<float>(i));
  const std::vector<float> special = {0.f, -0.f, -1.f,   INFINITY,     -INFINITY,
                                      NAN, 1.f,  1e-45f, 3.4028235e38f};
  xs.insert(xs.end(), special.begin(), special.end());
  Tensor t = from_vector(xs, {static_cast<int64_t>(xs.size())});
  const std::vector<float> got = log(t).to_vector<float>();
  const std::vector<float> lanes = pairs_of(log(t.unsqueeze(1).expand({-1, 2})));
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = std::log(static_cast<double>(xs[i]));
    INFO("x = " << xs[i] << ": got " << got[i] << ", lanes " << lanes[i] << ", want " << want);
    CHECK(std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(lanes[i]));
    if (std::isnan(want)) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want) || want == 0) {
      CHECK(got[i] == want);
    } else {
      CHECK(std::abs(got[i] - want) <= std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23));
    }
  }
}

// log1p and expm1 on float32 run simd::log1p / simd::expm1 on unit-stride runs and
// scalar::log1p_f32 / expm1_f32 lane by lane elsewhere: the same bits both ways, within 1 ulp of
// float64's (at most 0.88 and 0.99 over a fifth of all floats, a /tmp sweep), special values exact.
TEST_CASE("tg::log1p and tg::expm1 on float32: within 1 ulp, the same bits both loops") {
  std::vector<float> xs;
  xs.reserve(2 * 21500 + 4002 + 12);
  for (uint32_t u = 1; u < 0x7f800000u; u += 99991) {
    xs.push_back(std::bit_cast<float>(u));
    xs.push_back(-std::bit_cast<float>(u));
  }
  // Around the ends of log1p's direct interval and of expm1's n = 0 (+-ln2/2).
  for (int i = -1000; i <= 1000; ++i) {
    for (float c : {-0.2928932f, 0.4142135f, -0.3465736f, 0.3465736f})
      xs.push_back(c + 1.5e-6f * static_cast<float>(i));
  }
  const std::vector<float> special = {0.f, -0.f,   -1.f, -0.99999994f, INFINITY, -INFINITY,
                                      NAN, 1e-45f, -2.f, 88.7f,        88.73f,   -17.5f};
  xs.insert(xs.end(), special.begin(), special.end());
  Tensor t = from_vector(xs, {static_cast<int64_t>(xs.size())});
  for (const bool is_log1p : {true, false}) {
    const auto op = [&](const Tensor& x) { return is_log1p ? log1p(x) : expm1(x); };
    const std::vector<float> got = op(t).to_vector<float>();
    const std::vector<float> lanes = pairs_of(op(t.unsqueeze(1).expand({-1, 2})));
    for (size_t i = 0; i < xs.size(); ++i) {
      const double x = xs[i], want = is_log1p ? std::log1p(x) : std::expm1(x);
      INFO((is_log1p ? "log1p" : "expm1")
           << "(" << xs[i] << "): got " << got[i] << ", lanes " << lanes[i] << ", want " << want);
      CHECK(std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(lanes[i]));
      const float wf = static_cast<float>(want);
      if (std::isnan(want)) {
        CHECK(std::isnan(got[i]));
      } else if (std::isinf(wf) || want == 0) {
        CHECK(std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(wf));
      } else {
        CHECK(std::abs(got[i] - want) <= std::ldexp(1.0, std::max(std::ilogb(wf), -126) - 23));
      }
    }
  }
}

// sqrt and rsqrt on float32 take whole vectors in unit-stride runs (simd::sqrt) and std::sqrt lane
// by lane elsewhere: both correctly rounded, so the same bits, and sqrt is the float of the exact
// root; the special values as std::sqrt gives them.
TEST_CASE("sqrt, rsqrt on float32: the vector loop gives the scalar loop's bits") {
  std::vector<float> xs;
  xs.reserve(3000 + 8);
  for (int i = 0; i < 3000; ++i)
    xs.push_back(0.0371f * static_cast<float>(i) * static_cast<float>(i));
  xs.insert(xs.end(), {0.f, -0.f, 1e-40f, 3.4e38f, -1.f, INFINITY, -INFINITY, NAN});
  Tensor t = from_vector(xs, {static_cast<int64_t>(xs.size())});
  for (auto op :
       {+[](const Tensor& x) { return sqrt(x); }, +[](const Tensor& x) { return rsqrt(x); }}) {
    const std::vector<float> vec = op(t).to_vector<float>();
    const std::vector<float> lanes = pairs_of(op(t.unsqueeze(1).expand({-1, 2})));
    for (size_t i = 0; i < xs.size(); ++i) {
      INFO("x = " << xs[i] << ": vector " << vec[i] << ", lanes " << lanes[i]);
      CHECK(std::bit_cast<uint32_t>(vec[i]) == std::bit_cast<uint32_t>(lanes[i]));
    }
  }
  const std::vector<float> got = sqrt(t).to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    INFO("x = " << xs[i]);
    CHECK(std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(std::sqrt(xs[i])));
  }
}

// tg::exp on float32 runs simd::exp on unit-stride runs and scalar::exp_f32 on strided ones and a
// run's tail, which must agree bit for bit: checked here through the op, both loops.
TEST_CASE("tg::exp on float32 is within 2 ulp of a double-precision exp, exact at the edges") {
  std::vector<float> xs;
  xs.reserve(14599 + 7 + 3 * 80);
  for (int i = 0; i < 14599; ++i) xs.push_back(-110.f + 0.0137f * static_cast<float>(i));
  xs.insert(xs.end(), {0.f, -0.f, 1e-8f, -1e-8f, 88.7f, -87.3f, -103.9f});
  // Every float around the edges: overflow above 88.7228, subnormal results below -87.34, 0 below
  // -103.97 (simd::exp takes 2^n and these selects in other steps than exp_f32).
  for (float edge : {88.7228f, -87.3365f, -103.972f}) {
    float x = edge - 2e-4f;
    for (int i = 0; i < 80; ++i, x = std::nextafter(x, 100.f)) xs.push_back(x);
  }
  Tensor t = from_vector(xs, {static_cast<int64_t>(xs.size())});
  auto got = exp(t).to_vector<float>();
  CHECK(pairs_of(exp(t.unsqueeze(1).expand({-1, 2}))) == got);  // x read at stride 0
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = std::exp(static_cast<double>(xs[i]));
    INFO("x = " << xs[i] << ": got " << got[i] << ", want " << want);
    if (want > 3.4028234e38) {
      CHECK(got[i] == INFINITY);
    } else if (xs[i] < -103.97208f) {
      CHECK(got[i] == 0.f);
    } else if (want <
               1.2e-38) {  // subnormal results: absolute error of a couple of subnormal steps
      CHECK(std::abs(got[i] - want) <= 4e-45 + 2.4e-7 * want);
    } else {
      CHECK(std::abs(got[i] - want) <= 2.4e-7 * want);
    }
  }
  // NaNs come out as they went in, a signaling one and a payload too, from both loops.
  std::vector<float> nans(31, 1.f);
  nans[3] = std::bit_cast<float>(0x7f800001u);   // signaling
  nans[9] = std::bit_cast<float>(0xffc12345u);   // quiet, negative, with a payload
  nans[30] = std::bit_cast<float>(0x7fa00000u);  // signaling, in the scalar tail
  Tensor tn = from_vector(nans, {31});           // 31: one vector of 16 and a tail of 15
  const auto vec_nans = exp(tn).to_vector<float>();
  const auto lane_nans = exp(tn.unsqueeze(1).expand({-1, 2})).to_vector<float>();
  for (int i : {3, 9, 30}) {
    CHECK(std::bit_cast<uint32_t>(vec_nans[i]) == std::bit_cast<uint32_t>(nans[i]));
    CHECK(std::bit_cast<uint32_t>(lane_nans[2 * i]) == std::bit_cast<uint32_t>(nans[i]));
  }
  auto edge = exp(from_vector(std::vector<float>{-INFINITY, INFINITY, NAN, 100.f, -200.f}, {5}))
                  .to_vector<float>();
  CHECK(edge[0] == 0.f);
  CHECK(edge[1] == INFINITY);
  CHECK(std::isnan(edge[2]));
  CHECK(edge[3] == INFINITY);
  CHECK(edge[4] == 0.f);
}

// logaddexp's one kernel (whole vectors in unit-stride runs, b also splatted as softplus's 0)
// gives the bits of the composite it replaced, ties, infinities and NaN included.
TEST_CASE("logaddexp on float32: one kernel, the composite's bits") {
  const int64_t n = 203;
  std::vector<float> av(n), bv(n);
  for (int64_t i = 0; i < n; ++i) {
    av[i] = 0.37f * static_cast<float>(i % 41) - 7.0f;
    bv[i] = i % 5 == 0 ? av[i] : 0.29f * static_cast<float>(i % 37) - 5.0f;
  }
  av[3] = bv[3] = INFINITY;
  av[8] = bv[8] = -INFINITY;
  av[13] = INFINITY;
  av[17] = NAN;
  bv[19] = NAN;
  av[21] = -0.f;
  bv[21] = 0.f;
  const Tensor a = from_vector(av, {n}), b = from_vector(bv, {n});
  const auto composite = [](const Tensor& x, const Tensor& y) {
    return add(maximum(x, y), log1p(exp(where(eq(x, y), 0.0, neg(abs(sub(x, y)))))));
  };
  const auto same_bits = [](const Tensor& got, const Tensor& want) {
    const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i) {
      INFO(i << ": got " << g[i] << ", want " << w[i]);
      CHECK((std::bit_cast<uint32_t>(g[i]) == std::bit_cast<uint32_t>(w[i]) ||
             (std::isnan(g[i]) && std::isnan(w[i]))));
    }
  };
  same_bits(logaddexp(a, b), composite(a, b));
  const Tensor zero = zeros({}, kFloat32);
  same_bits(softplus(a), composite(a, zero));
}
