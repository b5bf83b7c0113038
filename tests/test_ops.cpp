// Forward values of every op against analytic spot values or a plain reference loop.
#include <signal.h>
#include <sys/time.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "ops/unary_op.h"
#include "test_util.h"

using namespace tg;
using tgtest::check_close;
using tgtest::rnd;

// Each elementwise op's values against a float64 reference, float64 and float32, plain,
// strided and broadcast: test_op_table.cpp. Here the spot values and edges a table row does not
// say.
TEST_CASE("elementwise spot values") {
  Tensor p = from_vector(std::vector<double>{0.25, 1.0, 4.0}, {3});
  check_close(sqrt(p).to_vector<double>(), {0.5, 1.0, 2.0});
  check_close(rsqrt(p).to_vector<double>(), {2.0, 1.0, 0.5});
  check_close(pow(p, 1.5).to_vector<double>(), {0.125, 1.0, 8.0});
  CHECK(gelu(from_vector(std::vector<float>{1.0f}, {1})).item<float>() ==
        doctest::Approx(0.841192).epsilon(1e-5));
}

TEST_CASE("log1p, expm1 and the stable composites softplus, log_sigmoid, logaddexp") {
  std::vector<double> xs = {-30.0, -2.0, -1e-10, 0.0, 1e-10, 0.7, 40.0};
  Tensor x = from_vector(xs, {7});
  std::vector<double> l1p, em1, sp, ls;
  for (double v : xs) {
    l1p.push_back(std::log1p(std::abs(v)));
    em1.push_back(std::expm1(v));
    sp.push_back(v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v)));
    ls.push_back(-(v < 0 ? -v + std::log1p(std::exp(v)) : std::log1p(std::exp(-v))));
  }
  check_close(log1p(abs(x)).to_vector<double>(), l1p, 1e-15);
  check_close(expm1(x).to_vector<double>(), em1, 1e-15);
  check_close(softplus(x).to_vector<double>(), sp, 1e-15);
  check_close(log_sigmoid(x).to_vector<double>(), ls, 1e-15);
  // Large arguments neither overflow nor lose the answer; float32 as well.
  Tensor big = from_vector(std::vector<float>{1000.f, -1000.f}, {2});
  CHECK(softplus(big).to_vector<float>() == std::vector<float>{1000.f, 0.f});
  CHECK(log_sigmoid(big).to_vector<float>() == std::vector<float>{0.f, -1000.f});
  // logaddexp: ties add log 2 (infinite ones too), -inf is the identity, NaN propagates.
  const double inf = INFINITY;
  Tensor a = from_vector(std::vector<double>{1.0, 3.0, -inf, inf, -inf, 0.5, NAN}, {7});
  Tensor b = from_vector(std::vector<double>{1.0, -inf, -inf, inf, 2.0, 0.25, 1.0}, {7});
  std::vector<double> got = logaddexp(a, b).to_vector<double>();
  check_close({got[0], got[1], got[4], got[5]},
              {1 + std::log(2.0), 3.0, 2.0, 0.5 + std::log1p(std::exp(-0.25))}, 1e-15);
  CHECK(got[2] == -inf);
  CHECK(got[3] == inf);
  CHECK(std::isnan(got[6]));
  // The gradient at a tie is 1/2 to each side (softplus'(0) = sigmoid(0) = 1/2).
  Tensor t = zeros({1}, kFloat64).requires_grad_(true);
  softplus(t).backward();
  CHECK(t.grad().item<double>() == 0.5);
  Tensor u = full({1}, 2.0, kFloat64).requires_grad_(true), w = full({1}, 2.0, kFloat64);
  logaddexp(u, w.requires_grad_(true)).backward();
  CHECK(u.grad().item<double>() == 0.5);
  CHECK(w.grad().item<double>() == 0.5);
  tgtest::check_throws_with_prefix([] { softplus(zeros({2}, kInt64)); }, "[softplus]", "float");
  tgtest::check_throws_with_prefix([] { log_sigmoid(zeros({2}, kInt64)); }, "[log_sigmoid]",
                                   "float");
  CHECK(logaddexp(a, zeros({7}, kFloat32)).dtype() == kFloat64);  // promoted like add
  tgtest::check_throws_with_prefix([&] { logaddexp(a, zeros({2}, kFloat64)); }, "[logaddexp]",
                                   "not broadcastable");
  tgtest::check_throws_with_prefix([] { log1p(zeros({2}, kInt64)); }, "[log1p]", "float");
  // Infinite ties take 1/2 each too (sigmoid(inf - inf) would be NaN).
  Tensor ia = full({2}, inf, kFloat64).requires_grad_(true);
  Tensor ib = from_vector(std::vector<double>{inf, 1.0}, {2}).requires_grad_(true);
  sum(logaddexp(ia, ib)).backward();
  CHECK(ia.grad().to_vector<double>() == std::vector<double>{0.5, 1.0});
  CHECK(ib.grad().to_vector<double>() == std::vector<double>{0.5, 0.0});
}

