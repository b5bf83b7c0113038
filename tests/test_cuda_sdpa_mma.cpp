// SDPA on the tensor cores (bfloat16 and float16, and float32 as 3xTF32;
// backends/cuda/cuda_sdpa_mma.cu) against the CPU: random
// option combinations with NaN-poisoned outputs, at aligned, strided and misaligned layouts
// (16-byte copies and element loads), the deterministic backward, fully masked rows, that
// switching the kernels on changes which code runs, and the kernels on warpgroup products.
// Tolerances: sdpa_mma_compare.h.
#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <string>

#include "cuda_parity.h"
#include "sdpa_mma_compare.h"
#include "sdpa_random.h"

using namespace tg;
using namespace cudatest;
using namespace sdpamma;

namespace {

// set_float32_matmul_precision for a scope.
struct Float32Precision {
  std::string was = float32_matmul_precision();
  explicit Float32Precision(const std::string& p) { set_float32_matmul_precision(p); }
  ~Float32Precision() { set_float32_matmul_precision(was); }
  Float32Precision(const Float32Precision&) = delete;
  Float32Precision& operator=(const Float32Precision&) = delete;
};

// Forward and backward on the GPU, outputs poisoned (NaN) where the kernels do not write.
std::pair<SdpaResult, SdpaGrads> run_cuda(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& dout, const SdpaOptions& o) {
  cuda_poison_allocations(true);
  SdpaResult r = sdpa_forward(q, k, v, o);
  SdpaGrads g = sdpa_backward(q, k, v, r.out, dout, r.stats, o);
  cuda_poison_allocations(false);
  return {r, g};
}

void compare_config(const Config& c, DType dt, uint64_t seed, std::mt19937_64& rng) {
  sdpamma::compare_config(c, dt, seed, rng, kCUDA, run_cuda);
}

// `count` random configurations of rng against the CPU under the settings the caller holds
// (`setting` names them in a failure's message), configuration n in dtypes[n % 3].
void compare_random(std::mt19937_64& rng, int count, const std::array<DType, 3>& dtypes,
                    uint64_t seed0, const char* setting) {
  for (int n = 0; n < count; ++n) {
    const Config c = random_config(rng);
    const DType dt = dtypes[static_cast<size_t>(n % 3)];
    INFO("config " << n << " (" << std::string(dtype_name(dt)) << ", " << setting
                   << "): " << describe(c));
    compare_config(c, dt, seed0 + static_cast<uint64_t>(n) * 10, rng);
  }
}

}  // namespace

TEST_CASE("sdpa on the tensor cores: bfloat16 and float16 against the CPU, outputs poisoned") {
  // The mma.sync kernels, also on a device where warpgroup products would take the plain calls
  // (the next case checks those).
  TensorCores on(true);
  const Wgmma mma_sync("off");
  std::mt19937_64 rng(2028);
  int several_tiles = 0, element_loads = 0;
  for (int n = 0; n < 200; ++n) {
    const Config c = random_config(rng);
    const DType dt = n % 2 ? kFloat16 : kBFloat16;
    INFO("config " << n << " (" << std::string(dtype_name(dt)) << "): " << describe(c));
    several_tiles += c.Sq > 64 && c.Skv > 64;
    element_loads += c.layout == Layout::Misaligned || c.Dqk % 8 != 0 || c.Dv % 8 != 0;
    compare_config(c, dt, 7000 + static_cast<uint64_t>(n) * 10, rng);
  }
  CHECK(several_tiles > 40);
  CHECK(element_loads > 40);
}

TEST_CASE("sdpa on the tensor cores: warpgroup products (wgmma), against the CPU") {
  // Plain options (plain_config), where cuda_sdpa_wgmma() sends the forward and the backward's
  // two passes to the kernels of cuda_sdpa_wgmma_*.cu on a device of compute capability 9.0
  // (elsewhere the mma.sync kernels run, and this checks them again); then sequences of many
  // key and query tiles, causal in both alignments, with GQA, at head dims 64, 128 and 256 (the
  // forward alone on warpgroup products: with a producer warpgroup up to 128, without above).
  TensorCores on(true);
  const Wgmma wgmma("on");
  std::mt19937_64 rng(2034);
  for (int n = 0; n < 84; ++n) {
    Config c = plain_config(random_config(rng));
    if (n >= 72) {
      c = Config{};
      c.B = 2;
      c.Hq = 4;
      c.Hk = n % 2 ? 1 : 4;
      c.Sq = n % 4 < 2 ? 1000 : 77;
      c.Skv = 1100;
      c.Dqk = c.Dv = n < 76 ? 64 : n < 80 ? 128 : 256;
      c.opts.causal = n % 3 != 0;
      c.opts.causal_align = n % 2 ? CausalAlign::BottomRight : CausalAlign::TopLeft;
    }
    const DType dt = n % 2 ? kFloat16 : kBFloat16;
    INFO("config " << n << " (" << std::string(dtype_name(dt)) << "): " << describe(c));
    compare_config(c, dt, 9000 + static_cast<uint64_t>(n) * 10, rng);
  }
}

