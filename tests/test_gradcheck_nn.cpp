// float64 gradcheck of the nn ops and of join/split.
#include "test_util.h"

using namespace tg;
using tgtest::Fn;
using tgtest::leaf;
using tgtest::rnd;

TEST_CASE("softmax and log_softmax") {
  for (int64_t dim : {0, 1, -1}) {
    Fn f = [dim](const std::vector<Tensor>& x) { return softmax(x[0], dim); };
    CHECK_GRADCHECK(f, std::vector<Tensor>{leaf(rnd({4, 3}, 1, -3, 3).transpose(0, 1))});
    Fn g = [dim](const std::vector<Tensor>& x) { return log_softmax(x[0], dim); };
    CHECK_GRADCHECK(g, std::vector<Tensor>{leaf(rnd({3, 4}, 2, -3, 3))});
  }
}

TEST_CASE("cross_entropy: mean, sum, none, ignore_index, extra batch dims") {
  Tensor t = from_vector(std::vector<int64_t>{2, 0, 1, 2}, {4});
  Fn mean_f = [t](const std::vector<Tensor>& x) { return cross_entropy(x[0], t); };
  CHECK_GRADCHECK(mean_f, std::vector<Tensor>{leaf(rnd({3, 4}, 1, -2, 2).transpose(0, 1))});
  CrossEntropyOptions o;
  o.ignore_index = 1;
  o.reduction = Reduction::Sum;
  Fn sum_f = [t, o](const std::vector<Tensor>& x) { return cross_entropy(x[0], t, o); };
  CHECK_GRADCHECK(sum_f, std::vector<Tensor>{leaf(rnd({4, 3}, 2, -2, 2))});
  o.reduction = Reduction::None;
  Tensor t2 = from_vector(std::vector<int64_t>{0, 3, 1, 2, 3, 0}, {2, 3});
  Fn none_f = [t2, o](const std::vector<Tensor>& x) { return cross_entropy(x[0], t2, o); };
  CHECK_GRADCHECK(none_f, std::vector<Tensor>{leaf(rnd({2, 3, 4}, 3, -2, 2))});
}

TEST_CASE("embedding with repeated ids") {
  Tensor ids = from_vector(std::vector<int64_t>{1, 3, 1, 0, 3, 3}, {2, 3});
  Fn f = [ids](const std::vector<Tensor>& x) { return mul(embedding(x[0], ids), x[1]); };
  CHECK_GRADCHECK(f, (std::vector<Tensor>{leaf(rnd({4, 2}, 1)), leaf(rnd({3, 2}, 2))}));
}

TEST_CASE("dropout at a fixed seed") {
  Fn f = [](const std::vector<Tensor>& x) { return dropout(mul(x[0], 2.0), 0.4, 123, 8); };
  CHECK_GRADCHECK(f, std::vector<Tensor>{leaf(rnd({3, 5}, 1).transpose(0, 1))});
}

TEST_CASE("cat, stack, split, chunk") {
  Fn c = [](const std::vector<Tensor>& x) { return cat({x[0], exp(x[1]), x[0]}, 1); };
  CHECK_GRADCHECK(
      c, (std::vector<Tensor>{leaf(rnd({3, 2}, 1).transpose(0, 1)), leaf(rnd({2, 1}, 2))}));
  Fn s = [](const std::vector<Tensor>& x) { return stack({x[0], mul(x[1], 2.0)}, -1); };
  CHECK_GRADCHECK(s, (std::vector<Tensor>{leaf(rnd({2, 3}, 3)), leaf(rnd({2, 3}, 4))}));
  Fn sp = [](const std::vector<Tensor>& x) {
    auto parts = split(x[0], 2, 1);
    return add(mul(parts[0], parts[1]), exp(parts[2]).expand({3, 2}));
  };
  CHECK_GRADCHECK(sp, std::vector<Tensor>{leaf(rnd({3, 5}, 5))});
  // one node for all parts: an unused part gets zeros; a strided input
  Fn sp_one = [](const std::vector<Tensor>& x) {
    return exp(split(x[0], std::vector<int64_t>{1, 3, 1}, 0)[1]);
  };
  CHECK_GRADCHECK(sp_one, std::vector<Tensor>{leaf(rnd({4, 5}, 6).transpose(0, 1))});
  Fn ch = [](const std::vector<Tensor>& x) {
    auto parts = chunk(x[0], 2, 0);
    return matmul(parts[0], parts[1].transpose(0, 1));
  };
  CHECK_GRADCHECK(ch, std::vector<Tensor>{leaf(rnd({4, 3}, 6))});
}

TEST_CASE("a small MLP's loss end to end") {
  Tensor x = rnd({5, 3}, 1);
  Tensor t = from_vector(std::vector<int64_t>{0, 1, 1, 0, 1}, {5});
  Fn f = [x, t](const std::vector<Tensor>& p) {
    Tensor h = gelu(add(matmul(x, p[0]), p[1]));
    return cross_entropy(matmul(h, p[2]), t);
  };
  CHECK_GRADCHECK(
      f, (std::vector<Tensor>{leaf(rnd({3, 4}, 2)), leaf(rnd({4}, 3)), leaf(rnd({4, 2}, 4))}));
}

TEST_CASE("gradcheck itself catches a wrong gradient") {
  // The detached factor hides half of d(x^2)/dx: gradcheck must notice.
  Fn broken = [](const std::vector<Tensor>& x) { return mul(x[0], x[0].detach()); };
  auto r = gradcheck(broken, {leaf(rnd({3}, 2))});
  CHECK(!r.ok);
  CHECK(r.message.find("MISMATCH") != std::string::npos);
  tgtest::check_throws_with_prefix(
      [] {
        gradcheck([](const std::vector<Tensor>& x) { return x[0]; }, {ones({2}).requires_grad_()});
      },
      "[gradcheck]", "float64");
}
