// The CPU's SIMD building blocks against simple references: the scalar and vector exps
// (scalar_ops.h, simd.h) over their float32 ranges, and the register-blocked tile product
// (tile_gemm.h) over every micro-tile shape, both operand layouts, accumulation and row scaling,
// float32 and float64, and the dot products of few-row tiles (tile_dots); the threads'
// cost-balanced task shares (cost_split.h) and the bulk Philox uniforms (philox_fill.h) against the
// one-position-at-a-time stream.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/cost_split.h"
#include "backends/cpu/cpu_sdpa_scores.h"
#include "backends/cpu/philox_fill.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/tile_gemm.h"
#include "backends/scalar_ops.h"
#include "core/philox.h"
#include "test_util.h"

using namespace tg::cpu;

namespace {
// The float32 inputs the exps are swept over: [-110, 90] in small steps, and the edges.
std::vector<float> exp_inputs() {
  std::vector<float> xs;
  xs.reserve(27360 + 16);
  for (int i = 0; i < 27360; ++i) xs.push_back(-110.f + 0.00731f * static_cast<float>(i));
  xs.insert(xs.end(), {0.f, -0.f, 1e-8f, -1e-8f, 88.72f, 88.73f, -87.3f, -103.9f, -104.f,
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::infinity(), 1000.f, -1000.f});
  return xs;
}

// exp_f32's contract (backends/scalar_ops.h) against a double-precision exp: within 2 ulp,
// inf above 88.7, exactly 0 below -104.
void check_exp_f32(float x, float got) {
  const double want = std::exp(static_cast<double>(x));
  INFO("x = " << x << ": got " << got << ", want " << want);
  if (want > std::numeric_limits<float>::max()) {
    CHECK(got == std::numeric_limits<float>::infinity());
  } else if (x < -103.97208f) {
    CHECK(got == 0.f);
  } else if (want < 1.2e-38) {  // subnormal results: a couple of subnormal steps
    CHECK(std::abs(got - want) <= 4e-45 + 2.4e-7 * want);
  } else {
    CHECK(std::abs(got - want) <= 2.4e-7 * want);
  }
}
}  // namespace

TEST_CASE("scalar::exp_f32 (the elementwise kernels' exp) is within 2 ulp over its range") {
  for (float x : exp_inputs()) check_exp_f32(x, tg::scalar::exp_f32(x));
  CHECK(std::isnan(tg::scalar::exp_f32(std::nanf(""))));
}

TEST_CASE("scalar::tanh_f32 (the elementwise kernels' tanh) is within 2 ulp of tanh") {
  // Every 9973rd float from 1e-30 to 20 (about 87,000), both signs, and the edges. (Every 97th,
  // 18 million floats, read at most 1 ulp.)
  std::vector<float> xs;
  uint32_t lo, hi;
  const float from = 1e-30f, to = 20.f;
  std::memcpy(&lo, &from, 4);
  std::memcpy(&hi, &to, 4);
  for (uint32_t b = lo; b < hi; b += 9973) {
    float x;
    std::memcpy(&x, &b, 4);
    xs.push_back(x);
  }
  int64_t worst = 0;
  for (float x : xs) {
    for (float v : {x, -x}) {
      const float got = tg::scalar::tanh_f32(v);
      const float want = static_cast<float>(std::tanh(static_cast<double>(v)));
      // ulps between got and want, as ordered integers (same sign here)
      int32_t gi, wi;
      std::memcpy(&gi, &got, 4);
      std::memcpy(&wi, &want, 4);
      const int64_t ulps = std::abs(static_cast<int64_t>(gi) - wi);
      worst = std::max(worst, ulps);
      if (ulps > 2) {
        INFO("x = " << v << ": got " << got << ", want " << want);
        CHECK(ulps <= 2);
      }
    }
  }
  MESSAGE("tanh_f32: at most " << worst << " ulp over " << 2 * xs.size() << " floats");
  CHECK(worst <= 2);
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(tg::scalar::tanh_f32(inf) == 1.f);
  CHECK(tg::scalar::tanh_f32(-inf) == -1.f);
  CHECK(tg::scalar::tanh_f32(1000.f) == 1.f);
  CHECK(std::signbit(tg::scalar::tanh_f32(-0.f)));
  CHECK(tg::scalar::tanh_f32(0.f) == 0.f);
  CHECK(std::isnan(tg::scalar::tanh_f32(std::nanf(""))));
}

