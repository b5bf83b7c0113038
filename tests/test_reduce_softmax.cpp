// Forward values (and the fused kernels' gradients) of the reductions, softmax, logsumexp and
// cross-entropy against analytic spot values, in-order references and their composite formulas.
#include <algorithm>
#include <cmath>

#include "test_util.h"

using namespace tg;
using tgtest::check_close;

TEST_CASE("reductions over dims with keepdim") {
  Tensor x = arange(24, kFloat64).reshape({2, 3, 4});
  check_close(tg::sum(x).to_vector<double>(), {276});
  check_close(tg::sum(x, {0, 2}).to_vector<double>(), {60, 92, 124});
  CHECK(tg::sum(x, {1}, true).sizes() == Shape{2, 1, 4});
  check_close(mean(x, {-1}).to_vector<double>(), {1.5, 5.5, 9.5, 13.5, 17.5, 21.5});
  check_close(tg::max(x, {1}).to_vector<double>(), {8, 9, 10, 11, 20, 21, 22, 23});
  check_close(tg::min(x, {0, 1}).to_vector<double>(), {0, 1, 2, 3});
  CHECK(argmax(from_vector(std::vector<double>{1, 5, 5, 2}, {4}), 0).item<int64_t>() == 1);
  check_close(var(from_vector(std::vector<double>{1, 2, 3, 4}, {4})).to_vector<double>(),
              {5.0 / 3});
  check_close(var(from_vector(std::vector<double>{1, 2, 3, 4}, {4}), {}, 0).to_vector<double>(),
              {1.25});
  // strided input reduces like its contiguous copy
  Tensor t = x.transpose(0, 2);
  check_close(tg::sum(t, {1}).contiguous().to_vector<double>(),
              tg::sum(t.contiguous(), {1}).to_vector<double>());
  CHECK(tg::sum(from_vector(std::vector<bool>{true, true, false}, {3})).item<int64_t>() == 2);
  // logsumexp is stable for large values and gives -inf for all -inf
  Tensor big = from_vector(std::vector<double>{1000, 1000}, {2});
  CHECK(logsumexp(big).item<double>() == doctest::Approx(1000 + std::log(2.0)));
  Tensor ninf = full({2}, -INFINITY, kFloat64);
  CHECK(logsumexp(ninf).item<double>() == -INFINITY);
}

TEST_CASE("softmax and log_softmax (one fused kernel) against exp(x - logsumexp(x))") {
  Tensor x = tgtest::rnd({3, 5, 4}, 7, -20, 20);
  for (int64_t dim : {0, 1, 2}) {
    INFO("dim " << dim);
    Tensor lse = logsumexp(x, {dim}, true);
    check_close(softmax(x, dim).to_vector<double>(), exp(sub(x, lse)).to_vector<double>(), 1e-14);
    check_close(log_softmax(x, dim).to_vector<double>(), sub(x, lse).to_vector<double>(), 1e-14);
  }
  Tensor big = from_vector(std::vector<double>{1000, 1001, -1000}, {3});  // no overflow
  check_close(softmax(big, 0).to_vector<double>(),
              {1 / (1 + std::exp(1.0)), std::exp(1.0) / (1 + std::exp(1.0)), 0.0}, 1e-14);
  CHECK(softmax(scalar_tensor(3.5), 0).item<double>() == 1.0);
  Tensor ninf = full({2, 3}, -INFINITY, kFloat64);  // as exp(x - logsumexp(x)): NaN
  for (double v : softmax(ninf, 1).to_vector<double>()) CHECK(std::isnan(v));
  tgtest::check_throws_with_prefix([] { softmax(zeros({2, 3}), 2); }, "[softmax]");
  tgtest::check_throws_with_prefix([] { log_softmax(zeros({2}, kInt64), 0); }, "[log_softmax]");
}

