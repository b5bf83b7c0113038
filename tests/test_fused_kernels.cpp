// The fused kernels (RMSNorm, RoPE, SwiGLU, AdamW, clipping's sum of squares, cross-entropy)
// against float64 and against the composite formulas they replace, values and gradients; their
// determinism across thread counts; AdamW's and the sum of squares' errors.
#include <bit>
#include <cmath>

#include "ops/optimizer_ops.h"
#include "test_util.h"

using namespace tg;
using tgtest::Fn;
using tgtest::leaf;
using tgtest::rnd;

TEST_CASE("fused kernels in float32 agree with float64") {
  Tensor x = rnd({3, 5, 8}, 21), w = rnd({8}, 22), g = rnd({3, 5, 8}, 23);
  auto run = [&](DType t, bool weight) {
    Tensor xi = x.detach().to(t).clone().requires_grad_(true);
    Tensor wi = w.detach().to(t).clone().requires_grad_(true);
    Tensor y = rms_norm(xi, weight ? wi : Tensor(), 1e-5);
    y.backward(g.to(t));
    std::vector<double> out = y.to_vector<double>(), dx = xi.grad().to_vector<double>();
    out.insert(out.end(), dx.begin(), dx.end());
    if (weight) {
      std::vector<double> dw = wi.grad().to_vector<double>();
      out.insert(out.end(), dw.begin(), dw.end());
    }
    return out;
  };
  for (bool weight : {true, false}) {
    tgtest::check_close(run(kFloat32, weight), run(kFloat64, weight), 1e-5);
  }
  RopeOptions o;
  o.seq_dim = -3;
  o.offset = 3;
  tgtest::check_close(rope(x.to(kFloat32), o).to_vector<double>(), rope(x, o).to_vector<double>(),
                      1e-6);
}

TEST_CASE("adamw_update_: the fused kernel against in-place ops, and its errors") {
  Tensor p = rnd({4, 3}, 31), g = rnd({4, 3}, 32), m = rnd({4, 3}, 33), v = rnd({4, 3}, 34, 0, 1);
  AdamWStep s{0.01, 0.9, 0.99, 1e-6, 0.1, 0.5, 0.3};
  Tensor want_m = add(mul(m, 0.9), mul(g, 0.1)), want_v = add(mul(v, 0.99), mul(mul(g, g), 0.01));
  Tensor want_p = sub(mul(p, 1 - 0.01 * 0.1),
                      mul(div(want_m, add(div(sqrt(want_v), std::sqrt(0.3)), 1e-6)), 0.01 / 0.5));
  adamw_update_(p, g, m, v, s);
  tgtest::check_close(p.to_vector<double>(), want_p.to_vector<double>(), 1e-14);
  tgtest::check_close(m.to_vector<double>(), want_m.to_vector<double>(), 1e-15);
  tgtest::check_close(v.to_vector<double>(), want_v.to_vector<double>(), 1e-15);
  Tensor bad = rnd({3, 4}, 1);
  tgtest::check_throws_with_prefix([&] { adamw_update_(p, bad, m, v, s); }, "[adamw_update_]",
                                   "'grad' has shape [3, 4]");
  Tensor strided = rnd({3, 4}, 1).transpose(0, 1);
  tgtest::check_throws_with_prefix([&] { adamw_update_(strided, g, m, v, s); }, "[adamw_update_]",
                                   "contiguous");
  Tensor f32 = rnd({4, 3}, 1).to(kFloat32);
  tgtest::check_throws_with_prefix([&] { adamw_update_(p, g, f32, v, s); }, "[adamw_update_]", "");
  Tensor leafp = rnd({4, 3}, 1).requires_grad_(true);
  tgtest::check_throws_with_prefix([&] { adamw_update_(leafp, g, m, v, s); }, "[adamw_update_]",
                                   "NoGradGuard");
}

namespace {
// f's value and the gradients of sum(f * weights) with respect to each input, as one list.
std::vector<double> value_and_grads(const Fn& f, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> in;
  for (const Tensor& t : inputs) in.push_back(t.detach().clone().requires_grad_(true));
  Tensor y = f(in);
  sum(mul(y, rnd(y.sizes(), 99))).backward();
  std::vector<double> all = y.to_vector<double>();
  for (const Tensor& t : in) {
    std::vector<double> g = t.grad().to_vector<double>();
    all.insert(all.end(), g.begin(), g.end());
  }
  return all;
}
}  // namespace

namespace {
// cross_entropy of logits (..., C) against fixed targets, every fifth one ignored.
Tensor some_targets(const Tensor& logits, Reduction reduction) {
  const Shape batch(logits.sizes().begin(), logits.sizes().end() - 1);
  const int64_t classes = logits.sizes().back();
  std::vector<int64_t> t;
  for (int64_t i = 0; i < numel_of(batch); ++i) t.push_back(i % 5 == 3 ? -100 : (7 * i) % classes);
  CrossEntropyOptions o;
  o.reduction = reduction;
  return cross_entropy(logits, from_vector(t, batch), o);
}
}  // namespace