TEST_CASE("elementwise ops refuse dtypes outside their domain; abs(-0.0) is +0.0") {
  Tensor flags = from_vector(std::vector<bool>{true, false}, {2});
  tgtest::check_throws_with_prefix([&] { add(flags, flags); }, "[add]",
                                   "dtype bool, which this op does not take");
  tgtest::check_throws_with_prefix([] { unary_op(UnaryOp::Exp, zeros({2}, kInt64)); }, "[unary_op]",
                                   "dtype int64");
  CHECK(logical_and(flags, flags).to_vector<bool>() == std::vector<bool>{true, false});
  // The scalar overloads report an undefined tensor by the op's name.
  tgtest::check_throws_with_prefix([] { add(Tensor(), 1.0); }, "[add]", "undefined");
  tgtest::check_throws_with_prefix([] { div(2.0, Tensor()); }, "[div]", "undefined");
  CHECK(!std::signbit(abs(from_vector(std::vector<double>{-0.0}, {1})).item<double>()));
  CHECK(!std::signbit(abs(from_vector(std::vector<float>{-0.0f}, {1})).item<float>()));
}

TEST_CASE("binary ops broadcast like NumPy") {
  Tensor a = from_vector(std::vector<double>{1, 2, 3}, {3, 1});
  Tensor b = from_vector(std::vector<double>{10, 20}, {2});
  CHECK(add(a, b).sizes() == Shape{3, 2});
  check_close(add(a, b).to_vector<double>(), {11, 21, 12, 22, 13, 23});
  check_close(sub(a, b).to_vector<double>(), {-9, -19, -8, -18, -7, -17});
  check_close(mul(a, b).to_vector<double>(), {10, 20, 20, 40, 30, 60});
  check_close(div(b, a).to_vector<double>(), {10, 20, 5, 10, 10.0 / 3, 20.0 / 3});
  check_close((a * 2.0 + 1.0).to_vector<double>(), {3, 5, 7});
  check_close((1.0 - a).to_vector<double>(), {0, -1, -2});
  check_close((6.0 / a).to_vector<double>(), {6, 3, 2});
  Tensor c = from_vector(std::vector<double>{2, 2, 2}, {3, 1});
  check_close(maximum(a, c).to_vector<double>(), {2, 2, 3});
  check_close(minimum(a, c).to_vector<double>(), {1, 2, 2});
  CHECK(gt(a, c).to_vector<bool>() == std::vector<bool>{false, false, true});
  CHECK(eq(a, 2.0).to_vector<bool>() == std::vector<bool>{false, true, false});
  CHECK(logical_not(eq(a, 2.0)).to_vector<bool>() == std::vector<bool>{true, false, true});
  Tensor i = from_vector(std::vector<int64_t>{7, -3}, {2});
  CHECK(add(i, 1.0).to_vector<int64_t>() == std::vector<int64_t>{8, -2});
  CHECK(abs(i).to_vector<int64_t>() == std::vector<int64_t>{7, 3});
}

