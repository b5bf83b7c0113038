// float64 gradcheck of every elementwise op and view: plain, broadcast and non-contiguous.
#include "test_util.h"

using namespace tg;
using tgtest::rnd;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

namespace {
Tensor leaf(Tensor t) { return t.requires_grad_(true); }
// A (rows, cols) tensor whose memory is column-major: a transposed view.
Tensor strided(int64_t rows, int64_t cols, uint64_t seed, double lo = -1, double hi = 1) {
  return leaf(rnd({cols, rows}, seed, lo, hi).transpose(0, 1));
}
// Every other column of a wider tensor: a sliced view with a non-unit stride.
Tensor sliced(int64_t rows, int64_t cols, uint64_t seed, double lo = -1, double hi = 1) {
  return leaf(rnd({rows, 2 * cols}, seed, lo, hi).slice(1, 0, 2 * cols, 2));
}

// Checks a binary op plain, broadcast both ways and with non-contiguous operands.
void check_binary(Tensor (*op)(const Tensor&, const Tensor&), double lo = -1, double hi = 1) {
  Fn f = [op](const std::vector<Tensor>& x) { return op(x[0], x[1]); };
  CHECK_GRADCHECK(
      f, (std::vector<Tensor>{leaf(rnd({3, 4}, 1, lo, hi)), leaf(rnd({3, 4}, 2, lo, hi))}));
  CHECK_GRADCHECK(f,
                  (std::vector<Tensor>{leaf(rnd({3, 1}, 3, lo, hi)), leaf(rnd({4}, 4, lo, hi))}));
  CHECK_GRADCHECK(f,
                  (std::vector<Tensor>{leaf(rnd({2, 3, 4}, 5, lo, hi)), leaf(rnd({}, 6, lo, hi))}));
  CHECK_GRADCHECK(f, (std::vector<Tensor>{strided(3, 4, 7, lo, hi), sliced(3, 4, 8, lo, hi)}));
}

void check_unary(Tensor (*op)(const Tensor&), double lo = -1, double hi = 1) {
  Fn f = [op](const std::vector<Tensor>& x) { return op(x[0]); };
  CHECK_GRADCHECK(f, std::vector<Tensor>{leaf(rnd({3, 4}, 1, lo, hi))});
  CHECK_GRADCHECK(f, std::vector<Tensor>{strided(3, 4, 2, lo, hi)});
  CHECK_GRADCHECK(f, std::vector<Tensor>{sliced(2, 3, 3, lo, hi)});
}
}  // namespace

TEST_CASE("arithmetic") {
  SUBCASE("add") { check_binary(add); }
  SUBCASE("sub") { check_binary(sub); }
  SUBCASE("mul") { check_binary(mul); }
  SUBCASE("div") { check_binary(div, 0.5, 2.0); }
  SUBCASE("maximum") { check_binary(maximum); }
  SUBCASE("minimum") { check_binary(minimum); }
  SUBCASE("logaddexp") { check_binary(logaddexp, -3, 3); }
  SUBCASE("scalar forms") {
    Fn f = [](const std::vector<Tensor>& x) {
      return add(mul(sub(2.0, x[0]), 3.0), div(1.0, add(x[0], 2.0)));
    };
    CHECK_GRADCHECK(f, std::vector<Tensor>{leaf(rnd({5}, 1))});
  }
}

TEST_CASE("unary") {
  SUBCASE("neg") { check_unary(neg); }
  SUBCASE("exp") { check_unary(exp); }
  SUBCASE("log") { check_unary(log, 0.5, 2.0); }
  SUBCASE("log1p") { check_unary(log1p, -0.5, 2.0); }
  SUBCASE("expm1") { check_unary(expm1, -2, 2); }
  SUBCASE("softplus") { check_unary(softplus, -3, 3); }
  SUBCASE("log_sigmoid") { check_unary(log_sigmoid, -3, 3); }
  SUBCASE("sqrt") { check_unary(sqrt, 0.5, 2.0); }
  SUBCASE("rsqrt") { check_unary(rsqrt, 0.5, 2.0); }
  SUBCASE("abs") { check_unary(abs); }
  SUBCASE("tanh") { check_unary(tanh); }
  SUBCASE("sigmoid") { check_unary(sigmoid); }
  SUBCASE("relu") { check_unary(relu); }
  SUBCASE("silu") { check_unary(silu, -3, 3); }
  SUBCASE("gelu") { check_unary(gelu, -3, 3); }
  SUBCASE("pow") {
    Fn f = [](const std::vector<Tensor>& x) { return pow(x[0], 2.5); };
    CHECK_GRADCHECK(f, std::vector<Tensor>{leaf(rnd({3, 4}, 1, 0.5, 2))});
    CHECK_GRADCHECK(f, std::vector<Tensor>{strided(3, 4, 2, 0.5, 2)});
    Fn g = [](const std::vector<Tensor>& x) { return pow(x[0], -1.0); };
    CHECK_GRADCHECK(g, std::vector<Tensor>{leaf(rnd({4}, 3, 0.5, 2))});
  }
}

