// float64 gradcheck of views and of what the op table (op_table.h) does not cover.
#include "test_util.h"

using namespace tg;
using tgtest::Fn;
using tgtest::leaf;
using tgtest::rnd;

namespace {
// A (rows, cols) tensor whose memory is column-major: a transposed view.
Tensor strided(int64_t rows, int64_t cols, uint64_t seed, double lo = -1, double hi = 1) {
  return leaf(rnd({cols, rows}, seed, lo, hi).transpose(0, 1));
}
}  // namespace

// Each elementwise op alone, plain, strided and broadcast, is gradchecked from the op table
// (test_op_table.cpp); here what a table row does not say.
TEST_CASE("scalar forms and a negative power") {
  Fn f = [](const std::vector<Tensor>& x) {
    return add(mul(sub(2.0, x[0]), 3.0), div(1.0, add(x[0], 2.0)));
  };
  CHECK_GRADCHECK(f, std::vector<Tensor>{leaf(rnd({5}, 1))});
  Fn g = [](const std::vector<Tensor>& x) { return pow(x[0], -1.0); };
  CHECK_GRADCHECK(g, std::vector<Tensor>{leaf(rnd({4}, 3, 0.5, 2))});
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