TEST_CASE("strided and broadcast operands give the same answers as contiguous ones") {
  Tensor x = rnd({4, 5}, 1), y = rnd({5, 4}, 2);
  Tensor xt = y.transpose(0, 1);  // non-contiguous (4, 5)
  check_close(mul(x, xt).to_vector<double>(), mul(x, xt.contiguous()).to_vector<double>());
  check_close(exp(xt).to_vector<double>(), exp(xt.contiguous()).to_vector<double>());
  Tensor col = rnd({4, 1}, 3);
  check_close(add(x, col).to_vector<double>(),
              add(x, col.expand({4, 5}).contiguous()).to_vector<double>());
  Tensor big = rnd({300, 200}, 4);  // large enough to run in parallel chunks
  check_close(sigmoid(big.transpose(0, 1)).contiguous().to_vector<double>(),
              sigmoid(big).transpose(0, 1).contiguous().to_vector<double>());
}

TEST_CASE("binary ops with a transposed operand (the CPU's tiled path) against index arithmetic") {
  // 70 x 130: whole tiles and partial ones; the transposed operand first or second, the other
  // contiguous or a broadcast row, and a batch dim outside.
  const int64_t B = 2, R = 70, C = 130;
  const Tensor a = rnd({B, R, C}, 31), bt = rnd({B, C, R}, 32), row = rnd({C}, 33);
  const std::vector<double> av = a.to_vector<double>(), bv = bt.to_vector<double>();
  const std::vector<double> rv = row.to_vector<double>();
  const Tensor b = bt.transpose(1, 2);  // (B, R, C), read across its rows
  const std::vector<double> sum_ab = add(a, b).to_vector<double>();
  const std::vector<double> diff_ba = sub(b, a).to_vector<double>();
  const std::vector<double> prod_brow = mul(b, row).to_vector<double>();
  int64_t wrong = 0;
  for (int64_t n = 0; n < B; ++n) {
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        const size_t i = static_cast<size_t>((n * R + r) * C + c);
        const double x = av[i], y = bv[static_cast<size_t>((n * C + c) * R + r)];
        wrong += sum_ab[i] != x + y;
        wrong += diff_ba[i] != y - x;
        wrong += prod_brow[i] != y * rv[static_cast<size_t>(c)];
      }
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("pow: exponents 2, 1, -1, 0 and 1/2 correctly rounded, 3 and -1/2 within an ulp") {
  std::vector<double> v = tgtest::rnd({200}, 51, -1e3, 1e3).to_vector<double>();
  const std::vector<double> special = {0.0,   -0.0,   INFINITY, -INFINITY, NAN,   1e-310,  -1e-310,
                                       1e-40, -3e-39, 1e20,     -1e20,     1e200, -1e-200, 3.4e38,
                                       -1.0,  1.0,    4.0,      1e13,      1e-13, -2e-13};
  std::copy(special.begin(), special.end(), v.begin());
  for (int i = 20; i < 60; ++i) v[i] = std::abs(v[i]);  // roots of positive numbers
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x = from_vector(v, {200}).to(dt);
    const std::vector<double> xs = x.to_vector<double>();  // the values as rounded to dt
    for (double p : {2.0, 1.0, -1.0, 0.0, 0.5, 3.0, -0.5, 1.5}) {
      INFO(dt << " exponent " << p);
      const bool exact = p != 3.0 && p != -0.5;  // one rounding of x^p, or std::pow's (3/2)
      const std::vector<double> got = pow(x, p).to_vector<double>();
      int64_t wrong = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        // The power in double: exact or one rounding for float32's x (a root: sqrt, correctly
        // rounded, with pow's -0 and -inf), then rounded to float32. float64: std::pow, which
        // glibc rounds an ulp off at some exact ties (x^2 of 29-bit x).
        const double xi = xs[i];
        const double root = xi == -INFINITY ? INFINITY : std::sqrt(xi) + 0.0;
        double want = p == 0.5 ? root : std::pow(xi, p);
        if (dt == kFloat32) {
          want = static_cast<double>(static_cast<float>(want));
          if (p == 1.5) want = std::pow(static_cast<float>(xi), 1.5f);  // powf, as the kernel
        }
        // An ulp off: two roundings (3, -1/2), or glibc's ties in float64's 2.
        const bool ulp_off =
            (!exact || (dt == kFloat64 && p == 2.0)) && std::isfinite(want) && want != 0 &&
            (dt == kFloat32
                 ? std::nextafter(static_cast<float>(want), static_cast<float>(got[i])) ==
                       static_cast<float>(got[i])
                 : std::nextafter(want, got[i]) == got[i]);
        const bool same =
            std::isnan(want)
                ? std::isnan(got[i])
                : (got[i] == want && std::signbit(got[i]) == std::signbit(want)) || ulp_off;
        if (!same) {
          INFO("x " << xi << ": got " << got[i] << ", want " << want);
          CHECK(same);
          ++wrong;
        }
      }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("where and masked_fill") {
  Tensor c = from_vector(std::vector<bool>{true, false, true}, {3});
  Tensor a = from_vector(std::vector<double>{1, 2, 3}, {3});
  check_close(where(c, a, 0.0).to_vector<double>(), {1, 0, 3});
  check_close(where(c, 5.0, a).to_vector<double>(), {5, 2, 5});
  check_close(masked_fill(a, c, -1.0).to_vector<double>(), {-1, 2, -1});
  // Unit-stride runs of 4- and 8-byte elements take whole vectors (select_run), a side also
  // as one element (a scalar), the tail and other types an element at a time: every element
  // against the plain rule.
  const int64_t n = 301;
  std::vector<bool> cv(n);
  std::vector<double> xv(n), yv(n);
  for (int64_t i = 0; i < n; ++i) {
    cv[i] = (i * 7919) % 3 == 0;
    xv[i] = static_cast<double>(i);
    yv[i] = -static_cast<double>(i) - 0.5;
  }
  Tensor cond = from_vector(cv, {n});
  for (DType dt : {kFloat32, kFloat64, kInt64, kBFloat16}) {
    const Tensor x = from_vector(xv, {n}).to(dt), y = from_vector(yv, {n}).to(dt);
    const std::vector<Tensor> got = {where(cond, x, y), where(cond, x, -2.0), where(cond, 3.0, y),
                                     where(cond, x.narrow(0, 7, 1), -2.0)};
    for (int k = 0; k < 4; ++k) {
      const std::vector<double> g = got[k].to(kFloat64).to_vector<double>();
      for (int64_t i = 0; i < n; ++i) {
        INFO(dtype_name(dt) << ", case " << k << ", element " << i);
        const double xi = k == 2 ? 3.0 : xv[k == 3 ? 7 : i], yi = k == 0 || k == 2 ? yv[i] : -2.0;
        CHECK(g[i] == from_vector(std::vector<double>{cv[i] ? xi : yi}, {1})
                          .to(dt)
                          .to(kFloat64)
                          .item<double>());
      }
    }
  }
}

// Plain triple loop over row-major data.
std::vector<double> naive_matmul(const std::vector<double>& a, const std::vector<double>& b,
                                 int64_t m, int64_t k, int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

TEST_CASE("matmul against a reference loop: layouts, batches, 1-D") {
  Tensor a = rnd({5, 7}, 1), b = rnd({7, 3}, 2);
  auto ref = naive_matmul(a.to_vector<double>(), b.to_vector<double>(), 5, 7, 3);
  check_close(matmul(a, b).to_vector<double>(), ref);
  // transposed operands (column-major views)
  Tensor at = a.transpose(0, 1).contiguous().transpose(0, 1);
  Tensor bt = b.transpose(0, 1).contiguous().transpose(0, 1);
  check_close(matmul(at, bt).to_vector<double>(), ref);
  check_close(matmul(a, bt).to_vector<double>(), ref);
  check_close(matmul(at, b).to_vector<double>(), ref);
  // a sliced operand with a non-unit leading dimension
  Tensor wide = rnd({5, 10}, 3);
  Tensor sl = wide.slice(1, 2, 9);
  check_close(matmul(sl, b).to_vector<double>(),
              naive_matmul(sl.contiguous().to_vector<double>(), b.to_vector<double>(), 5, 7, 3));
  // an operand strided in both dims is copied first
  Tensor strided = rnd({10, 14}, 4).slice(0, 0, 10, 2).slice(1, 0, 14, 2);
  check_close(
      matmul(strided, b).to_vector<double>(),
      naive_matmul(strided.contiguous().to_vector<double>(), b.to_vector<double>(), 5, 7, 3));
  // batch broadcast: (2, 1, 5, 7) @ (3, 7, 3) -> (2, 3, 5, 3)
  Tensor ba = rnd({2, 1, 5, 7}, 5), bb = rnd({3, 7, 3}, 6);
  Tensor bc = matmul(ba, bb);
  REQUIRE(bc.sizes() == Shape{2, 3, 5, 3});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      auto want = naive_matmul(ba.narrow(0, i, 1).contiguous().to_vector<double>(),
                               bb.narrow(0, j, 1).contiguous().to_vector<double>(), 5, 7, 3);
      check_close(bc.narrow(0, i, 1).narrow(1, j, 1).contiguous().to_vector<double>(), want);
    }
  // 1-D cases
  Tensor v = rnd({7}, 7);
  CHECK(matmul(v, v).dim() == 0);
  CHECK(matmul(v, v).item<double>() == doctest::Approx(tg::sum(mul(v, v)).item<double>()));
  CHECK(matmul(a, v).sizes() == Shape{5});
  CHECK(matmul(rnd({5}, 8), a).sizes() == Shape{7});
  CHECK(matmul(v, rnd({4, 7, 2}, 9)).sizes() == Shape{4, 2});
  // float32 and a larger shape that uses Eigen's threads
  Tensor fa = rnd({64, 96}, 10).to(kFloat32), fb = rnd({96, 80}, 11).to(kFloat32);
  auto fref = naive_matmul(fa.to_vector<double>(), fb.to_vector<double>(), 64, 96, 80);
  auto got = matmul(fa, fb).to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - fref[i]) < 1e-4);
  // empty inner dim gives zeros
  check_close(matmul(zeros({2, 0}, kFloat64), zeros({0, 3}, kFloat64)).to_vector<double>(),
              std::vector<double>(6, 0.0));
}