TEST_CASE("where and masked_fill") {
  Tensor cond = gt(rnd({3, 4}, 9), 0.0);
  Fn f = [cond](const std::vector<Tensor>& x) { return where(cond, x[0], x[1]); };
  CHECK_GRADCHECK(f, (std::vector<Tensor>{leaf(rnd({3, 4}, 1)), leaf(rnd({4}, 2))}));
  CHECK_GRADCHECK(f, (std::vector<Tensor>{strided(3, 4, 3), leaf(rnd({3, 1}, 4))}));
  Tensor mask = gt(rnd({1, 4}, 10), 0.0);
  Fn g = [mask](const std::vector<Tensor>& x) { return masked_fill(x[0], mask, -2.0); };
  CHECK_GRADCHECK(g, std::vector<Tensor>{sliced(3, 4, 5)});
}

TEST_CASE("views") {
  Fn reshape = [](const std::vector<Tensor>& x) { return mul(x[0].reshape({2, -1}), 2.0); };
  CHECK_GRADCHECK(reshape, std::vector<Tensor>{strided(3, 4, 1)});
  Fn view = [](const std::vector<Tensor>& x) { return exp(x[0].view({4, 3})); };
  CHECK_GRADCHECK(view, std::vector<Tensor>{leaf(rnd({3, 4}, 2))});
  Fn permute = [](const std::vector<Tensor>& x) {
    return mul(x[0].permute({2, 0, 1}), arange(24, kFloat64).reshape({4, 2, 3}));
  };
  CHECK_GRADCHECK(permute, std::vector<Tensor>{leaf(rnd({2, 3, 4}, 3))});
  Fn slice = [](const std::vector<Tensor>& x) { return exp(x[0].slice(1, 1, 4, 2)); };
  CHECK_GRADCHECK(slice, std::vector<Tensor>{strided(3, 5, 4)});
  Fn narrow = [](const std::vector<Tensor>& x) { return tanh(x[0].narrow(0, 1, 2)); };
  CHECK_GRADCHECK(narrow, std::vector<Tensor>{leaf(rnd({4, 2}, 5))});
  Fn expand = [](const std::vector<Tensor>& x) {
    return mul(x[0].expand({2, 3, 4}), arange(24, kFloat64).reshape({2, 3, 4}));
  };
  CHECK_GRADCHECK(expand, std::vector<Tensor>{leaf(rnd({3, 1}, 6))});
  Fn squeeze = [](const std::vector<Tensor>& x) {
    return exp(x[0].unsqueeze(0).squeeze(2).unsqueeze(-1));
  };
  CHECK_GRADCHECK(squeeze, std::vector<Tensor>{leaf(rnd({3, 1}, 7))});
  Fn contiguous = [](const std::vector<Tensor>& x) { return exp(x[0].contiguous()); };
  CHECK_GRADCHECK(contiguous, std::vector<Tensor>{strided(2, 3, 8)});
  Fn to_f32 = [](const std::vector<Tensor>& x) {
    return mul(x[0].to(kFloat32).to(kFloat64), 3.0);  // float32 round trip: gradient 3
  };
  auto r = gradcheck(to_f32, {leaf(from_vector(std::vector<double>{0.5, 0.25}, {2}))},
                     GradcheckOptions{1e-3, 1e-5, 1e-3});
  INFO(r.message);
  CHECK(r.ok);
}