TEST_CASE("sums across rows add each output's elements in order, bit for bit") {
  // Magnitudes from 1e-3 to 1e3, so that another order of addition would round differently.
  const int64_t R = 37, A = 5, C = 70;
  std::vector<double> v = tgtest::rnd({R, A, C}, 21).to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) v[i] *= std::pow(10.0, static_cast<double>(i % 7) - 3);
  const Tensor x = from_vector(v, {R, A, C}).to(kFloat32);
  const std::vector<float> xf = x.to_vector<float>();
  auto at = [&](int64_t r, int64_t a, int64_t c) {
    return xf[static_cast<size_t>((r * A + a) * C + c)];
  };
  // Over dim 0: out (A, C), each a running float sum over r.
  const std::vector<float> s0 = sum(x, {0}).to_vector<float>();
  // Over dims 0 and 1: per r the partial sum over a, then those partials in order of r.
  const std::vector<float> s01 = sum(x, {0, 1}).to_vector<float>();
  // x's unit-stride dim kept but not last: (R, C, A) with strides (A C, 1, C), over dim 0.
  const std::vector<float> sp = sum(x.permute({0, 2, 1}), {0}).to_vector<float>();
  int64_t wrong = 0;
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t c = 0; c < C; ++c) {
      float want = 0;
      for (int64_t r = 0; r < R; ++r) want += at(r, a, c);
      wrong += s0[static_cast<size_t>(a * C + c)] != want;
      wrong += sp[static_cast<size_t>(c * A + a)] != want;
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    float want = 0;
    for (int64_t r = 0; r < R; ++r) {
      float part = 0;
      for (int64_t a = 0; a < A; ++a) part += at(r, a, c);
      want += part;
    }
    wrong += s01[static_cast<size_t>(c)] != want;
  }
  CHECK(wrong == 0);
  // No rows: zeros.
  CHECK(sum(zeros({0, C}, kFloat32), {0}).to_vector<float>() == std::vector<float>(C, 0.0f));
}

// With fewer outputs than threads (here one) the rows are split among the threads: the same
// bits as one thread's loop, the first extremum's index (max's gradient lands there) and the
// first NaN, on 1, 2 and 3 threads.
TEST_CASE("a full reduction split among threads: the one-thread bits, the first extremum") {
  const int64_t R = 301, C = 130;  // 39,130 elements: past the threshold for threads
  std::vector<double> v = tgtest::rnd({R, C}, 31).to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) v[i] *= std::pow(10.0, static_cast<double>(i % 7) - 3);
  v[10 * C + 5] = v[200 * C + 7] = 1e4;    // max's two places: the first wins
  v[250 * C + 1] = v[260 * C + 9] = -1e4;  // min's
  std::vector<double> with_nan = v;
  with_nan[150 * C + 3] = with_nan[280 * C + 2] = NAN;
  const int saved = get_num_threads();
  std::vector<std::vector<double>> runs;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<double> got;
    for (const auto* values : {&v, &with_nan}) {
      const Tensor x = from_vector(*values, {R, C}).to(kFloat32).requires_grad_();
      got.push_back(sum(x).item<double>());
      const Tensor m = max(x);
      m.backward();
      const std::vector<double> g = x.grad().to_vector<double>();
      got.push_back(m.item<double>());
      got.push_back(static_cast<double>(std::find(g.begin(), g.end(), 1.0) - g.begin()));
      got.push_back(min(x.detach()).item<double>());
    }
    runs.push_back(got);
  }
  set_num_threads(saved);
  const auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  for (size_t t = 1; t < runs.size(); ++t)
    for (size_t i = 0; i < runs[0].size(); ++i) CHECK(same(runs[t][i], runs[0][i]));
  double want_sum = 0;
  for (double e : v) want_sum += static_cast<double>(static_cast<float>(e));
  CHECK(runs[0][0] == doctest::Approx(want_sum).epsilon(1e-4));
  CHECK(runs[0][1] == 1e4);
  CHECK(runs[0][2] == 10 * C + 5);
  CHECK(runs[0][3] == -1e4);
  CHECK(std::isnan(runs[0][4]));
  CHECK(std::isnan(runs[0][5]));
  CHECK(runs[0][6] == 150 * C + 3);
  CHECK(std::isnan(runs[0][7]));
}