TEST_CASE("matmul through every GEMM library of the build (cpu_gemm)") {
  const std::string before = cpu_gemm();
  Tensor a = rnd({70, 96}, 21), b = rnd({96, 40}, 22);
  auto ref = naive_matmul(a.to_vector<double>(), b.to_vector<double>(), 70, 96, 40);
  Tensor at = a.transpose(0, 1).contiguous().transpose(0, 1);
  Tensor bt = b.transpose(0, 1).contiguous().transpose(0, 1);
  for (const std::string& name : cpu_gemm_choices()) {
    INFO("GEMM library " << name);
    set_cpu_gemm(name);
    CHECK(cpu_gemm() == name);
    for (const auto& [x, y] :
         {std::pair{a, b}, std::pair{at, bt}, std::pair{a, bt}, std::pair{at, b}}) {
      auto got = matmul(x.to(kFloat32), y.to(kFloat32)).to_vector<double>();
      for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - ref[i]) < 1e-4);
      check_close(matmul(x, y).to_vector<double>(), ref);  // float64: OpenBLAS or Eigen
    }
    // a batch of small products, each single-threaded inside the OpenMP loop
    Tensor ba = rnd({3, 5, 7}, 23).to(kFloat32), bb = rnd({3, 7, 4}, 24).to(kFloat32);
    Tensor bc = matmul(ba, bb);
    for (int64_t i = 0; i < 3; ++i) {
      auto want = naive_matmul(ba.narrow(0, i, 1).contiguous().to_vector<double>(),
                               bb.narrow(0, i, 1).contiguous().to_vector<double>(), 5, 7, 4);
      auto got = bc.narrow(0, i, 1).contiguous().to_vector<double>();
      for (size_t j = 0; j < got.size(); ++j) CHECK(std::abs(got[j] - want[j]) < 1e-5);
    }
  }
  set_cpu_gemm(before);
  tgtest::check_throws_with_prefix([] { set_cpu_gemm("mkl"); }, "[cpu_gemm]", "'mkl'");
  CHECK(cpu_gemm() == before);
}

