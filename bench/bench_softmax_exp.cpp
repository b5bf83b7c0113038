// The softmax's exp on one core: the forward's exp pass over a 64 x 128 score tile (36 KiB with
// the kernels' row padding; subtract the row max, exp, store, row sum: backends/cpu/cpu_sdpa.cpp's
// online_softmax), in nanoseconds per score, with three exps:
//  - simd::exp_nonpositive, the one the SDPA kernels run (backends/cpu/simd.h);
//  - scalar::exp_reduced with one 2^n and a clamp, which exp_nonpositive was until 2026-11-24;
//  - simd::exp, the elementwise kernels' exp (any argument, subnormal results);
// and the pass as the kernels run it, sdpa_tiles::exp_row (without AVX-512: exp_nonpositive's
// two halves in two passes over the row).
// Best of 30 runs of 200 passes each. Built for the library's instruction set
// (TAPEGRAD_NATIVE), like the kernels.
//
//   bench_softmax_exp
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "backends/cpu/cpu_sdpa_scores.h"
#include "backends/cpu/simd.h"
#include "bench_args.h"

namespace {

using namespace tg::cpu;
using V = simd::Vec<float>;
constexpr int kW = simd::kLanes<float>;
constexpr int kRows = 64, kCols = 128, kLd = kCols + 16;

V exp_reduced_one_scale(V x) {
  using VI = simd::Vec<int32_t>;
  const V lo = simd::splat(-87.33654f);
  const V xc = x < lo ? lo : x;
  V n;
  const V p = tg::scalar::exp_reduced(xc, n);
  const VI ni = __builtin_convertvector(n, VI);
  const V y = p * reinterpret_cast<V>((ni + 127) << 23);
  return x < lo ? simd::splat(0.0f) : y;
}

// One row's pass with one of the exps: subtract the max, exp, store, sum. Stores -e, in [-1, 0),
// so that every pass sees arguments in [-1.25, -0.25].
template <V (*Exp)(V)>
V one_pass(float* row) {
  const V m = simd::splat(0.25f);
  V sum{};
  for (int c = 0; c < kCols; c += kW) {
    const V e = Exp(simd::load(row + c) - m);
    simd::store(row + c, -e);
    sum += e;
  }
  return sum;
}

// The same as the kernels run it.
V exp_row_pass(float* row) {
  V sum{};
  tg::cpu::sdpa_tiles::exp_row(row, kCols, 0.25f, [&](int64_t c, V e) {
    simd::store(row + c, -e);
    sum += e;
  });
  return sum;
}

template <V (*Pass)(float*)>
double ns_per_score(std::vector<float>& tile) {
  double best = 1e30;
  float sink = 0;
  for (int run = 0; run < 30; ++run) {
    const auto a = std::chrono::steady_clock::now();
    for (int pass = 0; pass < 200; ++pass) {
      for (int r = 0; r < kRows; ++r) sink += simd::reduce_sum(Pass(tile.data() + r * kLd));
    }
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count();
    best = std::min(best, ns / (200.0 * kRows * kCols));
  }
  if (sink == 1.5f) std::printf(" ");  // keeps the passes from being optimized away
  return best;
}

}  // namespace

int main() {
  tg::set_num_threads(1);
  bench::print_machine();
  std::vector<float> tile(kRows * kLd);
  for (size_t i = 0; i < tile.size(); ++i) tile[i] = -static_cast<float>(i % 997) / 997.0f;
  std::printf("\nsoftmax exp pass, 64 x 128 tile in L1, 1 thread, %s vectors (%d lanes)\n\n",
              simd::isa_name(), kW);
  std::printf("| exp | ns per score | relative to exp_nonpositive |\n| --- | ---: | ---: |\n");
  const double ours = ns_per_score<one_pass<simd::exp_nonpositive<float>>>(tile);
  const double before = ns_per_score<one_pass<exp_reduced_one_scale>>(tile);
  const double general = ns_per_score<one_pass<simd::exp<float>>>(tile);
  const double kernels = ns_per_score<exp_row_pass>(tile);
  std::printf("| simd::exp_nonpositive | %.3f | 1.00 |\n", ours);
  std::printf("| exp_reduced, one 2^n (before) | %.3f | %.2f |\n", before, before / ours);
  std::printf("| simd::exp | %.3f | %.2f |\n", general, general / ours);
  std::printf("| sdpa_tiles::exp_row (the kernels' pass) | %.3f | %.2f |\n", kernels,
              kernels / ours);
}