TEST_CASE("max, min and argmax over long rows: the scan's first extremum, NaN first") {
  // Rows of 77 (whole vectors of every width and a tail) with small integers, so that the
  // extremum repeats; then rows with a NaN (in the vectors, in the tail), with -0 before +0,
  // and all -inf. Each row is reduced as a row (dim 1 of x) and across rows (dim 0 of x^T made
  // contiguous, one column an output; and over dims 0 and 1 of it as (7, 11, R), whose flat
  // index is the column's).
  const int64_t R = 9, C = 77;
  std::vector<double> v = tgtest::rnd({R, C}, 5, -4, 4).to_vector<double>();
  for (double& e : v) e = std::round(e);
  v[1 * C + 40] = NAN;
  v[1 * C + 56] = NAN;  // the same lane as 40 for 4, 8 and 16 lanes
  v[2 * C + 75] = NAN;
  for (int64_t c = 0; c < C; ++c) v[3 * C + c] = c % 5 == 1 ? -0.0 : (c % 5 == 3 ? 0.0 : -1.0);
  for (int64_t c = 0; c < C; ++c) v[4 * C + c] = -INFINITY;
  v[5 * C + 76] = 9;  // the largest last
  for (int layout = 0; layout < 3; ++layout) {
    for (DType dt : {kFloat32, kFloat64}) {
      const Tensor rows = from_vector(v, {R, C}).to(dt);
      const Tensor x = layout == 0 ? rows : rows.transpose(0, 1).contiguous();
      const Tensor x3 = x.reshape({7, 11, R});
      const Dims dims = layout == 0 ? Dims{1} : (layout == 1 ? Dims{0} : Dims{0, 1});
      const Tensor& xr = layout == 2 ? x3 : x;
      for (bool is_max : {true, false}) {
        INFO(dt << (is_max ? " max" : " min") << ", layout " << layout);
        const std::vector<double> got =
            (is_max ? max(xr, dims) : min(xr, dims)).to_vector<double>();
        const std::vector<int64_t> arg = is_max && layout < 2
                                             ? argmax(x, layout == 0 ? 1 : 0).to_vector<int64_t>()
                                             : std::vector<int64_t>{};
        for (int64_t r = 0; r < R; ++r) {
          INFO("row " << r);
          double acc = is_max ? -INFINITY : INFINITY;
          int64_t best = 0;
          for (int64_t c = 0; c < C; ++c) {
            const double e = v[static_cast<size_t>(r * C + c)];
            if (e != e) {
              acc = e;
              best = c;
              break;
            }
            if (is_max ? e > acc : e < acc) {
              acc = e;
              best = c;
            }
          }
          const double g = got[static_cast<size_t>(r)];
          CHECK(((g == acc && std::signbit(g) == std::signbit(acc)) ||
                 (std::isnan(g) && std::isnan(acc))));
          if (!arg.empty()) CHECK(arg[static_cast<size_t>(r)] == best);
        }
      }
    }
  }
}

TEST_CASE("softmax over long rows: whole vectors and a tail, float32 against float64") {
  // 100 columns: whole vectors of every width, then a tail; dim 0 runs through the transpose.
  std::vector<double> v = tgtest::rnd({6, 100}, 11, -30, 30).to_vector<double>();
  v[1 * 100 + 3] = -INFINITY;                                // row 1: one hidden entry
  for (int i = 0; i < 100; ++i) v[2 * 100 + i] = -INFINITY;  // row 2: all hidden
  v[3 * 100 + 99] = INFINITY;                                // row 3: a +inf
  v[4 * 100 + 50] = NAN;                                     // row 4: a NaN
  const Tensor x = from_vector(v, {6, 100});
  for (bool log : {false, true}) {
    INFO("log " << log);
    auto f = [log](const Tensor& t, int64_t dim) {
      return log ? log_softmax(t, dim) : softmax(t, dim);
    };
    const Tensor lse = logsumexp(x, {1}, true);  // the composed formula, in float64
    const std::vector<double> want = (log ? sub(x, lse) : exp(sub(x, lse))).to_vector<double>();
    const std::vector<double> got = f(x.to(kFloat32), 1).to_vector<double>();
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
      if (std::isnan(want[i]) || std::isinf(want[i])) {
        CHECK((got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))));
      } else {
        CHECK(std::abs(got[i] - want[i]) <= 2e-6 * (1 + std::abs(want[i])));
      }
    }
    // As exp(x - logsumexp(x)): rows 2 and 4 NaN throughout, row 3 NaN at its +inf and 0
    // (log_softmax: -inf) elsewhere.
    CHECK(std::isnan(got[2 * 100 + 7]));
    CHECK(std::isnan(got[4 * 100 + 7]));
    CHECK(std::isnan(got[3 * 100 + 99]));
    CHECK(got[3 * 100 + 7] == (log ? -INFINITY : 0.0));
    CHECK(got[1 * 100 + 3] == (log ? -INFINITY : 0.0));
    const std::vector<double> by_dim1 = f(x, 1).to_vector<double>();
    const std::vector<double> by_dim0 =
        f(x.transpose(0, 1), 0).transpose(0, 1).contiguous().to_vector<double>();
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("element " << i);
      CHECK((by_dim0[i] == by_dim1[i] || (std::isnan(by_dim0[i]) && std::isnan(by_dim1[i]))));
      if (!std::isnan(want[i]) && !std::isinf(want[i]))
        CHECK(std::abs(by_dim1[i] - want[i]) <= 1e-14 * (1 + std::abs(want[i])));
    }
  }
}