TEST_CASE("fused kernels match their composite formulas, values and gradients") {
  RopeOptions bshd;  // (B, S, H, D) with an offset
  bshd.seq_dim = -3;
  bshd.offset = 5;
  struct Case {
    const char* name;
    Fn f;
    bool weight;  // takes a second input, the norm's weight
  };
  const std::vector<Case> cases = {
      {"rms_norm", [](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-5); },
       true},
      {"rms_norm, no weight",
       [](const std::vector<Tensor>& in) { return rms_norm(in[0], Tensor(), 0.0); }, false},
      {"swiglu", [](const std::vector<Tensor>& in) { return swiglu(in[0]); }, false},
      {"rope", [](const std::vector<Tensor>& in) { return rope(in[0]); }, false},
      {"rope (B, S, H, D)", [bshd](const std::vector<Tensor>& in) { return rope(in[0], bshd); },
       false},
      {"cross_entropy, per row",
       [](const std::vector<Tensor>& in) { return some_targets(in[0], Reduction::None); }, false},
      {"cross_entropy, mean",
       [](const std::vector<Tensor>& in) { return some_targets(in[0], Reduction::Mean); }, false},
  };
  for (const Case& c : cases) {
    for (bool rows_strided : {false, true}) {
      CAPTURE(c.name);
      CAPTURE(rows_strided);
      // A strided x (its last two dims transposed, or strided rows with adjacent elements) for
      // the comparison, a small one to gradcheck.
      std::vector<Tensor> inputs = {rows_strided ? rnd({2, 4, 3, 6}, 40, -2, 2).transpose(1, 2)
                                                 : rnd({2, 3, 6, 4}, 41, -2, 2).transpose(2, 3)};
      std::vector<Tensor> small = {leaf(rnd({2, 3, 4}, 43))};
      if (c.weight) {
        inputs.push_back(rnd({6}, 42));
        small.push_back(leaf(rnd({4}, 44)));
      }
      std::vector<double> fused = value_and_grads(c.f, inputs), composite;
      {
        FusedKernelsGuard off(false);
        CHECK_FALSE(fused_kernels());
        composite = value_and_grads(c.f, inputs);
        if (!rows_strided) CHECK_GRADCHECK(c.f, small);
      }
      CHECK(fused_kernels());
      tgtest::check_close(fused, composite, 1e-12);
    }
  }
  // The fused backward functions themselves, against their composite formulas.
  Tensor x = rnd({3, 8}, 45), g = rnd({3, 8}, 46), w = rnd({8}, 47);
  Tensor rstd = rsqrt(add(mean(mul(x, x), {-1}), 1e-5));
  Tensor gh = g.narrow(1, 0, 4);
  std::vector<Tensor> fused = rms_norm_backward(g, x, w, rstd);
  Tensor fused_swiglu = swiglu_backward(gh, x);
  FusedKernelsGuard off(false);
  std::vector<Tensor> composite = rms_norm_backward(g, x, w, rstd);
  tgtest::check_close(fused[0].to_vector<double>(), composite[0].to_vector<double>(), 1e-13);
  tgtest::check_close(fused[1].to_vector<double>(), composite[1].to_vector<double>(), 1e-13);
  tgtest::check_close(fused_swiglu.to_vector<double>(), swiglu_backward(gh, x).to_vector<double>(),
                      1e-14);
}

