// SDPA's double backward: against sdpa_reference's (autograd through primitive ops) over
// random option combinations, the tiled kernel against the composed one and in float32 and 16
// bits, float64 gradgradcheck with every option, and fully masked rows.
#include <cmath>
#include <random>
#include <utility>

#include "sdpa_dense.h"

using namespace tg;
using namespace sdpa_dense;
using tgtest::rnd;

TEST_CASE("double backward against sdpa_reference's over random option combinations") {
  std::mt19937_64 rng(20261123);
  for (int n = 0; n < 60; ++n) {
    Config c = random_config(rng);
    Inputs in = make_inputs(c, 7000 + 10 * n);
    SdpaOptions o = c.opts;
    if (c.mask_kind) o.mask = in.mask;
    INFO("config " << n << ": " << c.describe());
    auto got = second_order(sdpa, in, c, o, 500 + n);
    auto want = second_order(sdpa_reference, in, c, o, 500 + n);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      // Relative, with an absolute floor: where a gradient is exactly 0 (a row with one key
      // has dq = 0) the reference leaves the roundoff of cancelling O(1) terms, ~1e-17.
      CHECK(max_abs(sub(got[i], want[i])) <= 1e-10 * max_abs(want[i]) + 1e-14);
    }
  }
}

TEST_CASE(
    "the tiled double backward kernel: against the composed one, and in float32 and 16 bits") {
  std::mt19937_64 rng(20261124);
  for (int n = 0; n < 8; ++n) {
    Config c = random_config(rng);
    while (c.Sq <= 64 || c.Skv <= 128) c = random_config(rng);  // several query and key tiles
    const Inputs in = make_inputs(c, 9000 + 10 * n);
    SdpaOptions o = c.opts;
    if (c.mask_kind) o.mask = in.mask;
    INFO("config " << n << ": " << c.describe());
    const auto tiled = second_order(sdpa, in, c, o, 700 + n);
    std::vector<Tensor> composed;
    {
      FusedKernelsGuard off(false);
      composed = second_order(sdpa, in, c, o, 700 + n);
    }
    REQUIRE(tiled.size() == composed.size());
    for (size_t i = 0; i < tiled.size(); ++i) {
      CAPTURE(i);
      CHECK(max_abs(sub(tiled[i], composed[i])) <= 1e-12 * max_abs(composed[i]) + 1e-14);
    }
    // Lower precision against float64 on the same rounded inputs. The 16-bit double backward
    // runs in float32 and rounds its results once; its cotangents (the random weights of l2)
    // are rounded too. Each rounding is 2^-9 relative, so the bound is two bfloat16 ulps of
    // the largest gradient (measured: at most 4.2e-3; float32 at most 5.5e-7).
    for (auto [bound_dt, tol] : {std::pair{kFloat32, 1e-5}, std::pair{kBFloat16, 8e-3}}) {
      const DType dt = bound_dt;  // a copy: clang 14 does not capture structured bindings
      CAPTURE(dt);
      const auto lowered = [dt](const Tensor& t) { return t.defined() ? t.to(dt) : t; };
      const auto rounded = [dt](const Tensor& t) {
        return t.defined() && t.dtype() == kFloat64 ? t.to(dt).to(kFloat64) : t;
      };
      Inputs low{lowered(in.q), lowered(in.k), lowered(in.v),
                 in.mask.defined() && in.mask.dtype() != kBool ? lowered(in.mask) : in.mask,
                 lowered(in.dout)};
      Inputs ref{rounded(in.q), rounded(in.k), rounded(in.v), rounded(in.mask), rounded(in.dout)};
      SdpaOptions lo = o, ro = o;
      if (c.mask_kind) {
        lo.mask = low.mask;
        ro.mask = ref.mask;
      }
      const auto got = second_order(sdpa, low, c, lo, 700 + n);
      const auto want = second_order(sdpa, ref, c, ro, 700 + n);
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].dtype() == dt);
        CHECK(max_abs(sub(got[i].to(kFloat64), want[i])) <= tol * max_abs(want[i]) + 1e-6);
      }
    }
  }
}

