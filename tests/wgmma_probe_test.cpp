// wgmma_probe.h's products against sums in double: in test_cuda on a GPU of compute capability
// 9.0 (skipped elsewhere), and in test_cuda_emulated on the CPU emulator. bfloat16 operands, and
// float32 ones exact in TF32 (exact products), float32 sums: each result within 2^-20 of the sum
// of its terms' magnitudes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "test_util.h"
#include "tests/wgmma_probe.h"

namespace {

uint16_t bf16_bits(float x) {  // x has at most 8 significant bits: exact
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}
double bf16_value(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Row m of a (rows of k values) times row n of b: the sum in double, and its terms' magnitudes.
struct Dot {
  double sum = 0, mag = 0;
};
Dot dot(const std::vector<float>& a, const std::vector<float>& b, int k, int m, int n) {
  Dot d;
  for (int i = 0; i < k; ++i) {
    const double p = static_cast<double>(a[m * k + i]) * b[n * k + i];
    d.sum += p;
    d.mag += std::fabs(p);
  }
  return d;
}

}  // namespace

TEST_CASE("warpgroup products (wgmma) on known operands, against sums in double") {
  using namespace tgtest::wgmma_probe;
  std::mt19937 rng(38);
  std::uniform_int_distribution<int> pick(-128, 127);
  std::vector<uint16_t> a(kM * kK), b(kM * kK);
  for (auto& x : a) x = bf16_bits(static_cast<float>(pick(rng)) / 64.0f);
  for (auto& x : b) x = bf16_bits(static_cast<float>(pick(rng)) / 64.0f);
  Result r;
  if (!run(a, b, r)) {
    MESSAGE("no device of compute capability 9.0: the warpgroup products are not probed");
    return;
  }
  REQUIRE(r.ss.size() == static_cast<size_t>(kM * kM));
  REQUIRE(r.rs.size() == static_cast<size_t>(kM * kK));
  REQUIRE(r.rs_half.size() == static_cast<size_t>(kM * kHalf));
  REQUIRE(r.rs_k.size() == static_cast<size_t>(kM * kM));
  const auto A = [&](int m, int k) { return bf16_value(a[m * kK + k]); };
  const auto B = [&](int n, int k) { return bf16_value(b[n * kK + k]); };
  // Whether got is within 2^-20 of the sum over k < n_k of x(k) y(k) in magnitude.
  const auto wrong = [](float got, int n_k, auto&& x, auto&& y) {
    double sum = 0, mag = 0;
    for (int k = 0; k < n_k; ++k) {
      sum += x(k) * y(k);
      mag += std::fabs(x(k) * y(k));
    }
    return std::fabs(got - sum) > 0x1p-20 * mag + 1e-30;
  };
  int wrong_ss = 0, wrong_rs = 0, wrong_half = 0, wrong_k = 0;
  for (int m = 0; m < kM; ++m) {
    const auto a_row = [&](int k) { return A(m, k); };
    for (int n = 0; n < kM; ++n) {  // A B^T over k < 256, and over k < 64
      const auto b_row = [&](int k) { return B(n, k); };
      wrong_ss += wrong(r.ss[m * kM + n], kK, a_row, b_row);
      wrong_k += wrong(r.rs_k[m * kM + n], kM, a_row, b_row);
    }
    for (int n = 0; n < kK; ++n) {  // A[:, :64] B, B's rows as k
      const auto b_col = [&](int k) { return B(k, n); };
      wrong_rs += wrong(r.rs[m * kK + n], kM, a_row, b_col);
      if (n < kHalf) wrong_half += wrong(r.rs_half[m * kHalf + n], kM, a_row, b_col);
    }
  }
  INFO("first element: ss " << r.ss[0] << ", rs " << r.rs[0] << ", rs_half " << r.rs_half[0]);
  CHECK(wrong_ss == 0);    // S = Q K^T's kind: both operands K-major in shared memory
  CHECK(wrong_rs == 0);    // O = P V's kind at head dim 256: A from registers, B MN-major
  CHECK(wrong_half == 0);  // the same at head dim 128
  CHECK(wrong_k == 0);     // S = Q K^T's kind with Q in registers (head dim 64): B K-major
}

TEST_CASE("warpgroup products in TF32 on known operands, against sums in double") {
  // Values of at most 8 significant bits: exact in TF32 (10-bit mantissa), exact products.
  using namespace tgtest::wgmma_probe;
  std::mt19937 rng(40);
  std::uniform_int_distribution<int> pick(-128, 127);
  std::vector<float> a(kM * kTf32K), b(kTf32N * kTf32K);
  for (auto& x : a) x = static_cast<float>(pick(rng)) / 64.0f;
  for (auto& x : b) x = static_cast<float>(pick(rng)) / 64.0f;
  Tf32Result r;
  if (!run_tf32(a, b, r)) {
    MESSAGE("no device of compute capability 9.0: the TF32 warpgroup products are not probed");
    return;
  }
  REQUIRE(r.ss.size() == static_cast<size_t>(kM * kTf32N));
  REQUIRE(r.rs.size() == static_cast<size_t>(kM * kM));
  int wrong_ss = 0, wrong_rs = 0;
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < kTf32N; ++n) {
      const Dot d = dot(a, b, kTf32K, m, n);
      const double tol = 0x1p-20 * d.mag + 1e-30;
      wrong_ss += std::fabs(r.ss[m * kTf32N + n] - d.sum) > tol;
      if (n < kM) wrong_rs += std::fabs(r.rs[m * kM + n] - d.sum) > tol;
    }
  }
  INFO("first element: ss " << r.ss[0] << ", rs " << r.rs[0]);
  CHECK(wrong_ss == 0);  // both operands K-major in shared memory, N 128
  CHECK(wrong_rs == 0);  // A from registers (mma.m16n8k8's TF32 fragment), N 64
}