TEST_CASE("sdpa on the tensor cores: the backward is deterministic (bitwise equal run to run)") {
  TensorCores on(true);
  const Tensor q = tgtest::rnd({2, 4, 150, 64}, 1).to(kBFloat16).to(kCUDA);
  const Tensor k = tgtest::rnd({2, 2, 130, 64}, 2).to(kBFloat16).to(kCUDA);
  const Tensor v = tgtest::rnd({2, 2, 130, 64}, 3).to(kBFloat16).to(kCUDA);
  const Tensor dout = tgtest::rnd({2, 4, 150, 64}, 4).to(kBFloat16).to(kCUDA);
  SdpaOptions o;
  o.dropout_p = 0.2;
  o.seed = 5;
  // With dropout (the mma.sync kernels), and without it on warpgroup products where they run.
  for (const bool wgmma : {false, true}) {
    const Wgmma mode(wgmma ? "on" : "off");
    if (wgmma) o.dropout_p = 0;
    const SdpaResult r = sdpa_forward(q, k, v, o);
    const SdpaGrads a = sdpa_backward(q, k, v, r.out, dout, r.stats, o);
    const SdpaGrads b = sdpa_backward(q, k, v, r.out, dout, r.stats, o);
    for (const auto& [x, y] : {std::pair{a.dq, b.dq}, {a.dk, b.dk}, {a.dv, b.dv}})
      CHECK(x.to(kFloat32).to_vector<float>() == y.to(kFloat32).to_vector<float>());
  }
}

TEST_CASE("sdpa on the tensor cores: fully masked rows give zeros and -inf statistics") {
  TensorCores on(true);
  const Tensor q = tgtest::rnd({1, 1, 4, 64}, 1).to(kBFloat16).to(kCUDA);
  const Tensor k = tgtest::rnd({1, 1, 6, 64}, 2).to(kBFloat16).to(kCUDA);
  SdpaOptions o;
  o.mask =
      from_vector(std::vector<bool>(24, false), {1, 1, 4, 6}, TensorOptions(kBool).device(kCUDA));
  const SdpaResult res = sdpa(q, k, k, o);
  for (float x : res.out.to(kFloat32).to_vector<float>()) CHECK(x == 0.0f);
  for (float s : res.stats.to_vector<float>()) CHECK(std::isinf(s));
}

TEST_CASE("sdpa on the tensor cores: scores near 10^9 and 10^12 stay finite") {
  // The tensor-core kernels, then the float32 (SIMT) ones, whose backward caps P at 1 as well.
  for (const bool tensor_cores : {true, false}) {
    INFO("tensor cores " << tensor_cores);
    const TensorCores mode(tensor_cores);
    check_huge_scores(kCUDA, run_cuda);
  }
}

TEST_CASE("sdpa on the tensor cores: the switch changes which kernels run") {
  // Off, bfloat16 runs the float32 kernels on widened copies; on, the tensor-core kernels, whose
  // P is rounded to bfloat16: both agree with the CPU, and with each other only to that
  // rounding, so bitwise equality would mean the switch reached nothing.
  const Tensor q = tgtest::rnd({1, 2, 200, 64}, 1).to(kBFloat16);
  const Tensor k = tgtest::rnd({1, 2, 200, 64}, 2).to(kBFloat16);
  const Tensor v = tgtest::rnd({1, 2, 200, 64}, 3).to(kBFloat16);
  const Tensor cpu = sdpa(q, k, v).out;
  auto on_gpu = [&](bool tensor_cores) {
    TensorCores mode(tensor_cores);
    return sdpa(q.to(kCUDA), k.to(kCUDA), v.to(kCUDA)).out.to(kCPU);
  };
  const Tensor with = on_gpu(true), without = on_gpu(false);
  check_close("tensor cores", cpu, with, 4 * unit(kBFloat16));
  check_close("widened", cpu, without, 2 * unit(kBFloat16));
  CHECK(with.to(kFloat32).to_vector<float>() != without.to(kFloat32).to_vector<float>());
}