TEST_CASE("simd::exp on float32 is within 2 ulp of a double-precision exp over its range") {
  using V = simd::Vec<float>;
  constexpr int W = simd::kLanes<float>;
  std::vector<float> xs = exp_inputs();
  while (xs.size() % W) xs.push_back(0.f);
  for (size_t i = 0; i < xs.size(); i += W) {
    const V y = simd::exp<float>(simd::load(xs.data() + i));
    for (int l = 0; l < W; ++l) check_exp_f32(xs[i + l], y[l]);
  }
  V nan = simd::splat(std::numeric_limits<float>::quiet_NaN());
  CHECK(std::isnan(simd::exp<float>(nan)[0]));
}

TEST_CASE("simd::exp_nonpositive: within 1.35 ulp on [-87.3, 0], exactly 0 below and for -inf") {
  using V = simd::Vec<float>;
  constexpr int W = simd::kLanes<float>;
  std::vector<float> xs;
  xs.reserve(29970 + 8 + W);
  for (int i = 0; i < 29970; ++i) xs.push_back(-95.f + 0.00317f * static_cast<float>(i));
  xs.insert(xs.end(), {0.f, -0.f, 1e-7f, -1e-8f, -87.33f, -87.34f, -1000.f,
                       -std::numeric_limits<float>::infinity()});
  while (xs.size() % W) xs.push_back(0.f);
  for (size_t i = 0; i < xs.size(); i += W) {
    const V y = simd::exp_nonpositive<float>(simd::load(xs.data() + i));
    for (int l = 0; l < W; ++l) {
      const double want = std::exp(static_cast<double>(xs[i + l]));
      INFO("x = " << xs[i + l] << ": got " << y[l] << ", want " << want);
      if (xs[i + l] < -87.33654f) {
        CHECK(y[l] == 0.f);
      } else {
        const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);  // of want's binade
        CHECK(std::abs(y[l] - want) <= 1.35 * ulp);
      }
    }
  }
  CHECK(std::isnan(simd::exp_nonpositive<float>(simd::splat(std::nanf("")))[0]));
}

template <class T>
void check_tile_gemm(double tol) {
  constexpr int64_t W = simd::kLanes<T>;
  // Shapes that cover every rows remainder of the 6-row micro-tile and every vector count, and
  // the wider panels of one- and two-row products (kFewRowsVecs vectors, then the rest).
  for (int64_t m : {1, 2, 5, 6, 7, 13}) {
    for (int64_t n : {W, 2 * W, 3 * W, 5 * W, 9 * W}) {
      for (int64_t k : {0, 1, 9, 33}) {
        for (bool transposed : {false, true}) {
          for (bool accumulate : {false, true}) {
            const int64_t lda = transposed ? m + 3 : k + 2, ldb = n + W, ldc = n + 2 * W;
            std::vector<T> a((transposed ? k : m) * lda + 1), b(k * ldb + 1), c(m * ldc);
            std::vector<T> scale(m);
            for (size_t i = 0; i < a.size(); ++i) a[i] = T(std::sin(0.37 * i));
            for (size_t i = 0; i < b.size(); ++i) b[i] = T(std::cos(0.11 * i));
            for (size_t i = 0; i < c.size(); ++i) c[i] = T(0.01 * (i % 17));
            for (int64_t i = 0; i < m; ++i) scale[i] = T(0.5 + 0.25 * i);
            std::vector<T> want = c;
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                double s = accumulate ? double(c[i * ldc + j]) * scale[i] : 0.0;
                for (int64_t p = 0; p < k; ++p)
                  s += double(transposed ? a[p * lda + i] : a[i * lda + p]) * b[p * ldb + j];
                want[i * ldc + j] = T(s);
              }
            tile_gemm<T>(m, n, k, a.data(), transposed ? 1 : lda, transposed ? lda : 1, b.data(),
                         ldb, c.data(), ldc, accumulate, accumulate ? scale.data() : nullptr);
            INFO("m=" << m << " n=" << n << " k=" << k << " transposed=" << transposed
                      << " accumulate=" << accumulate);
            for (size_t i = 0; i < c.size(); ++i) CHECK(std::abs(c[i] - want[i]) <= tol);
            // B in panels of W columns, each k x W, W elements of padding between panels.
            const int64_t panel = k * W + W;
            std::vector<T> bp(n / W * panel, T(99));
            for (int64_t p = 0; p < k; ++p)
              for (int64_t j = 0; j < n; ++j) bp[j / W * panel + p * W + j % W] = b[p * ldb + j];
            for (size_t i = 0; i < c.size(); ++i) c[i] = T(0.01 * (i % 17));
            tile_gemm_panels<T>(m, n, k, a.data(), transposed ? 1 : lda, transposed ? lda : 1,
                                bp.data(), panel, c.data(), ldc, accumulate,
                                accumulate ? scale.data() : nullptr);
            for (size_t i = 0; i < c.size(); ++i) CHECK(std::abs(c[i] - want[i]) <= tol);
          }
        }
      }
    }
  }
}