// A signal handler runs on the stack of the thread it interrupts, below its stack pointer.
// oneDNN 2.6's AVX-512 sgemm points that into a heap buffer while it runs (oneDNN issue
// #4845), so a profiler's SIGPROF or a training loop's SIGINT landing there corrupted the heap:
// with dnnl_sgemm behind matmul, or the matmul primitive's "gemm:jit", this test aborted in
// every run. A SIGPROF every 50 us of CPU time while float32 products run, through every GEMM
// library of the build.
TEST_CASE("matmul while signal handlers run, through every GEMM library") {
  static std::atomic<int> handled{0};
  struct sigaction on_prof = {};
  struct sigaction before_action = {};
  on_prof.sa_handler = [](int) { handled.fetch_add(1, std::memory_order_relaxed); };
  on_prof.sa_flags = SA_RESTART;
  REQUIRE(sigaction(SIGPROF, &on_prof, &before_action) == 0);
  itimerval every{{0, 50}, {0, 50}}, off{};
  REQUIRE(setitimer(ITIMER_PROF, &every, nullptr) == 0);
  const std::string before = cpu_gemm();
  const int64_t n = 256;
  for (const std::string& name : cpu_gemm_choices()) {
    INFO("GEMM library " << name);
    set_cpu_gemm(name);
    for (int i = 0; i < 200; ++i) {
      // Fresh tensors each time, so that the heap around the GEMM's own buffers keeps changing;
      // every other product has an operand whose row stride exceeds its width (oneDNN's brgemm
      // declines that layout and offers the sgemm kernel's "gemm:jit" next).
      Tensor a = full({n, i % 2 ? n + 8 : n}, 1.0, kFloat32).slice(1, 0, n);
      Tensor c = matmul(a, full({n, n}, 0.5, kFloat32).transpose(0, 1));
      CHECK(c.to_vector<float>()[static_cast<size_t>(i)] == 0.5f * n);
    }
  }
  setitimer(ITIMER_PROF, &off, nullptr);
  sigaction(SIGPROF, &before_action, nullptr);
  set_cpu_gemm(before);
  CHECK(handled.load() > 0);  // the signals did arrive
}