TEST_CASE("sdpa on the tensor cores: float32 as 3xTF32") {
  TensorCores on(true);
  std::mt19937_64 rng(2029);
  for (int n = 0; n < 100; ++n) {
    const Config c = random_config(rng);
    INFO("config " << n << " (float32): " << describe(c));
    compare_config(c, kFloat32, 9000 + static_cast<uint64_t>(n) * 10, rng);
  }
  // The tensor cores off run the float32 kernels: the two agree with the CPU but not bitwise
  // with each other, or the switch reached nothing; the matmul precision does not change SDPA.
  const Tensor q = tgtest::rnd({1, 2, 200, 64}, 1), k = tgtest::rnd({1, 2, 200, 64}, 2);
  const Tensor v = tgtest::rnd({1, 2, 200, 64}, 3);
  auto on_gpu = [&](bool tensor_cores, const std::string& precision) {
    TensorCores mode(tensor_cores);
    Float32Precision matmul(precision);
    return sdpa(q.to(kFloat32).to(kCUDA), k.to(kFloat32).to(kCUDA), v.to(kFloat32).to(kCUDA))
        .out.to(kCPU);
  };
  const Tensor split = on_gpu(true, "highest"), exact = on_gpu(false, "highest");
  CHECK(on_gpu(true, "high").to_vector<float>() == split.to_vector<float>());
  const Tensor cpu = sdpa(q.to(kFloat32), k.to(kFloat32), v.to(kFloat32)).out;
  check_close("3xTF32", cpu, split, 4 * unit(kFloat32));
  check_close("float32", cpu, exact, 1e-5);
  CHECK(split.to_vector<float>() != exact.to_vector<float>());
}

