// Higher-order gradients: create_graph on backward and tg::grad, gradgradcheck (and that it
// can fail), the fused kernels twice differentiable, and three uses people recognise: a
// Hessian-vector product, a gradient penalty, one inner step of MAML. The op table's
// gradgradchecks are in test_op_table.cpp, SDPA's in test_sdpa_double_backward.cpp.
#include "test_util.h"

using namespace tg;
using tgtest::Fn;
using tgtest::leaf;
using tgtest::rnd;

namespace {
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

TEST_CASE("create_graph: the second derivative of x^3 through tg::grad and backward") {
  Tensor x = leaf(from_vector(std::vector<double>{0.5, -1.5, 2.0}, {3}));
  SUBCASE("tg::grad") {
    Tensor y = sum(pow(x, 3.0));
    Tensor g = grad({y}, {x}, {}, std::nullopt, true, /*create_graph=*/true)[0];
    CHECK(g.requires_grad());
    tgtest::check_close(vals(g), {0.75, 6.75, 12.0});
    Tensor gg = grad({sum(g)}, {x})[0];
    CHECK_FALSE(gg.requires_grad());  // no create_graph: a plain gradient
    tgtest::check_close(vals(gg), {3.0, -9.0, 12.0});
  }
  SUBCASE("backward: .grad keeps its graph, accumulates out of place, and the graph is kept") {
    Tensor y = sum(pow(x, 3.0));
    y.backward(Tensor(), std::nullopt, /*create_graph=*/true);
    Tensor g1 = x.grad();
    CHECK(g1.requires_grad());
    y.backward(Tensor(), std::nullopt, true);  // retain_graph defaulted to true: no error
    Tensor g2 = x.grad();
    tgtest::check_close(vals(g1), {0.75, 6.75, 12.0});  // not changed in place
    tgtest::check_close(vals(g2), {1.5, 13.5, 24.0});
    x.zero_grad();  // the .grad refers to the graph, which refers to x
    sum(g2).backward();
    tgtest::check_close(vals(x.grad()), {6.0, -18.0, 24.0});
    x.zero_grad();
  }
  SUBCASE("without create_graph nothing is recorded and the graph is freed") {
    Tensor y = sum(pow(x, 3.0));
    Tensor g = grad({y}, {x})[0];
    CHECK_FALSE(g.requires_grad());
    tgtest::check_throws_with_prefix([&] { grad({y}, {x}); }, "[backward]", "a second time");
  }
  SUBCASE("a gradient of the cotangent: d/dv of d<v, f>/dx") {
    Tensor v = leaf(from_vector(std::vector<double>{1.0, 2.0, 3.0}, {3}));
    Tensor g = grad({mul(x, x)}, {x}, {v}, std::nullopt, true, true)[0];  // 2 x v
    tgtest::check_close(vals(grad({sum(g)}, {v})[0]), {1.0, -3.0, 4.0});
  }
}

TEST_CASE("gradgradcheck fails on a backward that is right once but not differentiable") {
  // y = x^2 whose backward 2 g x uses x's data only: its first derivative is right, its
  // second derivative (through x) is lost.
  Fn square = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    Tensor y = mul(x.detach(), x.detach());
    record("square", {x}, {&y}, [xd = x.detach()](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{mul(mul(g[0], xd), 2.0)};
    });
    return y;
  };
  std::vector<Tensor> in{leaf(rnd({4}, 3))};
  CHECK(gradcheck(square, in).ok);
  GradcheckResult r = gradgradcheck(square, in);
  CHECK_FALSE(r.ok);
  CHECK(r.inputs.size() == 2);  // x, then the random cotangent
  CHECK_FALSE(r.inputs[0].ok);
  CHECK(r.inputs[1].ok);  // linear in the cotangent: that part is right
}