TEST_CASE("sdpa is twice differentiable: float64 gradgradcheck with every option") {
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  Tensor q = rnd({1, 2, 4, 3}, 1).requires_grad_(), k = rnd({1, 1, 5, 3}, 2).requires_grad_();
  Tensor v = rnd({1, 1, 5, 2}, 3).requires_grad_(), m = rnd({2, 4, 5}, 4).requires_grad_();
  SUBCASE("causal bottom-right, GQA, float mask with its gradient, Dqk != Dv") {
    const Fn f = causal_bottom_right_with_mask;
    CHECK_GRADGRADCHECK(f, (std::vector<Tensor>{q, k, v, m}));
  }
  SUBCASE("dropout, softcap, ALiBi, bool mask, window, padding") {
    Fn f = [](const std::vector<Tensor>& x) {
      SdpaOptions o;
      o.dropout_p = 0.3;
      o.seed = 7;
      o.softcap = 2.0;
      o.alibi = true;
      o.window = 3;
      o.causal = true;
      o.mask = gt(rnd({4, 5}, 9), -0.7);
      o.seq_len_kv = from_vector(std::vector<int64_t>{4}, {1});
      o.seq_len_q = from_vector(std::vector<int64_t>{3}, {1});
      return sdpa(x[0], x[1], x[2], o).out;
    };
    CHECK_GRADGRADCHECK(f, (std::vector<Tensor>{q, k, v}));
  }
  SUBCASE("softcap with a float mask and its gradient, strided q") {
    Tensor qs = rnd({1, 4, 2, 3}, 5).transpose(1, 2).requires_grad_();
    Fn f = [](const std::vector<Tensor>& x) {
      SdpaOptions o;
      o.softcap = 1.5;
      o.scale = 0.9;
      o.mask = x[3];
      return sdpa(x[0], x[1], x[2], o).out;
    };
    CHECK_GRADGRADCHECK(f, (std::vector<Tensor>{qs, k, v, m}));
  }
  SUBCASE("a third derivative: the double backward is differentiable too") {
    Tensor w = rnd({1, 2, 4, 2}, 6);
    Fn dq = [w](const std::vector<Tensor>& x) {
      EnableGradGuard grad_on;  // gradcheck evaluates f under NoGradGuard
      SdpaOptions o;
      o.softcap = 2.5;
      o.mask = x[3];
      auto g = grad({sdpa(x[0], x[1], x[2], o).out}, {x[0]}, {w}, std::nullopt, true, true);
      return g[0];
    };
    CHECK_GRADGRADCHECK(dq, (std::vector<Tensor>{q, k, v, m}));
  }
}

TEST_CASE("double backward of fully masked rows is zero and finite") {
  Tensor q = rnd({1, 1, 3, 4}, 1).requires_grad_(), k = rnd({1, 1, 3, 4}, 2).requires_grad_();
  Tensor v = rnd({1, 1, 3, 4}, 3).requires_grad_();
  SdpaOptions o;
  o.mask = from_vector(std::vector<bool>{true, false, true, false, false, false, true, true, true},
                       {3, 3});  // row 1 attends to nothing
  Tensor dq = grad({sdpa(q, k, v, o).out}, {q}, {ones({1, 1, 3, 4}, kFloat64)}, std::nullopt, true,
                   true)[0];
  auto g2 = grad({sum(mul(dq, dq))}, {q, k, v});
  for (const Tensor& t : g2)
    for (double x : t.to_vector<double>()) CHECK(std::isfinite(x));
  auto gq = g2[0].to_vector<double>();
  for (int c = 0; c < 4; ++c) CHECK(gq[4 + c] == 0.0);
}

TEST_CASE("few query rows a head: the double backward sees the forward's scores bit for bit") {
  // As test_sdpa's case of that name: at a softmax scale of 1e12, float32 scores summed in
  // another order than the forward's made the double backward's P = exp(S - lse) inf.
  for (int64_t sq : {1, 5}) {
    CAPTURE(sq);
    const Tensor q = rnd({1, 4, sq, 16}, 1).to(kFloat32), k = rnd({1, 2, 24, 16}, 2).to(kFloat32);
    const Tensor v = rnd({1, 2, 24, 16}, 3).to(kFloat32),
                 dout = rnd({1, 4, sq, 16}, 4).to(kFloat32);
    SdpaOptions o;
    o.scale = 1e12;
    for (const Tensor& t : tgtest::second_order(sdpa, q, k, v, dout, Tensor(), o, 5))
      CHECK(tgtest::all_finite(t));
  }
}

TEST_CASE("16-bit inputs: the double backward takes statistics that match its own scores") {
  // bfloat16 q, k, v whose forward multiplies on AMX (cpu_sdpa_amx(), more than 64 query rows):
  // its scores at a softmax scale of 1e12 differ from the float32 double backward's by more than
  // exp's range, so with the forward's statistics every second-order gradient was inf or NaN.
  const Tensor q = rnd({1, 2, 70, 16}, 1).to(kBFloat16), k = rnd({1, 2, 70, 16}, 2).to(kBFloat16);
  const Tensor v = rnd({1, 2, 70, 16}, 3).to(kBFloat16);
  const Tensor dout = rnd({1, 2, 70, 16}, 4).to(kBFloat16);
  SdpaOptions o;
  o.scale = 1e12;
  for (const Tensor& t : tgtest::second_order(sdpa, q, k, v, dout, Tensor(), o, 5))
    CHECK(tgtest::all_finite(t));
}