TEST_CASE("warpgroup products in 3xTF32 on float32 operands, against sums in double") {
  // Operands with 24-bit mantissas, which one TF32 product gets wrong by about 2^-11 of the
  // terms' magnitudes: 3xTF32's three products from hi and lo halves within 2^-18 (float32
  // sums of 3 x 64 terms in the hardware's order), and the plain TF32 ones not.
  using namespace tgtest::wgmma_probe;
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> pick(-1.0f, 1.0f);
  std::vector<float> a(kM * kTf32K), b(kTf32N * kTf32K);
  for (auto& x : a) x = pick(rng);
  for (auto& x : b) x = pick(rng);
  Tf32Result split, plain;
  if (!run_tf32(a, b, split, true) || !run_tf32(a, b, plain, false)) {
    MESSAGE("no device of compute capability 9.0: the 3xTF32 warpgroup products are not probed");
    return;
  }
  REQUIRE(split.ss.size() == static_cast<size_t>(kM * kTf32N));
  REQUIRE(split.rs.size() == static_cast<size_t>(kM * kM));
  REQUIRE(plain.ss.size() == static_cast<size_t>(kM * kTf32N));
  int wrong_ss = 0, wrong_rs = 0, plain_off = 0;
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < kTf32N; ++n) {
      const Dot d = dot(a, b, kTf32K, m, n);
      const double tol = 0x1p-18 * d.mag;
      wrong_ss += std::fabs(split.ss[m * kTf32N + n] - d.sum) > tol;
      if (n < kM) wrong_rs += std::fabs(split.rs[m * kM + n] - d.sum) > tol;
      plain_off += std::fabs(plain.ss[m * kTf32N + n] - d.sum) > tol;
    }
  }
  INFO("first element: " << split.ss[0] << " (3xTF32), " << plain.ss[0] << " (TF32)");
  CHECK(wrong_ss == 0);
  CHECK(wrong_rs == 0);
  CHECK(plain_off > kM * kTf32N / 2);  // the check can tell them apart
}