TEST_CASE("sdpa on the tensor cores: 32 rows per warp, against the CPU and bitwise against 16") {
  TensorCores on(true);
  {
    WarpRows rows(32);
    std::mt19937_64 rng(2030);
    int two_blocks = 0;
    for (int n = 0; n < 120; ++n) {
      const Config c = random_config(rng);
      const DType dt = n % 3 == 0 ? kBFloat16 : n % 3 == 1 ? kFloat16 : kFloat32;
      INFO("config " << n << " (" << std::string(dtype_name(dt))
                     << ", 32 rows per warp): " << describe(c));
      two_blocks += c.Sq > 128;
      compare_config(c, dt, 11000 + static_cast<uint64_t>(n) * 10, rng);
    }
    CHECK(two_blocks > 20);
  }
  // Where every tile is interior (no option, whole tiles) and the key tiles keep their width
  // (head dims up to 64), a row's sums run in the same order whichever warp holds it, so two
  // slices per warp must give the bits of one: a slice reading or writing another's rows would
  // not.
  for (const auto& [d, dt] : {std::pair{int64_t{64}, kBFloat16}, {int64_t{32}, kFloat16}}) {
    const Tensor q = tgtest::rnd({2, 4, 256, d}, 1).to(dt).to(kCUDA);
    const Tensor k = tgtest::rnd({2, 2, 192, d}, 2).to(dt).to(kCUDA);
    const Tensor v = tgtest::rnd({2, 2, 192, d}, 3).to(dt).to(kCUDA);
    const Tensor dout = tgtest::rnd({2, 4, 256, d}, 4).to(dt).to(kCUDA);
    auto run = [&](int rows) {
      WarpRows mode(rows);
      const SdpaResult r = sdpa_forward(q, k, v, {});
      const SdpaGrads g = sdpa_backward(q, k, v, r.out, dout, r.stats, {});
      std::vector<std::vector<float>> all;
      for (const Tensor& t : {r.out, r.stats, g.dq, g.dk, g.dv})
        all.push_back(t.to(kFloat32).to(kCPU).to_vector<float>());
      return all;
    };
    const auto a16 = run(16), a32 = run(32), b32 = run(32);
    const char* names[] = {"out", "stats", "dq", "dk", "dv"};
    for (size_t t = 0; t < a16.size(); ++t) {
      size_t differ = 0;
      double worst = 0;
      for (size_t e = 0; e < a16[t].size(); ++e) {
        differ += a16[t][e] != a32[t][e];
        worst = std::max(worst, std::abs(static_cast<double>(a16[t][e]) - a32[t][e]));
      }
      INFO("head dim " << d << ", " << dtype_name(dt) << ", " << names[t] << ": " << differ
                       << " elements differ, by up to " << worst);
      CHECK(a32[t] == b32[t]);  // run to run
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("sdpa on the tensor cores: dQ summed by the dK/dV pass, against the CPU") {
  // cuda_sdpa_deterministic() false: no dQ pass, each key block adds its share of dQ with
  // atomic adds. Every dtype and option; dK and dV stay bitwise what the default gives.
  TensorCores on(true);
  {
    const Deterministic atomics(false);
    std::mt19937_64 rng(2033);
    compare_random(rng, 60, {kBFloat16, kFloat16, kFloat32}, 15000, "dQ summed");
  }
  const Tensor q = tgtest::rnd({2, 4, 150, 64}, 1).to(kBFloat16).to(kCUDA);
  const Tensor k = tgtest::rnd({2, 2, 130, 64}, 2).to(kBFloat16).to(kCUDA);
  const Tensor v = tgtest::rnd({2, 2, 130, 64}, 3).to(kBFloat16).to(kCUDA);
  const Tensor dout = tgtest::rnd({2, 4, 150, 64}, 4).to(kBFloat16).to(kCUDA);
  SdpaOptions o;
  o.causal = true;
  const SdpaResult r = sdpa_forward(q, k, v, o);
  const auto grads = [&](bool deterministic) {
    const Deterministic mode(deterministic);
    return sdpa_backward(q, k, v, r.out, dout, r.stats, o);
  };
  const SdpaGrads fixed = grads(true), summed = grads(false);
  const auto values = [](const Tensor& t) { return t.to(kFloat32).to_vector<float>(); };
  CHECK(values(fixed.dk) == values(summed.dk));
  CHECK(values(fixed.dv) == values(summed.dv));
  check_close("dq summed against the dQ pass", fixed.dq.to(kFloat64), summed.dq.to(kFloat64),
              4 * unit(kBFloat16));
}

TEST_CASE("sdpa on the tensor cores: dQ summed in fixed point, against the CPU and run to run") {
  // cuda_sdpa_deterministic_dq() "fixed": each dK/dV block adds its keys' share of dQ as
  // integer counts of the row's unit. Every dtype and option; then many key blocks adding to the
  // same rows at once (float32 at head dim 128, where "auto" picks it, and bfloat16 at 256): dQ
  // bitwise equal over two runs, dK and dV bitwise what the dQ pass gives.
  TensorCores on(true);
  {
    const DeterministicDq fixed("fixed");
    std::mt19937_64 rng(2035);
    compare_random(rng, 30, {kFloat32, kBFloat16, kFloat16}, 17000, "dQ in fixed point");
  }
  for (const auto& [dtype, width] : {std::pair{kFloat32, 128}, {kBFloat16, 256}}) {
    const DType dt = dtype;  // not a structured binding: INFO and the lambdas capture it
    const int64_t d = width;
    INFO(std::string(dtype_name(dt)) << ", head dim " << d);
    const Tensor q = tgtest::rnd({2, 4, 700, d}, 1).to(dt).to(kCUDA);
    const Tensor k = tgtest::rnd({2, 2, 900, d}, 2).to(dt).to(kCUDA);
    const Tensor v = tgtest::rnd({2, 2, 900, d}, 3).to(dt).to(kCUDA);
    const Tensor dout = tgtest::rnd({2, 4, 700, d}, 4).to(dt).to(kCUDA);
    const SdpaResult r = sdpa_forward(q, k, v, SdpaOptions{});
    const auto grads = [&](const char* mode) {
      const DeterministicDq dq(mode);
      return sdpa_backward(q, k, v, r.out, dout, r.stats, SdpaOptions{});
    };
    const SdpaGrads a = grads("fixed"), b = grads("fixed"), pass = grads("pass");
    const auto values = [](const Tensor& t) { return t.to(kFloat32).to_vector<float>(); };
    CHECK(values(a.dq) == values(b.dq));
    CHECK(values(a.dk) == values(pass.dk));
    CHECK(values(a.dv) == values(pass.dv));
    // Two sums of 3xTF32 products in different groupings: each within compare_config's 8 units
    // of the exact dQ (at head dim 128 an H100 gave 6.5e-6 of the largest element apart).
    check_close("dq in fixed point against the dQ pass", pass.dq.to(kFloat64), a.dq.to(kFloat64),
                8 * unit(dt, d));
  }
}