// The unary ops' backward in one pass (elementwise_ops.def's ...Backward) against the composite
// derivative it replaces (fused kernels off): the same bits in float32 and float64, over values
// that reach every branch (zeros of both signs, infinities, NaN, exp's underflow, negative
// arguments of log and sqrt), in unit-stride runs (whole vectors and a tail) and strided ones
// (element by element), with zero, infinite and NaN incoming gradients too.
TEST_CASE("the unary ops' one-pass backward gives the composite's bits") {
  std::vector<double> xs = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-30, -1e-30, 100.0, -100.0};
  for (int i = 0; i < 200; ++i) xs.push_back(-25.0 + 0.2513 * i);
  std::vector<double> gs(xs.size());
  for (size_t i = 0; i < gs.size(); ++i) gs[i] = std::sin(0.7 * static_cast<double>(i)) * 3;
  gs[3] = 0.0;
  gs[17] = INFINITY;
  gs[40] = NAN;
  const int64_t n = static_cast<int64_t>(xs.size());
  const std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>> ops = {
      {"log", +[](const Tensor& x) { return log(x); }},
      {"log1p", +[](const Tensor& x) { return log1p(x); }},
      {"expm1", +[](const Tensor& x) { return expm1(x); }},
      {"sqrt", +[](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", +[](const Tensor& x) { return rsqrt(x); }},
      {"abs", +[](const Tensor& x) { return abs(x); }},
      {"tanh", +[](const Tensor& x) { return tanh(x); }},
      {"sigmoid", +[](const Tensor& x) { return sigmoid(x); }},
      {"relu", +[](const Tensor& x) { return relu(x); }},
      {"silu", +[](const Tensor& x) { return silu(x); }},
      {"gelu", +[](const Tensor& x) { return gelu(x); }},
      {"softplus", +[](const Tensor& x) { return softplus(x); }},
      {"log_sigmoid", +[](const Tensor& x) { return log_sigmoid(x); }},
  };
  const auto same_bits = [](double a, double b) {
    return (std::isnan(a) && std::isnan(b)) ||
           std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
  };
  for (DType t : {kFloat32, kFloat64}) {
    for (bool strided : {false, true}) {
      // strided: every other element of a (2n) tensor
      Tensor x = strided ? from_vector(xs, {n, 1})
                               .expand({n, 2})
                               .contiguous()
                               .to(t)
                               .reshape({2 * n})
                               .slice(0, 0, 2 * n, 2)
                         : from_vector(xs, {n}).to(t);
      Tensor g = from_vector(gs, {n}).to(t);
      for (const auto& [name_c, op_c] : ops) {
        // Copies: doctest's INFO and dx capture them in lambdas.
        const std::string name = name_c;
        const auto op = op_c;
        INFO(name << (t == kFloat32 ? ", float32" : ", float64") << (strided ? ", strided" : ""));
        auto dx = [&] {
          Tensor leaf_x = x.detach().requires_grad_();
          return grad({op(leaf_x)}, {leaf_x}, {g})[0].to_vector<double>();
        };
        const std::vector<double> fused = dx();
        FusedKernelsGuard off(false);
        const std::vector<double> composite = dx();
        int differ = 0;
        for (int64_t i = 0; i < n; ++i) differ += !same_bits(fused[i], composite[i]);
        CHECK(differ == 0);
      }
    }
  }
}

// tanh's derivative from its float32 output y is (1 - y)(1 + y), fused or composite: within 1.5
// ulp of 1 - y^2 (exact in float64 from y's 24 bits), where 1 - y * y with y^2 rounded first is
// up to 1,023 ulp off near y = 1 - 1.2e-4 (x near 4.9).
TEST_CASE("tanh's gradient keeps its accuracy as |y| nears 1") {
  std::vector<float> xs;
  for (int i = 0; i <= 600; ++i) xs.push_back(3.0f + 0.01f * static_cast<float>(i));
  for (int i = 0; i <= 600; i += 7) xs.push_back(-3.0f - 0.01f * static_cast<float>(i));
  const int64_t n = static_cast<int64_t>(xs.size());
  const Tensor x = from_vector(xs, {n});
  const std::vector<float> y = tanh(x).to_vector<float>();
  for (bool fused : {true, false}) {
    CAPTURE(fused);
    FusedKernelsGuard guard(fused);
    Tensor leaf_x = x.detach().requires_grad_();
    const std::vector<float> dx = grad({tanh(leaf_x)}, {leaf_x}, {ones({n})})[0].to_vector<float>();
    int far = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = 1.0 - static_cast<double>(y[i]) * static_cast<double>(y[i]);
      const double ulp =
          std::nextafter(static_cast<float>(want), INFINITY) - static_cast<float>(want);
      far += !(std::abs(dx[i] - want) <= 1.5 * ulp);
    }
    CHECK(far == 0);
  }
}

// Past 64 rows the fused backward sums dw in runs of rows (cpu_model.cpp): against the
// composite formulas in float64, and the same bits in float32 on any thread count.
TEST_CASE("rms_norm_backward: dw summed in runs of rows, the same on any thread count") {
  Tensor x = rnd({203, 24}, 71), g = rnd({203, 24}, 72), w = rnd({24}, 73);
  Tensor rstd = rsqrt(add(mean(mul(x, x), {-1}), 1e-5));
  std::vector<Tensor> fused = rms_norm_backward(g, x, w, rstd);
  std::vector<Tensor> composite;
  {
    FusedKernelsGuard off(false);
    composite = rms_norm_backward(g, x, w, rstd);
  }
  tgtest::check_close(fused[0].to_vector<double>(), composite[0].to_vector<double>(), 1e-13);
  tgtest::check_close(fused[1].to_vector<double>(), composite[1].to_vector<double>(), 1e-12);
  const int threads_before = get_num_threads();
  std::vector<std::vector<float>> dx, dw;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<Tensor> r =
        rms_norm_backward(g.to(kFloat32), x.to(kFloat32), w.to(kFloat32), rstd.to(kFloat32));
    dx.push_back(r[0].to_vector<float>());
    dw.push_back(r[1].to_vector<float>());
  }
  set_num_threads(threads_before);
  for (size_t i = 1; i < dx.size(); ++i) {
    CHECK(dx[i] == dx[0]);
    CHECK(dw[i] == dw[0]);
  }
}

