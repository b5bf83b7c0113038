// The tape: backward, grad, accumulation, retain_graph, in-place safety, anomaly mode, memory.
#include "test_util.h"

using namespace tg;
using tgtest::check_throws_with_prefix;
using tgtest::rnd;

TEST_CASE("backward fills leaf gradients and accumulates until zero_grad") {
  Tensor x = from_vector(std::vector<double>{1, 2, 3}, {3}).requires_grad_();
  Tensor y = tg::sum(mul(x, x));
  y.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  tg::sum(mul(x, 3.0)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5, 7, 9});
  x.zero_grad();
  CHECK(!x.grad().defined());
  tg::sum(x).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 1, 1});
}

TEST_CASE("a gradient used twice is summed; the grad does not alias other tensors") {
  Tensor a = ones({2}, kFloat64).requires_grad_();
  Tensor b = ones({2}, kFloat64).requires_grad_();
  Tensor y = add(a, b);
  y.backward(full({2}, 2.0, kFloat64));
  CHECK(a.grad().impl()->storage != b.grad().impl()->storage);
  Tensor z = tg::sum(add(mul(a, a), a));
  a.zero_grad();
  z.backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3, 3});
}

TEST_CASE("a weight used transposed gets its gradient in its own layout, without a copy") {
  Tensor x = rnd({5, 3}, 1), w = rnd({4, 3}, 2).requires_grad_();
  Tensor y = matmul(x, w.transpose(0, 1));
  Tensor gy = rnd({5, 4}, 3);
  reset_kernel_profile();
  set_kernel_profiling(true);
  y.backward(gy);
  set_kernel_profiling(false);
  auto prof = kernel_profile();
  CHECK(prof["matmul"].calls == 1);
  CHECK(prof["copy"].calls == 0);  // neither a transposed product nor a clone into .grad
  CHECK(w.grad().is_contiguous());
  tgtest::check_close(w.grad().to_vector<double>(),
                      matmul(gy.transpose(0, 1), x).to_vector<double>(), 1e-15);
  // A gradient the caller still holds is copied, never adopted: changing it later leaves
  // .grad alone.
  Tensor v = rnd({4, 3}, 4).requires_grad_(), gv = rnd({4, 3}, 5);
  v.reshape({12}).reshape({4, 3}).backward(gv);
  const std::vector<double> before = gv.to_vector<double>();
  gv.mul_(2.0);
  CHECK(v.grad().to_vector<double>() == before);
}

TEST_CASE("backward on a non-scalar needs a gradient") {
  Tensor x = ones({2, 3}, kFloat64).requires_grad_();
  Tensor y = mul(x, 2.0);
  check_throws_with_prefix([&] { y.backward(); }, "[backward]", "shape [2, 3]");
  y.backward(ones({2, 3}, kFloat64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>(6, 2.0));
  check_throws_with_prefix([&] { mul(x, 2.0).backward(ones({3}, kFloat64)); }, "[backward]",
                           "expected [2, 3]");
}

TEST_CASE("a second backward through a freed graph is an error unless retain_graph") {
  Tensor x = ones({3}, kFloat64).requires_grad_();
  Tensor y = tg::sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().to_vector<double>()[0] == doctest::Approx(2 * std::exp(1.0)));
  check_throws_with_prefix([&] { y.backward(); }, "[backward]", "second time");
}

TEST_CASE("tg::grad returns gradients without touching .grad()") {
  Tensor x = from_vector(std::vector<double>{1, 2}, {2}).requires_grad_();
  Tensor w = from_vector(std::vector<double>{3, 4}, {2}).requires_grad_();
  Tensor h = mul(x, w);
  Tensor y = tg::sum(mul(h, h));
  auto gs = grad({y}, {x, h});
  CHECK(gs[0].to_vector<double>() == std::vector<double>{18, 64});  // 2 h w
  CHECK(gs[1].to_vector<double>() == std::vector<double>{6, 16});   // 2 h
  CHECK(!x.grad().defined());
  CHECK(!w.grad().defined());
  Tensor unused = ones({2}, kFloat64).requires_grad_();
  Tensor y2 = tg::sum(x);
  CHECK(grad({y2}, {unused})[0].to_vector<double>() == std::vector<double>{0, 0});
  check_throws_with_prefix([&] { grad({tg::sum(x)}, {unused}, {}, false, false); }, "[grad]",
                           "not used");
}

