// float64 gradcheck of reductions and matmul, including broadcast and strided inputs.
#include "test_util.h"

using namespace tg;
using tgtest::Fn;
using tgtest::leaf;
using tgtest::rnd;

namespace {
Tensor strided3(uint64_t seed) { return leaf(rnd({4, 3, 2}, seed).permute({2, 1, 0})); }  // (2,3,4)
}  // namespace

TEST_CASE("sum and mean over dims") {
  for (bool keep : {false, true}) {
    Fn f = [keep](const std::vector<Tensor>& x) { return tg::sum(x[0], {0, 2}, keep); };
    CHECK_GRADCHECK(f, std::vector<Tensor>{strided3(1)});
    Fn g = [keep](const std::vector<Tensor>& x) { return mean(x[0], {-1}, keep); };
    CHECK_GRADCHECK(g, std::vector<Tensor>{strided3(2)});
  }
  Fn all = [](const std::vector<Tensor>& x) { return mean(mul(x[0], x[0])); };
  CHECK_GRADCHECK(all, std::vector<Tensor>{leaf(rnd({2, 3}, 3))});
}

TEST_CASE("max and min send the gradient to the first extremum") {
  Fn f = [](const std::vector<Tensor>& x) { return tg::max(x[0], {1}); };
  CHECK_GRADCHECK(f, std::vector<Tensor>{strided3(4)});
  Fn g = [](const std::vector<Tensor>& x) { return tg::min(x[0], {0, 2}, true); };
  CHECK_GRADCHECK(g, std::vector<Tensor>{strided3(5)});
  Fn h = [](const std::vector<Tensor>& x) { return tg::max(x[0]); };
  CHECK_GRADCHECK(h, std::vector<Tensor>{leaf(rnd({3, 4}, 6))});
  // ties: only the first maximum gets the gradient
  Tensor t = from_vector(std::vector<double>{1, 3, 3, 2}, {4}).requires_grad_();
  tg::max(t).backward();
  CHECK(t.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0});
}

TEST_CASE("logsumexp and var") {
  Fn f = [](const std::vector<Tensor>& x) { return logsumexp(x[0], {2}); };
  CHECK_GRADCHECK(f, std::vector<Tensor>{strided3(7)});
  Fn g = [](const std::vector<Tensor>& x) { return logsumexp(mul(x[0], 100.0), {0, 1}, true); };
  CHECK_GRADCHECK(g, std::vector<Tensor>{leaf(rnd({2, 3, 2}, 8))});
  Fn v = [](const std::vector<Tensor>& x) { return var(x[0], {1}); };
  CHECK_GRADCHECK(v, std::vector<Tensor>{strided3(9)});
  Fn v0 = [](const std::vector<Tensor>& x) { return var(x[0], {}, 0, true); };
  CHECK_GRADCHECK(v0, std::vector<Tensor>{leaf(rnd({5}, 10))});
}

TEST_CASE("matmul: 2-D, transposed, batched with broadcast, 1-D") {
  Fn f = [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); };
  CHECK_GRADCHECK(f, (std::vector<Tensor>{leaf(rnd({3, 4}, 1)), leaf(rnd({4, 2}, 2))}));
  CHECK_GRADCHECK(f, (std::vector<Tensor>{leaf(rnd({4, 3}, 3).transpose(0, 1)),
                                          leaf(rnd({2, 4}, 4).transpose(0, 1))}));
  CHECK_GRADCHECK(f, (std::vector<Tensor>{leaf(rnd({2, 1, 3, 4}, 5)), leaf(rnd({3, 4, 2}, 6))}));
  CHECK_GRADCHECK(f, (std::vector<Tensor>{leaf(rnd({4}, 7)), leaf(rnd({2, 4, 3}, 8))}));
  CHECK_GRADCHECK(f, (std::vector<Tensor>{leaf(rnd({3, 4}, 9)), leaf(rnd({4}, 10))}));
  CHECK_GRADCHECK(f, (std::vector<Tensor>{leaf(rnd({4}, 11)), leaf(rnd({4}, 12))}));
  CHECK_GRADCHECK(
      f, (std::vector<Tensor>{leaf(rnd({3, 8}, 13).slice(1, 0, 8, 2)), leaf(rnd({4, 2}, 14))}));
}