TEST_CASE("adamw_update_: the fused kernel and the composite update agree") {
  Tensor p = rnd({5, 7}, 51), g = rnd({5, 7}, 52), m = rnd({5, 7}, 53), v = rnd({5, 7}, 54, 0, 1);
  Tensor p2 = p.clone(), m2 = m.clone(), v2 = v.clone();
  const AdamWStep s{0.02, 0.8, 0.95, 1e-8, 0.05, 0.2, 0.1};
  adamw_update_(p, g, m, v, s);
  {
    FusedKernelsGuard off(false);
    adamw_update_(p2, g.transpose(0, 1).contiguous().transpose(0, 1), m2, v2, s);
  }
  tgtest::check_close(p.to_vector<double>(), p2.to_vector<double>(), 1e-14);
  tgtest::check_close(m.to_vector<double>(), m2.to_vector<double>(), 1e-15);
  tgtest::check_close(v.to_vector<double>(), v2.to_vector<double>(), 1e-15);
  // float32, 37 elements: whole vectors and a partial one (cpu_model.cpp runs it padded). Equal
  // inputs give equal bits wherever they sit, and the composite agrees.
  Tensor p32 = full({37}, 0.75, kFloat32), g32 = full({37}, -0.3, kFloat32);
  Tensor m32 = full({37}, 0.1, kFloat32), v32 = full({37}, 0.02, kFloat32);
  Tensor p32c = p32.clone(), m32c = m32.clone(), v32c = v32.clone();
  adamw_update_(p32, g32, m32, v32, s);
  {
    FusedKernelsGuard off(false);
    adamw_update_(p32c, g32, m32c, v32c, s);
  }
  for (const std::pair<Tensor, Tensor>& fc : {std::pair{p32, p32c}, {m32, m32c}, {v32, v32c}}) {
    std::vector<float> f = fc.first.to_vector<float>();
    CHECK(std::count(f.begin(), f.end(), f[0]) == 37);
    tgtest::check_close(fc.first.to_vector<double>(), fc.second.to_vector<double>(), 1e-6);
  }
}

TEST_CASE("add_sum_of_squares_: float64 sums, the same on any thread count, and its errors") {
  // 40,000 float32 elements (three of the kernel's chunks) against a sum in long double. A
  // float's square is exact in float64, so only the sum rounds: n positive terms in any order
  // stay within (n - 1) u = 4.4e-12 relative (a float32 sum would be off by ~1e-5).
  Tensor x = rnd({200, 200}, 61, -3, 3).to(kFloat32);
  long double want = 0;
  for (float v : x.to_vector<float>()) want += static_cast<long double>(v) * v;
  const int threads_before = get_num_threads();
  std::vector<double> by_threads;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_num_threads(threads);
    Tensor acc = full({}, 0.5, kFloat64);
    add_sum_of_squares_(acc, x.transpose(0, 1));  // strided: read contiguously first
    const double bound = 4.5e-12;
    CHECK(acc.item<double>() == doctest::Approx(static_cast<double>(want) + 0.5).epsilon(bound));
    Tensor composite = full({}, 0.5, kFloat64);
    {
      FusedKernelsGuard off(false);
      add_sum_of_squares_(composite, x.transpose(0, 1));
    }
    CHECK(composite.item<double>() == doctest::Approx(acc.item<double>()).epsilon(2 * bound));
    by_threads.push_back(acc.item<double>());
  }
  set_num_threads(threads_before);
  CHECK(by_threads[0] == by_threads[1]);
  Tensor acc16 = zeros({}, kFloat64);
  add_sum_of_squares_(acc16, full({3}, 3.0, kBFloat16));
  CHECK(acc16.item<double>() == 27.0);
  Tensor acc = zeros({}, kFloat64);
  tgtest::check_throws_with_prefix([&] { add_sum_of_squares_(acc, ones({2}, kInt64)); },
                                   "[add_sum_of_squares_]", "floating");
  Tensor f32 = zeros({}, kFloat32), vec = zeros({1}, kFloat64);
  tgtest::check_throws_with_prefix([&] { add_sum_of_squares_(f32, x); }, "[add_sum_of_squares_]",
                                   "float64");
  tgtest::check_throws_with_prefix([&] { add_sum_of_squares_(vec, x); }, "[add_sum_of_squares_]",
                                   "scalar (0-d), got shape [1]");
}