TEST_CASE(
    "tile_gemm against a triple loop: every micro-tile, A and A^T, B row-major and in panels, "
    "accumulate, scale") {
  check_tile_gemm<float>(2e-5);
  check_tile_gemm<double>(1e-12);
}

template <class T>
void check_tile_dots(double tol) {
  constexpr int64_t W = simd::kLanes<T>;
  for (int64_t m : {1, 3, 9}) {
    for (int64_t n : {int64_t{1}, W - 1, W, 2 * W + 3}) {
      for (int64_t k : {W, 3 * W}) {
        const int64_t lda = k + 5, ldb = k + 3, ldc = n + 2 * W;
        // B has exactly n rows (with its stride): tile_dots must not read past them.
        std::vector<T> a(m * lda), b((n - 1) * ldb + k), c(m * ldc, T(7));
        for (size_t i = 0; i < a.size(); ++i) a[i] = T(std::sin(0.37 * i));
        for (size_t i = 0; i < b.size(); ++i) b[i] = T(std::cos(0.11 * i));
        tile_dots<T>(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc);
        INFO("m=" << m << " n=" << n << " k=" << k);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < round_to_lanes<T>(n); ++j) {
            double want = 0;
            for (int64_t p = 0; j < n && p < k; ++p)
              want += double(a[i * lda + p]) * b[j * ldb + p];
            CHECK(std::abs(c[i * ldc + j] - want) <= tol);  // 0 past n
          }
          for (int64_t j = round_to_lanes<T>(n); j < ldc; ++j) CHECK(c[i * ldc + j] == T(7));
        }
      }
    }
  }
}

TEST_CASE("tile_dots against a double loop: partial key groups, k of one vector or three") {
  check_tile_dots<float>(2e-5);
  check_tile_dots<double>(1e-12);
}

// tile_dots_panels reads B's rows from panels of W columns (the backward's packing of K) and must
// sum each score as tile_dots does from row-major rows, bit for bit: the SDPA backward
// recomputes the forward's scores with it.
template <class T>
void check_tile_dots_panels() {
  constexpr int64_t W = simd::kLanes<T>;
  for (int64_t m : {1, 5}) {
    for (int64_t n : {int64_t{3}, W + 2}) {
      for (int64_t k : {W, 3 * W}) {
        const int64_t rows = n + 4, panel = rows * W + 3 * W;  // panels padded apart
        std::vector<T> a(m * k), b(rows * k), bp(k / W * panel, T(-1)), c1(m * 2 * W),
            c2(m * 2 * W);
        for (size_t i = 0; i < a.size(); ++i) a[i] = T(std::sin(0.37 * i)) * T(1e3);
        for (size_t i = 0; i < b.size(); ++i) b[i] = T(std::cos(0.11 * i)) * T(1e3);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t x = 0; x < k; ++x) bp[x / W * panel + r * W + x % W] = b[r * k + x];
        tile_dots<T>(m, n, k, a.data(), k, b.data() + k, k, c1.data(), 2 * W);  // from row 1
        tile_dots_panels<T>(m, n, k, a.data(), k, bp.data() + W, panel, c2.data(), 2 * W);
        INFO("m=" << m << " n=" << n << " k=" << k);
        CHECK(c1 == c2);
      }
    }
  }
}

TEST_CASE("tile_dots_panels: the same bits as tile_dots on row-major rows") {
  check_tile_dots_panels<float>();
  check_tile_dots_panels<double>();
}