TEST_CASE("detach and NoGradGuard stop recording") {
  Tensor x = ones({2}, kFloat64).requires_grad_();
  Tensor d = x.detach();
  CHECK(!d.requires_grad());
  CHECK(d.impl()->storage == x.impl()->storage);
  {
    NoGradGuard ng;
    Tensor y = mul(x, 2.0);
    CHECK(!y.requires_grad());
    CHECK(!grad_enabled());
  }
  CHECK(grad_enabled());
  Tensor y = mul(x, 2.0);
  CHECK(y.requires_grad());
  CHECK(y.grad_fn()->name == "mul");
  check_throws_with_prefix([&] { tg::sum(d).backward(); }, "[backward]", "does not require grad");
}

TEST_CASE("the tape replays in reverse execution order across shared subgraphs") {
  Tensor x = from_vector(std::vector<double>{0.5}, {1}).requires_grad_();
  Tensor a = exp(x);
  Tensor b = mul(a, a);  // a used twice
  Tensor c = add(b, a);
  Tensor y = tg::sum(mul(c, x));
  y.backward();
  // y = x (e^{2x} + e^x); dy/dx = e^{2x} + e^x + x (2 e^{2x} + e^x)
  double e = std::exp(0.5), want = e * e + e + 0.5 * (2 * e * e + e);
  CHECK(x.grad().item<double>() == doctest::Approx(want).epsilon(1e-12));
  CHECK(b.grad_fn()->sequence_nr > a.grad_fn()->sequence_nr);
}

TEST_CASE("in-place ops: refused on tensors that require grad, detected after saving") {
  Tensor w = ones({3}, kFloat64).requires_grad_();
  check_throws_with_prefix([&] { w.add_(1.0); }, "[add_]", "NoGradGuard");
  {
    NoGradGuard ng;
    w.add_(ones({3}, kFloat64), 0.5);
    w.mul_(2.0);
  }
  CHECK(w.to_vector<double>() == std::vector<double>{3, 3, 3});
  Tensor a = ones({3}, kFloat64);
  Tensor y = tg::sum(mul(w, a));  // saves a for w's gradient
  a.fill_(5.0);
  check_throws_with_prefix([&] { y.backward(); }, "[backward]", "modified in place");
  Tensor b = ones({3}, kFloat64);
  Tensor y2 = tg::sum(mul(w, b));
  y2.backward();
  b.zero_();  // after backward: fine
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 1, 1});
  Tensor z = zeros({2, 2}, kFloat64);
  z.copy_(from_vector(std::vector<double>{1, 2}, {2}));
  CHECK(z.to_vector<double>() == std::vector<double>{1, 2, 1, 2});
  check_throws_with_prefix([&] { z.copy_(ones({3}, kFloat64)); }, "[copy_]");
}