TEST_CASE("cat, stack, split, chunk") {
  Tensor a = arange(6, kFloat64).reshape({2, 3}), b = arange(6, 10, 1, kFloat64).reshape({2, 2});
  Tensor c = cat({a, b}, 1);
  CHECK(c.sizes() == Shape{2, 5});
  check_close(c.to_vector<double>(), {0, 1, 2, 6, 7, 3, 4, 5, 8, 9});
  Tensor s = stack({a, a}, 1);
  CHECK(s.sizes() == Shape{2, 2, 3});
  check_close(s.to_vector<double>(), {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  auto parts = split(c, 2, 1);
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].sizes() == Shape{2, 1});
  check_close(parts[2].contiguous().to_vector<double>(), {7, 9});
  auto ch = chunk(arange(7, kFloat64), 3);
  REQUIRE(ch.size() == 3);
  CHECK(ch[0].numel() == 3);
  CHECK(ch[2].numel() == 1);
  auto sp = split(arange(5, kFloat64), std::vector<int64_t>{1, 4});
  check_close(sp[1].to_vector<double>(), {1, 2, 3, 4});
  // An empty dim splits into one empty part, as in PyTorch (not into none).
  for (const auto& empty_parts : {split(zeros({0, 3}), 2, 0), chunk(zeros({0, 3}), 4, 0)}) {
    REQUIRE(empty_parts.size() == 1);
    CHECK(empty_parts[0].sizes() == Shape{0, 3});
  }
}