TEST_CASE("fused kernels are twice differentiable, fused or composed") {
  for (bool fused : {true, false}) {
    CAPTURE(fused);
    FusedKernelsGuard mode(fused);
    Fn norm = [](const std::vector<Tensor>& x) { return rms_norm(x[0], Tensor(), 1e-5); };
    CHECK_GRADGRADCHECK(norm, std::vector<Tensor>{leaf(rnd({3, 5}, 1))});
    Fn norm_w = [](const std::vector<Tensor>& x) { return rms_norm(x[0], x[1], 1e-5); };
    CHECK_GRADGRADCHECK(
        norm_w, (std::vector<Tensor>{leaf(rnd({4, 3}, 2).transpose(0, 1)), leaf(rnd({4}, 3))}));
    Fn ce = [](const std::vector<Tensor>& x) {
      Tensor t = from_vector(std::vector<int64_t>{2, -100, 0, 4}, {4});
      return cross_entropy(x[0], t, {.ignore_index = -100, .reduction = Reduction::None});
    };
    CHECK_GRADGRADCHECK(ce, std::vector<Tensor>{leaf(rnd({4, 5}, 4, -2, 2))});
    Fn glu = [](const std::vector<Tensor>& x) { return swiglu(x[0]); };
    CHECK_GRADGRADCHECK(glu, std::vector<Tensor>{leaf(rnd({6, 3}, 5, -2, 2).transpose(0, 1))});
    Fn emb = [](const std::vector<Tensor>& x) {
      Tensor ids = from_vector(std::vector<int64_t>{1, 0, 1, 3}, {2, 2});
      return mul(embedding(x[0], ids), embedding(x[0], ids));
    };
    CHECK_GRADGRADCHECK(emb, std::vector<Tensor>{leaf(rnd({4, 3}, 6))});
    Fn rot = [](const std::vector<Tensor>& x) {
      return mul(rope(x[0], {}), rope(x[0], RopeOptions{.offset = 2}));
    };
    CHECK_GRADGRADCHECK(rot, std::vector<Tensor>{leaf(rnd({1, 3, 4}, 7))});
  }
}

TEST_CASE("views, joins and conversions are twice differentiable") {
  Fn f = [](const std::vector<Tensor>& x) {
    Tensor a = x[0].transpose(0, 1).slice(0, 1, 3).reshape({-1});
    Tensor b = cat({a, x[0].narrow(1, 0, 1).expand({3, 2}).reshape({-1})}, 0);
    return mul(b.to(kFloat64), exp(b));
  };
  CHECK_GRADGRADCHECK(f, std::vector<Tensor>{leaf(rnd({3, 4}, 8))});
}

namespace {
// A small MLP score: sum(tanh(x W1) w2) for x (n, 3).
Tensor mlp_score(const Tensor& x, const Tensor& w1, const Tensor& w2) {
  return sum(matmul(tanh(matmul(x, w1)), w2));
}
}  // namespace

TEST_CASE("a Hessian-vector product against finite differences of the gradient") {
  Tensor w1 = rnd({3, 5}, 11), w2 = rnd({5, 1}, 12);
  Tensor x = leaf(rnd({2, 3}, 13)), v = rnd({2, 3}, 14);
  Tensor g = grad({mlp_score(x, w1, w2)}, {x}, {}, std::nullopt, true, true)[0];
  Tensor hv = grad({sum(mul(g, v))}, {x})[0];
  const double eps = 1e-5;
  auto grad_at = [&](double t) {
    Tensor xt = leaf(add(x.detach(), mul(v, t)));
    return grad({mlp_score(xt, w1, w2)}, {xt})[0];
  };
  Tensor fd = div(sub(grad_at(eps), grad_at(-eps)), 2 * eps);
  tgtest::check_close(vals(hv), vals(fd), 1e-8);
}

namespace {
// A WGAN-GP-style critic loss: mean(D(fake)) - mean(D(real)) + lambda (|dD/dx| - 1)^2 on
// interpolates, the norm per sample of the critic's input gradient (create_graph).
Tensor critic_loss(const Tensor& w1, const Tensor& w2, const Tensor& real, const Tensor& fake,
                   const Tensor& mix) {
  EnableGradGuard grad_on;  // gradcheck evaluates under NoGradGuard
  auto critic = [&](const Tensor& x) { return matmul(tanh(matmul(x, w1)), w2); };
  Tensor xi = add(mul(real, mix), mul(fake, sub(1.0, mix))).detach().requires_grad_();
  Tensor dx = grad({sum(critic(xi))}, {xi}, {}, std::nullopt, true, true)[0];
  Tensor norm = sqrt(add(sum(mul(dx, dx), {1}), 1e-12));
  Tensor penalty = mean(mul(sub(norm, 1.0), sub(norm, 1.0)));
  return add(sub(mean(critic(fake)), mean(critic(real))), mul(penalty, 10.0));
}
}  // namespace