TEST_CASE("index_copy_: each source slice to its index, on either path") {
  // dim 0 of a contiguous tensor is one kernel; other dims or strides copy slice by slice.
  const Tensor index = from_vector(std::vector<int64_t>{3, 0}, {2});
  const Tensor src = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor rows = zeros({4, 3}, kFloat64);
  rows.index_copy_(0, index, src);
  CHECK(rows.to_vector<double>() == std::vector<double>{4, 5, 6, 0, 0, 0, 0, 0, 0, 1, 2, 3});
  Tensor cols = zeros({3, 4}, kFloat64);
  cols.index_copy_(1, index, src.transpose(0, 1));
  CHECK(cols.to_vector<double>() == std::vector<double>{4, 0, 0, 1, 5, 0, 0, 2, 6, 0, 0, 3});
  Tensor strided = zeros({3, 4}, kFloat64);
  strided.transpose(0, 1).index_copy_(0, index, src);  // the same cells, through a view
  CHECK(strided.to_vector<double>() == cols.to_vector<double>());
  Tensor pool = zeros({2, 2, 1, 2}, kFloat32);  // a paged cache's blocks, rows written in place
  pool.view({4, 1, 2}).index_copy_(0, from_vector(std::vector<int64_t>{2}, {1}), ones({1, 1, 2}));
  CHECK(pool.to_vector<float>() == std::vector<float>{0, 0, 0, 0, 1, 1, 0, 0});
  check_throws_with_prefix(
      [&] {
        rows.index_copy_(0, from_vector(std::vector<int64_t>{3, 3}, {2}), src);
      },
      "[index_copy_]", "holds 3 twice");
  check_throws_with_prefix(
      [&] {
        rows.index_copy_(0, from_vector(std::vector<int64_t>{4, 0}, {2}), src);
      },
      "[index_copy_]", "holds 4 at 0, outside [0, 4)");
  check_throws_with_prefix([&] { rows.index_copy_(1, index, src); }, "[index_copy_]",
                           "must have shape [4, 2]");
  check_throws_with_prefix([&] { rows.index_copy_(0, index.to(kFloat64), src); }, "[index_copy_]",
                           "int64");
  check_throws_with_prefix([&] { rows.index_copy_(0, index, src.to(kFloat32)); }, "[index_copy_]",
                           "source");
  Tensor w = zeros({4, 3}, kFloat64).requires_grad_();
  check_throws_with_prefix([&] { w.index_copy_(0, index, src); }, "[index_copy_]", "NoGradGuard");
}

TEST_CASE("anomaly mode names the op whose backward made a NaN") {
  Tensor x = from_vector(std::vector<double>{0.0, 1.0}, {2}).requires_grad_();
  {
    Tensor y = tg::sum(sqrt(x));  // d sqrt(x)/dx = inf at 0
    y.backward();
    CHECK(!std::isfinite(x.grad().to_vector<double>()[0]));
  }
  x.zero_grad();
  AnomalyGuard guard;
  Tensor y = tg::sum(sqrt(x));
  check_throws_with_prefix([&] { y.backward(); }, "[anomaly]", "'sqrt'");
}

TEST_CASE("1,000 training steps do not grow live storage") {
  Generator gen{11, 0};
  Tensor w1 = mul(randn({8, 16}, gen, kFloat32), 0.3).requires_grad_();
  Tensor w2 = mul(randn({16, 1}, gen, kFloat32), 0.3).requires_grad_();
  Tensor x = randn({32, 8}, gen, kFloat32);
  Tensor target = tg::sum(x, {1}, true);
  auto step = [&] {
    Tensor h = tanh(matmul(x, w1));
    Tensor loss = mean(pow(sub(matmul(h, w2), target), 2.0));
    loss.backward();
    NoGradGuard ng;
    w1.add_(w1.grad(), -0.05);
    w2.add_(w2.grad(), -0.05);
    w1.zero_grad();
    w2.zero_grad();
    return loss.item<float>();
  };
  float first = step();
  for (int i = 0; i < 10; ++i) step();
  int64_t count = live_storage_count(), bytes = live_storage_bytes();
  float last = 0;
  for (int i = 0; i < 1000; ++i) last = step();
  CHECK(live_storage_count() == count);
  CHECK(live_storage_bytes() == bytes);
  CHECK(last < first);
}