TEST_CASE("task_share: contiguous shares that cover every task once, balanced by cost") {
  const std::vector<std::vector<int64_t>> lists = {
      {},
      {0, 0, 0},
      {5},
      {1, 1, 1, 1, 1, 1, 1},
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
      {100, 0, 0, 1, 1, 1, 0, 50, 3}};
  for (const auto& costs : lists) {
    tg::cpu::CostPrefix c;
    int64_t biggest = 0;
    for (int64_t x : costs) {
      c.add(x);
      biggest = std::max(biggest, x);
    }
    const int64_t total = c.prefix.back();
    for (int64_t threads = 1; threads <= 7; ++threads) {
      int64_t next = 0;
      for (int64_t t = 0; t < threads; ++t) {
        const tg::cpu::TaskRange r = tg::cpu::task_share(c, t, threads);
        CHECK(r.first == next);
        CHECK(r.last >= r.first);
        // Within one task's cost of the even share, either way.
        const int64_t share = c.prefix[r.last] - c.prefix[r.first];
        CHECK(share * threads <= total + biggest * threads);
        CHECK(share * threads >= total - biggest * threads);
        next = r.last;
      }
      CHECK(next == c.tasks());
    }
  }
}

TEST_CASE("TaskShares: every task handed out once, owners in order, none left behind") {
  const std::vector<std::vector<int64_t>> lists = {{},
                                                   {0, 0, 0},
                                                   {5},
                                                   {1, 1, 1, 1, 1, 1, 1},
                                                   {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14},
                                                   {100, 0, 0, 1, 1, 1, 0, 50, 3}};
  std::mt19937_64 rng(7);
  for (const auto& costs : lists) {
    tg::cpu::CostPrefix c;
    for (int64_t x : costs) c.add(x);
    for (int64_t threads = 1; threads <= 5; ++threads) {
      for (int round = 0; round < 20; ++round) {
        CAPTURE(threads);
        CAPTURE(round);
        tg::cpu::TaskShares shares(c, threads);
        // Calls from threads 0..threads (the last has no share of its own) in a random order,
        // as threads that run at different speeds would make them.
        std::vector<int64_t> taken(c.tasks(), 0);
        std::vector<bool> done(threads + 1, false);
        int64_t live = threads + 1, handed = 0;
        while (live > 0) {
          const int64_t t = static_cast<int64_t>(rng() % static_cast<uint64_t>(threads + 1));
          if (done[t]) continue;
          const int64_t peeked = shares.peek(t), task = shares.next(t);
          if (task < 0) {  // only once every task is out
            CHECK(peeked == -1);
            CHECK(handed == c.tasks());
            done[t] = true;
            --live;
            continue;
          }
          REQUIRE(task < c.tasks());
          ++taken[task];
          ++handed;
          // An owner walks its share in order (nothing is stolen between peek and next here).
          if (peeked >= 0) CHECK(task == peeked);
        }
        for (int64_t x : taken) CHECK(x == 1);
      }
    }
  }
}

TEST_CASE("parts_per_task: about four tasks a thread, within the cap") {
  using tg::cpu::parts_per_task;
  CHECK(parts_per_task(8, 2, 100) == 1);  // enough tasks already
  CHECK(parts_per_task(64, 16, 100) == 1);
  CHECK(parts_per_task(1, 2, 100) == 8);  // one head, two threads: eight parts
  CHECK(parts_per_task(3, 2, 100) == 3);  // ceil(8 / 3)
  CHECK(parts_per_task(1, 2, 3) == 3);    // the cap
  CHECK(parts_per_task(1, 2, 0) == 1);    // a cap below one is one
  CHECK(parts_per_task(0, 2, 5) >= 1);    // no tasks: any part count is harmless, never 0
}

TEST_CASE("philox_uniforms: bit for bit philox_uniform at every alignment and length") {
  std::vector<float> u(700);
  for (uint64_t seed : {0ull, 42ull, 0x0123456789ABCDEFull})
    for (uint64_t pos : {0ull, 1ull, 2ull, 3ull, 4ull, 7ull, (1ull << 33) - 5})
      for (int64_t n : {0, 1, 3, 4, 31, 32, 33, 64, 65, 127, 128, 129, 700}) {
        std::fill(u.begin(), u.end(), -1.f);
        tg::cpu::philox_uniforms(seed, pos, n, u.data());
        int64_t bad = 0;
        for (int64_t i = 0; i < n; ++i) bad += u[i] != tg::philox_uniform(seed, pos + i);
        CHECK(bad == 0);
        if (n < 700) CHECK(u[n] == -1.f);  // nothing written past n
      }
}