// A scalar is compared as the number it is, whatever the tensor's dtype: an int64 or bool
// tensor against a fraction, a NaN or an out-of-range value, a float16 one against a value its
// dtype would round to inf. (Converting the scalar to the tensor's dtype first made
// lt(int64 0, 0.5) false, and NaN or 1e30 to int64 undefined behaviour.)
TEST_CASE("comparisons with a scalar compare the number itself") {
  const Tensor i = from_vector(std::vector<int64_t>{-2, 0, 3}, {3});
  using B = std::vector<bool>;
  auto bools = [](const Tensor& t) {
    B out;
    for (int64_t v : t.to(kInt64).to_vector<int64_t>()) out.push_back(v != 0);
    return out;
  };
  CHECK(bools(lt(i, 0.5)) == B{true, true, false});
  CHECK(bools(gt(i, 0.5)) == B{false, false, true});
  CHECK(bools(lt(i, -0.5)) == B{true, false, false});
  CHECK(bools(gt(i, -2.5)) == B{true, true, true});
  CHECK(bools(eq(i, 0.5)) == B{false, false, false});
  CHECK(bools(ne(i, 0.5)) == B{true, true, true});
  CHECK(bools(lt(i, 1e30)) == B{true, true, true});
  CHECK(bools(gt(i, 1e30)) == B{false, false, false});
  CHECK(bools(gt(i, -1e30)) == B{true, true, true});
  CHECK(bools(lt(i, -INFINITY)) == B{false, false, false});
  CHECK(bools(lt(i, NAN)) == B{false, false, false});
  CHECK(bools(eq(i, NAN)) == B{false, false, false});
  CHECK(bools(ne(i, NAN)) == B{true, true, true});
  CHECK(bools(eq(i, 3.0)) == B{false, false, true});  // representable: the plain path
  const Tensor b = from_vector(std::vector<bool>{true, false}, {2});
  CHECK(bools(eq(b, 0.5)) == B{false, false});
  CHECK(bools(gt(b, 0.5)) == B{true, false});
  CHECK(bools(eq(b, 1.0)) == B{true, false});
  const Tensor h = from_vector(std::vector<double>{65504, INFINITY}, {2}).to(kFloat16);
  CHECK(bools(eq(h, 70000.0)) == B{false, false});  // 70000 would round to inf in float16
  CHECK(bools(lt(h, 70000.0)) == B{true, false});
  const Tensor f = from_vector(std::vector<float>{16777216.0f}, {1});
  CHECK(bools(eq(f, 16777217.0)) == B{false});  // 2^24 + 1 is no float32
  CHECK(bools(lt(f, 16777217.0)) == B{true});
}

TEST_CASE("embedding gathers rows; its backward scatter-adds") {
  Tensor w = arange(12, kFloat64).reshape({4, 3});
  Tensor ids = from_vector(std::vector<int64_t>{3, 0, 3}, {3});
  check_close(embedding(w, ids).to_vector<double>(), {9, 10, 11, 0, 1, 2, 9, 10, 11});
  Tensor g = ones({3, 3}, kFloat64);
  check_close(embedding_backward(g, ids, 4).to_vector<double>(),
              {1, 1, 1, 0, 0, 0, 0, 0, 0, 2, 2, 2});
}

TEST_CASE("dropout keeps about 1 - p and scales by 1 / (1 - p)") {
  const double p = 0.3;
  Tensor x = ones({100000}, kFloat32);
  Tensor y = dropout(x, p, 42, 0);
  auto v = y.to_vector<float>();
  int64_t kept = 0;
  for (float e : v) {
    CHECK((e == 0.f || std::abs(e - 1.f / 0.7f) < 1e-6f));
    kept += e != 0.f;
  }
  double n = 100000, sigma = std::sqrt(n * p * (1 - p));
  CHECK(std::abs(kept - n * (1 - p)) < 4 * sigma);
  CHECK(dropout(x, p, 42, 0).to_vector<float>() == v);
  CHECK(dropout(x, p, 42, 4).to_vector<float>() != v);
  CHECK(dropout(x, 0.0, 1, 0).is_same(x));
  Generator gen{5, 0};
  dropout(ones({10}), 0.5, gen);
  CHECK(gen.offset == 12);
}

TEST_CASE("results are bitwise identical run to run") {
  Tensor a = rnd({128, 96}, 1).to(kFloat32), b = rnd({96, 64}, 2).to(kFloat32);
  auto run = [&] {
    Tensor c = matmul(a, b);
    return tg::sum(mul(softmax(c, -1), gelu(c)), {0}).to_vector<float>();
  };
  auto r1 = run(), r2 = run();
  CHECK(r1 == r2);
}