TEST_CASE("a gradient penalty: its parameter gradient checked, then a few training steps") {
  Tensor real = rnd({6, 3}, 21), fake = rnd({6, 3}, 22, -0.5, 0.5), mix = rnd({6, 1}, 23, 0, 1);
  Tensor w1 = leaf(rnd({3, 4}, 24)), w2 = leaf(rnd({4, 1}, 25));
  Fn loss = [&](const std::vector<Tensor>& p) { return critic_loss(p[0], p[1], real, fake, mix); };
  CHECK_GRADCHECK(loss, (std::vector<Tensor>{w1, w2}));

  nn::NamedTensors params{{"w1", w1}, {"w2", w2}};
  nn::SGD opt(params, {.lr = 0.02});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    Tensor l = critic_loss(w1, w2, real, fake, mix);
    (step == 0 ? first : last) = l.item<double>();
    w1.zero_grad();
    w2.zero_grad();
    l.backward();
    opt.step();
  }
  CHECK(std::isfinite(last));
  CHECK(last < first - 0.1);
}

namespace {
// MAML on y = x w + b: one inner SGD step on the support set (create_graph, so the step is
// differentiated), then the loss of the adapted parameters on the query set.
Tensor maml_loss(const Tensor& w, const Tensor& b, const Tensor& xs, const Tensor& ys,
                 const Tensor& xq, const Tensor& yq, double inner_lr) {
  EnableGradGuard grad_on;
  auto mse = [](const Tensor& pred, const Tensor& y) {
    Tensor d = sub(pred, y);
    return mean(mul(d, d));
  };
  Tensor support = mse(add(matmul(xs, w), b), ys);
  auto g = grad({support}, {w, b}, {}, std::nullopt, true, true);
  Tensor w2 = sub(w, mul(g[0], inner_lr)), b2 = sub(b, mul(g[1], inner_lr));
  return mse(add(matmul(xq, w2), b2), yq);
}
}  // namespace

TEST_CASE("one inner step of MAML: the meta-gradient checked, then meta-training") {
  // Tasks y = a x + c with a, c drawn per task.
  auto task = [](uint64_t seed) {
    std::vector<Tensor> t;
    Tensor ac = rnd({2}, seed, -1, 1);
    double a = ac.to_vector<double>()[0], c = ac.to_vector<double>()[1];
    for (uint64_t part : {1, 2}) {
      Tensor x = rnd({5, 1}, seed * 10 + part, -2, 2);
      t.push_back(x);
      t.push_back(add(mul(x, a), c));
    }
    return t;  // xs, ys, xq, yq
  };
  Tensor w = leaf(rnd({1, 1}, 31)), b = leaf(rnd({1}, 32));
  std::vector<Tensor> t0 = task(40);
  Fn meta = [&](const std::vector<Tensor>& p) {
    return maml_loss(p[0], p[1], t0[0], t0[1], t0[2], t0[3], 0.1);
  };
  CHECK_GRADCHECK(meta, (std::vector<Tensor>{w, b}));
  CHECK_GRADGRADCHECK(meta, (std::vector<Tensor>{w, b}));

  // Meta-training lowers the query loss after one inner step, averaged over held-out tasks.
  auto held_out = [&] {
    double s = 0;
    for (uint64_t k = 0; k < 8; ++k) {
      auto t = task(900 + k);
      s += maml_loss(w, b, t[0], t[1], t[2], t[3], 0.1).item<double>();
    }
    return s / 8;
  };
  const double before = held_out();
  nn::NamedTensors params{{"w", w}, {"b", b}};
  nn::SGD opt(params, {.lr = 0.05});
  for (uint64_t step = 0; step < 40; ++step) {
    auto t = task(100 + step);
    Tensor l = maml_loss(w, b, t[0], t[1], t[2], t[3], 0.1);
    w.zero_grad();
    b.zero_grad();
    l.backward();
    opt.step();
  }
  CHECK(held_out() < before);
}