TEST_CASE("logsumexp over the last dim (one fused kernel) against its composite formula") {
  // Rows of 37: whole vectors and a tail; a row with a -inf, one all -inf (-inf), one with
  // +inf (+inf), one with a NaN (NaN).
  std::vector<double> v = tgtest::rnd({6, 37}, 41, -50, 50).to_vector<double>();
  v[1 * 37 + 2] = -INFINITY;
  for (int i = 0; i < 37; ++i) v[2 * 37 + i] = -INFINITY;
  v[3 * 37 + 36] = INFINITY;
  v[4 * 37 + 20] = NAN;
  for (DType dt : {kFloat64, kFloat32}) {
    for (bool keepdim : {false, true}) {
      INFO(dt << " keepdim " << keepdim);
      const Tensor x = from_vector(v, {6, 37}).to(dt).requires_grad_(true);
      const Tensor g = tgtest::rnd({6, 1}, 42).to(dt);
      auto run = [&](bool fused) {
        FusedKernelsGuard mode(fused);
        Tensor y = logsumexp(x, {-1}, keepdim);
        std::vector<double> gx =
            tg::grad({y}, {x}, {keepdim ? g : g.reshape({6})})[0].to_vector<double>();
        return std::make_pair(y.to_vector<double>(), gx);
      };
      const auto fused = run(true), composite = run(false);
      const std::vector<double>&yf = fused.first, &gf = fused.second;
      const std::vector<double>&yc = composite.first, &gc = composite.second;
      const double tol = dt == kFloat64 ? 1e-13 : 2e-6;
      auto same = [tol](double a, double b) {
        return (std::isnan(a) && std::isnan(b)) || a == b ||
               std::abs(a - b) <= tol * (1 + std::abs(b));
      };
      for (size_t i = 0; i < yc.size(); ++i) {
        INFO("row " << i << ": fused " << yf[i] << ", composite " << yc[i]);
        CHECK(same(yf[i], yc[i]));
      }
      for (size_t i = 0; i < gc.size(); ++i) {
        INFO("element " << i << ": fused " << gf[i] << ", composite " << gc[i]);
        CHECK(same(gf[i], gc[i]));
      }
      CHECK(yf[2] == -INFINITY);
      CHECK(yf[3] == INFINITY);
      CHECK(std::isnan(yf[4]));
    }
  }
}

TEST_CASE("softmax's fused backward against its composite formula") {
  for (DType dt : {kFloat64, kFloat32}) {
    for (bool log : {false, true}) {
      for (int64_t dim : {1, 0}) {
        INFO(dt << " log " << log << " dim " << dim);
        std::vector<double> v = tgtest::rnd({5, 37}, 3, -4, 4).to_vector<double>();
        v[2 * 37 + 5] = -INFINITY;  // a hidden entry: y 0 (log_softmax: -inf)
        Tensor x = from_vector(v, {5, 37}).to(dt).requires_grad_(true);
        Tensor g = tgtest::rnd({5, 37}, 4).to(dt);
        auto grad_of = [&](bool fused) {
          FusedKernelsGuard mode(fused);
          Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
          return tg::grad({y}, {x}, {g})[0].to_vector<double>();
        };
        check_close(grad_of(true), grad_of(false), dt == kFloat64 ? 1e-13 : 2e-6);
      }
    }
  }
}

TEST_CASE("softmax, log_softmax, cross_entropy spot values") {
  Tensor x = from_vector(std::vector<double>{1, 2, 3, 1, 1, 1}, {2, 3});
  double z = std::exp(1) + std::exp(2) + std::exp(3);
  check_close(softmax(x, 1).to_vector<double>(),
              {std::exp(1) / z, std::exp(2) / z, std::exp(3) / z, 1.0 / 3, 1.0 / 3, 1.0 / 3});
  check_close(log_softmax(x, -1).to_vector<double>(),
              {1 - std::log(z), 2 - std::log(z), 3 - std::log(z), -std::log(3.0), -std::log(3.0),
               -std::log(3.0)});
  Tensor t = from_vector(std::vector<int64_t>{2, 0}, {2});
  double l0 = std::log(z) - 3, l1 = std::log(3.0);
  CHECK(cross_entropy(x, t).item<double>() == doctest::Approx((l0 + l1) / 2));
  CrossEntropyOptions sum_opts;
  sum_opts.reduction = Reduction::Sum;
  CHECK(cross_entropy(x, t, sum_opts).item<double>() == doctest::Approx(l0 + l1));
  Tensor ti = from_vector(std::vector<int64_t>{2, -100}, {2});
  CHECK(cross_entropy(x, ti).item<double>() == doctest::Approx(l0));
  CrossEntropyOptions none;
  none.reduction = Reduction::None;
  check_close(cross_entropy(x, ti, none).to_vector<double>(), {l0, 0.0});
}