TEST_CASE(
    "sdpa load_transposed_panels and load_rows_panels: element for element, 8 x 8 blocks and "
    "their edges, any stride") {
  // A (B=2, H=3, S=21, D) float32 tensor; the packed transpose of rows [row0, row0 + rows) of
  // head (1, 2) must be the elements themselves, zeros past `rows`.
  for (int64_t D : {1, 7, 8, 9, 16, 20, 64})
    for (bool strided : {false, true}) {  // strided: the last dim has stride 2
      const int64_t S = 21, sd = strided ? 2 : 1;
      std::vector<float> data(2 * 3 * S * D * sd);
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f - 3.f;
      tg::View v;
      v.data = data.data();
      v.sizes = {2, 3, S, D};
      v.strides = {3 * S * D * sd, S * D * sd, D * sd, sd};
      for (int64_t row0 : {0, 3})
        for (int64_t rows : {0, 1, 8, 13, 16, 18}) {
          // The transpose in panels of W columns, D x W each (tile_gemm_panels' B).
          constexpr int64_t W = tg::cpu::simd::kLanes<float>;
          const int64_t padded = (rows + W - 1) / W * W;
          std::vector<float> panels(D * padded + 1, -7.f);
          tg::cpu::sdpa_tiles::load_transposed_panels<float>(v, 1, 2, row0, rows, panels.data());
          int64_t bad = 0;
          for (int64_t c = 0; c < D; ++c)
            for (int64_t r = 0; r < padded; ++r) {
              const float want =
                  r < rows ? data[(1 * 3 * S + 2 * S + row0 + r) * D * sd + c * sd] : 0.f;
              bad += panels[r / W * D * W + c * W + r % W] != want;
            }
          CHECK_MESSAGE(bad == 0, "panels: D=" << D << " strided=" << strided << " rows=" << rows);
          CHECK(panels[D * padded] == -7.f);  // nothing written past the last panel
          // The rows themselves in panels of W of their columns, rows + 2 rows a panel.
          const int64_t cols = (D + W - 1) / W * W, panel = (rows + 2) * W;
          std::vector<float> rp(cols / W * panel, -7.f);
          tg::cpu::sdpa_tiles::load_rows_panels<float>(v, 1, 2, row0, rows, rp.data(), cols, panel);
          bad = 0;
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
              const float want =
                  c < D ? data[(1 * 3 * S + 2 * S + row0 + r) * D * sd + c * sd] : 0.f;
              bad += rp[c / W * panel + r * W + c % W] != want;
            }
          for (int64_t c = 0; c < cols; ++c)  // the panels' spare rows untouched
            bad += rp[c / W * panel + rows * W + c % W] != -7.f;
          CHECK_MESSAGE(bad == 0,
                        "row panels: D=" << D << " strided=" << strided << " rows=" << rows);
        }
    }
}

// KeyRowsWritten against a model that keeps one flag a row: over a sequence of products (key
// ranges, each followed by its write), every row a product reaches is added to exactly when an
// earlier product or a gap's zeroing wrote it, the gaps between disjoint ranges are zeroed, and
// finish zeroes exactly the rows never written.
TEST_CASE("KeyRowsWritten: each row written once before it is added to, the rest zeroed") {
  using tg::cpu::sdpa_tiles::KeyRowsWritten;
  const int64_t n = 40;
  // Overlapping and touching ranges in both directions, one inside, and two apart from the rest.
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> sequences{
      {{0, 16}, {0, 32}, {16, 16}, {8, 24}},
      {{24, 16}, {8, 16}, {0, 40}},
      {{4, 4}, {20, 8}, {0, 2}},
      {{0, 8}, {9, 4}, {3, 2}},  // gaps of one row, above and below
      {{10, 5}, {0, 9}},
      {}};
  for (size_t s = 0; s < sequences.size(); ++s) {
    CAPTURE(s);
    KeyRowsWritten w(true);
    std::vector<int> written(n, 0), bad;
    const auto zero = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        if (written[r]) bad.push_back(static_cast<int>(r));  // zeroed after a write
        written[r] = 1;
      }
    };
    for (auto [a, len] : sequences[s]) {
      int64_t covered = 0;
      w.product(a, len, [&](int64_t r0, int64_t m, bool add) {
        covered += m;
        for (int64_t r = r0; r < r0 + m; ++r)
          if (add != (written[r] == 1)) bad.push_back(static_cast<int>(r));
      });
      CHECK(covered == len);
      w.wrote(a, len, zero);
      for (int64_t r = a; r < a + len; ++r) written[r] = 1;
    }
    w.finish(n, zero);
    CHECK(bad.empty());
    CHECK(written == std::vector<int>(n, 1));
  }
}