TEST_CASE("a post-accumulate-grad hook runs once per backward, when the leaf's gradient is final") {
  // w feeds two matmuls, b one add near the loss: b is final first, w only after both matmuls.
  Tensor w = rnd({3, 3}, 1).requires_grad_(), b = rnd({3}, 2).requires_grad_();
  Tensor x = rnd({4, 3}, 3);
  std::vector<std::string> events;
  std::vector<std::vector<double>> seen_w;
  HookHandle hw = register_post_accumulate_grad_hook(w, [&](const Tensor& t) {
    events.push_back("w");
    seen_w.push_back(t.grad().to_vector<double>());
  });
  HookHandle hb = register_post_accumulate_grad_hook(b, [&](const Tensor&) {
    events.push_back("b");
    queue_callback([&] { events.push_back("end"); });
  });
  auto loss = [&] { return tg::sum(add(matmul(matmul(x, w), w), b)); };
  loss().backward();
  CHECK(events == std::vector<std::string>{"b", "w", "end"});
  REQUIRE(seen_w.size() == 1);
  CHECK(seen_w[0] == w.grad().to_vector<double>());  // the whole gradient, both uses summed
  loss().backward();  // accumulates: the hook sees the sum of both passes
  CHECK(events.size() == 6);
  CHECK(seen_w[1] == w.grad().to_vector<double>());
  hw.remove();
  w.zero_grad();
  loss().backward();
  CHECK(events.size() == 8);  // b and end only
  CHECK(events.back() == "end");
  { HookHandle moved = std::move(hb); }  // dropping the handle removes the hook
  loss().backward();
  CHECK(events.size() == 8);
  CHECK(!w.impl()->grad_hooks);
}

TEST_CASE("post-accumulate-grad hooks: unused leaves, tg::grad, a leaf as the output, errors") {
  Tensor a = rnd({2}, 1).requires_grad_(), unused = rnd({2}, 2).requires_grad_();
  int calls_a = 0, calls_unused = 0;
  HookHandle ha = register_post_accumulate_grad_hook(a, [&](const Tensor&) { ++calls_a; });
  HookHandle hu =
      register_post_accumulate_grad_hook(unused, [&](const Tensor&) { ++calls_unused; });
  // The second input of mul(a, unused.detach()) has no edge; the graph never reaches `unused`.
  tg::sum(mul(a, unused.detach())).backward();
  CHECK(calls_a == 1);
  CHECK(calls_unused == 0);
  tg::grad({tg::sum(a)}, {a});  // fills no .grad(): no hook
  CHECK(calls_a == 1);
  a.backward(ones({2}, a.options()));  // the leaf itself as the output
  CHECK(calls_a == 2);
  check_throws_with_prefix([&] { (void)register_post_accumulate_grad_hook(mul(a, 2.0), {}); },
                           "[register_post_accumulate_grad_hook]", "must be a leaf");
  check_throws_with_prefix([&] { (void)register_post_accumulate_grad_hook(a, {}); },
                           "[register_post_accumulate_grad_hook]", "'hook' is empty");
  check_throws_with_prefix([] { queue_callback([] {}); }, "[queue_callback]",
                           "outside a backward pass");
  HookHandle thrower =
      register_post_accumulate_grad_hook(a, [](const Tensor&) { fail("test", "hook failed"); });
  check_throws_with_prefix([&] { tg::sum(a).backward(); }, "[test]", "hook failed");
  thrower.remove();
  // The failed pass left no callback queue behind on this thread.
  check_throws_with_prefix([] { queue_callback([] {}); }, "[queue_callback]",
                           "outside a backward pass");
}

TEST_CASE("set_grad makes a tensor the .grad, later backwards accumulate into it") {
  Tensor x = from_vector(std::vector<double>{1, 2}, {2}).requires_grad_();
  x.set_grad(from_vector(std::vector<double>{10, 20}, {2}));
  tg::sum(mul(x, 3.0)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{13, 23});
  x.set_grad(Tensor());
  CHECK(!x.grad().defined());
}
