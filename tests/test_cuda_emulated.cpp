// The tensor-core SDPA kernels (backends/cuda/cuda_sdpa_mma_*.cu) run on the CPU emulator of
// tests/cuda_emulator, against the CPU's SDPA: their indices, fragments, option rules, masks,
// tile walks and copy pipeline are checked in every build, GPU or not (the hardware's own
// behaviour, timing and rounding are test_cuda_sdpa_mma.cpp's, on a GPU). Each configuration
// runs twice: threads resumed in order with copies landing at their wait, then in the opposite
// order with copies landing at once. A result that changes reads shared memory another thread
// writes (or a copy refills) without a barrier between.
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/op_util.h"
#include "ops/sdpa_check.h"
#include "sdpa_mma_compare.h"
#include "tests/cuda_emulator/runtime.h"
#include "tests/cuda_emulator/sdpa_mma.h"

using namespace tg;
using namespace sdpamma;

namespace {

// A shared-memory array of the emulator's size for the checks below (each kernel file has its
// own; cuda_emulator/runtime.h).
alignas(1024) unsigned char g_shared[cuda_emulator::kEmulatedSharedArray];
const bool g_registered = cuda_emulator::register_shared(g_shared, sizeof g_shared);

// Forward and backward on the emulated kernels, laid out as tg::sdpa_forward / sdpa_backward
// lay out theirs; every result starts as NaN, so an element the kernels skip shows.
std::pair<SdpaResult, SdpaGrads> run_emulated(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const Tensor& dout, const SdpaOptions& o) {
  SdpaParams p = detail::sdpa_params(q, k, v, o);
  const TensorOptions stats_options = q.options().dtype(kFloat32);
  SdpaResult r;
  r.out = full({p.batch(), p.len_q(), p.heads_q(), p.dim_v()}, NAN, q.options()).transpose(1, 2);
  r.stats = full({p.batch(), p.heads_q(), p.len_q(), 1}, NAN, stats_options);
  p.out = detail::sdpa_rows(r.out, p, true);
  p.stats = detail::sdpa_rows(r.stats, p, true);
  REQUIRE(cuda_emulator::sdpa_mma_forward(p));
  SdpaGrads g;
  g.dq = full(q.sizes(), NAN, q.options());
  g.dk = full(k.sizes(), NAN, k.options());
  g.dv = full(v.sizes(), NAN, v.options());
  SdpaGradViews views{detail::sdpa_rows(g.dq, p, true),
                      detail::sdpa_rows(g.dk, p, false),
                      detail::sdpa_rows(g.dv, p, false),
                      {}};
  Tensor dscores;
  if (o.mask && o.mask->dtype() != kBool) {
    dscores = zeros({p.batch(), p.heads_q(), p.len_q(), p.len_kv()}, stats_options);
    views.dscores = detail::view_of(dscores);
  }
  REQUIRE(cuda_emulator::sdpa_mma_backward(p, detail::sdpa_rows(dout, p, true), views));
  if (dscores.defined()) g.dmask = sum_to(dscores, o.mask->sizes()).to(q.dtype());
  return {r, g};
}

// The same results, bitwise, with the threads resumed in the opposite order and the copies landing
// as soon as they are issued.
std::pair<SdpaResult, SdpaGrads> run_both_orders(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& dout, const SdpaOptions& o) {
  auto forward = run_emulated(q, k, v, dout, o);
  cuda_emulator::set_schedule(cuda_emulator::Order::Reverse, cuda_emulator::Copies::AtIssue);
  const auto reverse = run_emulated(q, k, v, dout, o);
  cuda_emulator::set_schedule(cuda_emulator::Order::Forward, cuda_emulator::Copies::AtWait);
  const auto bits = [](const Tensor& t) {
    return t.defined() ? t.to(kFloat64).to_vector<double>() : std::vector<double>{};
  };
  // NaN != NaN, so a NaN anywhere fails here too (the comparison with the CPU reports where).
  CHECK(bits(forward.first.out) == bits(reverse.first.out));
  CHECK(bits(forward.first.stats) == bits(reverse.first.stats));
  CHECK(bits(forward.second.dq) == bits(reverse.second.dq));
  CHECK(bits(forward.second.dk) == bits(reverse.second.dk));
  CHECK(bits(forward.second.dv) == bits(reverse.second.dv));
  CHECK(bits(forward.second.dmask) == bits(reverse.second.dmask));
  return forward;
}

// Configuration n of a random sweep against the CPU in both schedules: every option (head dim 7
// where odd_dim: single adds), rows per warp alternating, the dtypes in turn, the seeds from
// seed0. float32 tiles above head dim 128 exceed the shared memory (the GPU runs its SIMT
// kernels there): bfloat16 instead.
void compare_random(std::mt19937_64& rng, int n, const std::array<DType, 3>& dtypes, uint64_t seed0,
                    bool odd_dim = false) {
  Config c = random_config(rng);
  if (odd_dim) c.Dqk = 7;
  const WarpRows rows(n % 2 ? 32 : 16);
  DType dt = dtypes[static_cast<size_t>(n % 3)];
  if (dt == kFloat32 && std::max(c.Dqk, c.Dv) > 128) dt = kBFloat16;
  INFO("config " << n << " (" << std::string(dtype_name(dt)) << "): " << describe(c));
  compare_config(c, dt, seed0 + static_cast<uint64_t>(n) * 10, rng, kCPU, run_both_orders);
}

}  // namespace

TEST_CASE("the CUDA emulator reports what a GPU would leave undefined") {
  namespace emu = cuda_emulator;
  const auto message = [](auto&& kernel, size_t shared = 0) -> std::string {
    try {
      emu::launch(2, 64, shared, kernel);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  // One lane at __syncthreads while the rest of its warp waits for it in a shuffle: a deadlock,
  // reported instead of hanging.
  CHECK(message([] {
          int x = 1;
          if (emu::thread_idx().x == 5) {
            emu::sync_block();
          } else {
            emu::warp_exchange("test", &x, sizeof x);
          }
        }).find("[cuda emulator] deadlock") != std::string::npos);
  // A lane that leaves while its warp waits in a collective.
  CHECK(message([] {
          if (emu::thread_idx().x == 3) return;
          int x = 1;
          emu::warp_exchange("test", &x, sizeof x);
        }).find("a lane exited while its warp waits") != std::string::npos);
  // Lanes of one warp in different collectives (a shuffle some lanes skip).
  CHECK(message([] {
          int x = 1;
          if (emu::thread_idx().x % 32 != 7) emu::warp_exchange("shfl", &x, sizeof x);
          emu::warp_exchange("ldmatrix", &x, sizeof x);
        }).find("lanes of a warp in different collectives: shfl and ldmatrix") !=
        std::string::npos);
  // A copy never waited for.
  alignas(16) static unsigned char src[16], dst[64 * 16];
  CHECK(message([] {
          emu::async_copy(dst + 16 * emu::thread_idx().x, src, true);
        }).find("still in flight at exit") != std::string::npos);
  // A 4-byte copy to an address that is not a multiple of 4.
  CHECK(message([] {
          emu::async_copy(dst + 16 * emu::thread_idx().x + 2, src, true, 4);
          emu::async_commit();
          emu::async_wait(0);
        }).find("cp.async of 4 bytes from or to a misaligned address") != std::string::npos);
  // Named barriers: one whose count is never reached (a deadlock, each waiting run named), one
  // left with arrivals at the block's end, and two counts in one phase.
  CHECK(message([] {
          if (emu::thread_idx().x < 32) emu::named_sync(1, 64);
        }).find("deadlock: threads 0-31 at named barrier 1;") != std::string::npos);
  CHECK(message([] {
          if (emu::thread_idx().x < 32) emu::named_arrive(2, 64);
        }).find("named barrier 2 left with 32 of 64 threads arrived") != std::string::npos);
  CHECK(message([] {
          emu::named_arrive(3, emu::thread_idx().x < 32 ? 64 : 32);
        }).find("named barrier 3 named with counts 64 and 32 in one phase") != std::string::npos);
  // A warp that skips a warpgroup product the other three warps of its group issue.
  const auto products = [](bool every_warp) -> std::string {
    try {
      emu::launch(1, 128, 0, [&] {
        if (every_warp || emu::thread_idx().x / 32 != 2) emu::note_warpgroup_product();
      });
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(products(false).find("warpgroup 0 issued different numbers of warpgroup products") !=
        std::string::npos);
  CHECK(products(true) == "");
  // Nothing wrong: barriers, exchanges and copies waited for.
  CHECK(message([] {
          emu::async_copy(dst + 16 * emu::thread_idx().x, src, true);
          emu::async_commit();
          emu::async_wait(0);
          emu::sync_block();
          int lane = static_cast<int>(emu::thread_idx().x % 32);
          const unsigned char* all = emu::warp_exchange("test", &lane, sizeof lane);
          int other;
          std::memcpy(&other, all + emu::kSlot * static_cast<size_t>(lane ^ 1), sizeof other);
          if (other != (lane ^ 1)) fail("test", "lane ", lane, " read ", other);
        }) == "");
  // A warpgroup product's read (shared_at) of bytes a cp.async copy landed in: a fault until
  // the copying thread runs fence.proxy.async.
  const auto proxy = [](bool fenced) -> std::string {
    alignas(16) static unsigned char src[16];
    try {
      emu::launch(1, 32, 64, [&] {
        if (const unsigned t = emu::thread_idx().x; t < 4) {  // chunk t, by thread t
          emu::async_copy(g_shared + 16 * t, src, true);
          emu::async_commit();
          emu::async_wait(0);
          if (fenced) emu::fence_proxy_async();
        }
        emu::sync_block();
        emu::shared_at(emu::shared_offset(g_shared + 16), 16);
      });
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(proxy(false).find("a warpgroup product read shared memory at 16, where thread 1's "
                          "cp.async copy landed with no fence.proxy.async") != std::string::npos);
  CHECK(proxy(true) == "");
  // A hand-over through named barriers: warp 1 writes, then arrives; warp 0 waits, then reads.
  static int handed[32];
  CHECK(message([] {
          const unsigned t = emu::thread_idx().x;
          if (t >= 32) {
            handed[t - 32] = static_cast<int>(t);
            emu::named_arrive(4, 64);
          } else {
            emu::named_sync(4, 64);
            if (handed[t] != static_cast<int>(t) + 32)
              fail("test", "thread ", t, " read too early");
          }
        }) == "");
}

TEST_CASE(
    "the CUDA emulator's schedules: copies at their wait or at once, threads in either order") {
  namespace emu = cuda_emulator;
  // A copy lands at the wait that must complete it, not before: the destination still holds
  // its old bytes in between.
  alignas(16) static unsigned char src[16], dst[64 * 16];
  std::memset(src, 7, sizeof src);
  const auto copy = [&](emu::Copies copies) {
    std::memset(dst, 0, sizeof dst);
    std::vector<int> before(64), after(64);
    emu::set_schedule(emu::Order::Forward, copies);
    emu::launch(1, 64, 0, [&] {
      const unsigned t = emu::thread_idx().x;
      emu::async_copy(dst + 16 * t, src, true);
      emu::async_commit();
      before[t] = dst[16 * t];
      emu::async_wait(0);
      after[t] = dst[16 * t];
    });
    emu::set_schedule(emu::Order::Forward, emu::Copies::AtWait);
    return std::pair{before, after};
  };
  CHECK(copy(emu::Copies::AtWait) == std::pair{std::vector<int>(64, 0), std::vector<int>(64, 7)});
  // Or, the other extreme, as soon as they are issued.
  CHECK(copy(emu::Copies::AtIssue) == std::pair{std::vector<int>(64, 7), std::vector<int>(64, 7)});
  // A read of another thread's write with no barrier between sees what the order gives it: the
  // lower thread's value in one order, nothing in the other.
  const auto unsynchronised = [](emu::Order order) {
    std::vector<int> shared(64, -1), seen(64);
    emu::set_schedule(order, emu::Copies::AtWait);
    emu::launch(1, 64, 0, [&] {
      const unsigned t = emu::thread_idx().x;
      shared[t] = static_cast<int>(t);
      seen[t] = shared[t ^ 1];
    });
    emu::set_schedule(emu::Order::Forward, emu::Copies::AtWait);
    return seen;
  };
  CHECK(unsynchronised(emu::Order::Forward) != unsynchronised(emu::Order::Reverse));
  // The first runnable thread runs: the last lane into warp 0's shuffle goes on to its end, then
  // the lanes released before it (not warp 1, which is after them), then warp 1 likewise.
  std::vector<int> ran;
  emu::launch(1, 64, 0, [&] {
    const int t = static_cast<int>(emu::thread_idx().x);
    ran.push_back(t);
    emu::warp_exchange("test", &t, sizeof t);
    ran.push_back(t);
  });
  std::vector<int> expected;
  for (const int warp : {0, 32}) {
    for (int t = 0; t < 32; ++t) expected.push_back(warp + t);
    expected.push_back(warp + 31);
    for (int t = 0; t < 31; ++t) expected.push_back(warp + t);
  }
  CHECK(ran == expected);
}

TEST_CASE("3xTF32's split: hi is x to the nearest TF32 (ties away from zero), hi + lo is x") {
  const auto as_float = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  // x to 10 fraction bits, to nearest with ties away from zero (std::round's), in double: to
  // the TF32 quantum of x's binade (of the smallest normals' binade for a subnormal x).
  const auto nearest_tf32 = [](float x) {
    const int e = std::max(std::ilogb(x), -126) - 10;
    return std::ldexp(std::round(std::ldexp(static_cast<double>(x), -e)), e);
  };
  std::vector<float> xs = {0.0f,         -0.0f,         1.0f,        -1.0f,  0x1.001p0f,
                           -0x1.001p0f,  0x1.003p0f,    0x1.7ffp-3f, 1e-40f, -3e-39f,
                           0x1.ffcp127f, -0x1.ffdp127f, FLT_MIN};
  std::mt19937 rng(7);
  // Magnitudes up to the last float whose TF32 rounding is finite (0x1.ffdffep127), every
  // binade alike, subnormals among them.
  std::uniform_int_distribution<uint32_t> bits(0, 0x7f7fefffu);
  for (int i = 0; i < 20000; ++i) {
    uint32_t u = bits(rng);
    if (i % 4 == 0) u = (u & ~0x1fffu) | 0x1000u;  // exactly halfway between two TF32 values
    xs.push_back(as_float(u) * (i % 2 ? -1.0f : 1.0f));
  }
  int wrong = 0;
  for (const float x : xs) {
    const cuda_emulator::Tf32Halves h = cuda_emulator::split_tf32(x);
    const double hi = as_float(h.hi), lo = as_float(h.lo), want = nearest_tf32(x);
    // lo within half a TF32 unit of x's binade (of the normals' smallest, for subnormal x).
    const double half_unit = std::ldexp(1.0, std::max(std::ilogb(x), -126) - 11);
    const bool ok = (h.hi & 0x1fffu) == 0 && hi == want && hi + lo == static_cast<double>(x) &&
                    std::fabs(lo) <= half_unit;
    if (!ok && wrong++ < 5)
      MESSAGE("x = " << x << ": hi " << hi << " (want " << want << "), lo " << lo);
  }
  CHECK(wrong == 0);
  // Rounded up past the largest float, hi is infinite and lo too; infinite and NaN x give a NaN
  // lo, so every product that takes them is NaN or infinite, as x's would be.
  const cuda_emulator::Tf32Halves top = cuda_emulator::split_tf32(FLT_MAX);
  CHECK(std::isinf(as_float(top.hi)));
  CHECK(std::isinf(as_float(top.lo)));
  for (const float x : {INFINITY, -INFINITY, NAN, -NAN}) {
    const cuda_emulator::Tf32Halves h = cuda_emulator::split_tf32(x);
    CHECK(std::isnan(as_float(h.lo)));
    if (std::isinf(x)) CHECK(as_float(h.hi) == x);
  }
}

TEST_CASE("emulated tensor-core sdpa: random configurations against the CPU") {
  const Wgmma mma_sync("off");  // the emulated device is an H100: the wgmma cases are below
  std::mt19937_64 rng(2031);
  for (int n = 0; n < 24; ++n) compare_random(rng, n, {kBFloat16, kFloat16, kFloat32}, 13000);
}

TEST_CASE("emulated tensor-core sdpa: dQ summed by the dK/dV pass, against the CPU") {
  // cuda_sdpa_deterministic() false: no dQ pass; each dK/dV block adds its keys' share of dQ
  // (the emulator runs the blocks one after another, so here the order is fixed and both
  // schedules agree bitwise). Random configurations, and an odd head dim (single adds).
  const Deterministic atomics(false);
  const Wgmma mma_sync("off");  // as the GPU picks for a summed dQ (the forward too, here)
  std::mt19937_64 rng(2032);
  for (int n = 0; n < 6; ++n)
    compare_random(rng, n, {kBFloat16, kFloat16, kFloat32}, 14000, /*odd_dim=*/n == 5);
}

TEST_CASE(
    "emulated tensor-core sdpa: dQ summed in fixed point by the dK/dV pass, against the CPU") {
  // cuda_sdpa_deterministic_dq() "fixed": each dK/dV block adds its share of dQ as integer
  // counts of the row's unit. Random configurations (every option), and an odd head dim.
  const DeterministicDq fixed("fixed");
  const Wgmma mma_sync("off");
  std::mt19937_64 rng(2034);
  for (int n = 0; n < 6; ++n) {
    cuda_emulator::clear_launches();
    compare_random(rng, n, {kFloat32, kBFloat16, kFloat16}, 16000, /*odd_dim=*/n == 4);
    const auto& names = cuda_emulator::launched();
    CHECK(std::count(names.begin(), names.end(), "sdpa mma kv bounds kernel") == 2);
    CHECK(std::count(names.begin(), names.end(), "sdpa mma backward dq kernel") == 0);
  }
  // "auto" (the default): fixed point for float32 rows of head dims 65 to 128 alone.
  const DeterministicDq automatic("auto");
  struct Case {
    DType dt;
    int64_t d;
    bool fixed_point;
  };
  for (const Case& c :
       {Case{kFloat32, 100, true}, {kFloat32, 64, false}, {kBFloat16, 100, false}}) {
    INFO(std::string(dtype_name(c.dt)) << ", head dim " << c.d);
    const Tensor x = tgtest::rnd({1, 1, 20, c.d}, 7).to(c.dt);
    cuda_emulator::clear_launches();
    run_emulated(x, x, x, x, SdpaOptions{});
    const auto& names = cuda_emulator::launched();
    CHECK(std::count(names.begin(), names.end(), "sdpa mma kv bounds kernel") == c.fixed_point);
    CHECK(std::count(names.begin(), names.end(), "sdpa mma backward dq kernel") == !c.fixed_point);
  }
}

TEST_CASE("emulated tensor-core sdpa: fixed-point dQ is NaN where a term is not finite") {
  // An infinite value of V makes dP, and so dS, not finite for every row that sees its key:
  // the dQ pass's float sums give non-finite rows, the fixed-point sums mark them NaN (their
  // unit is NaN: cuda_sdpa_dq_fixed.cuh). The rows of the other sequence stay finite.
  const Wgmma mma_sync("off");
  const Tensor q = tgtest::rnd({2, 2, 40, 16}, 1).to(kFloat32);
  const Tensor k = tgtest::rnd({2, 1, 40, 16}, 2).to(kFloat32);
  const Tensor dout = tgtest::rnd({2, 2, 40, 16}, 4).to(kFloat32);
  Tensor v = tgtest::rnd({2, 1, 40, 16}, 3).to(kFloat32);
  v.data_ptr<float>()[3 * 16 + 5] = INFINITY;  // sequence 0, key 3
  const auto dq_values = [&](const char* mode) {
    const DeterministicDq dq(mode);
    return run_emulated(q, k, v, dout, SdpaOptions{}).second.dq.to_vector<float>();
  };
  const std::vector<float> pass = dq_values("pass"), fixed = dq_values("fixed");
  const size_t half = fixed.size() / 2;
  for (size_t i = 0; i < fixed.size(); ++i) {
    INFO("element " << i);
    CHECK(std::isfinite(pass[i]) == (i >= half));
    CHECK(std::isnan(fixed[i]) == (i < half));
    if (i >= half) CHECK(std::abs(fixed[i] - pass[i]) <= 1e-5f * (1 + std::abs(pass[i])));
  }
}

TEST_CASE("emulated tensor-core sdpa: warpgroup products (wgmma), against the CPU") {
  // Plain options only (plain_config), the kernels counted in the launches: each once for each
  // of run_both_orders' two runs (above head dim 128, the forward alone, without a producer
  // warpgroup: the backward runs mma.sync), and not at all when switched off.
  const auto wgmma_launches = [](bool narrow) {
    const auto& names = cuda_emulator::launched();
    int n = 0;
    for (const char* kernel :
         {narrow ? "sdpa wgmma forward kernel with a producer" : "sdpa wgmma forward kernel",
          "sdpa wgmma backward dq kernel", "sdpa wgmma backward dk/dv kernel"})
      n += std::count(names.begin(), names.end(), std::string(kernel)) == 2;
    return n + std::count_if(names.begin(), names.end(), [](const std::string& name) {
             return name.find("wgmma") != std::string::npos;
           });
  };
  std::mt19937_64 rng(2033);
  for (int n = 0; n < 10; ++n) {
    Config c = plain_config(random_config(rng));
    if (n >= 6) {  // four key tiles or more: each buffer refilled while the other is read
      c = Config{};
      c.Sq = 150;
      c.Skv = n < 8 ? 450 : 300;  // 64-key tiles above head dim 128
      c.Dqk = n == 6 ? 64 : n == 7 ? 128 : n == 8 ? 256 : 200;
      c.Dv = n == 9 ? 256 : c.Dqk;
      c.opts.causal = n % 2 == 1;
      c.opts.causal_align = CausalAlign::BottomRight;
    }
    const DType dt = n % 2 ? kFloat16 : kBFloat16;
    const bool narrow = std::max(c.Dqk, c.Dv) <= 128;
    INFO("config " << n << " (" << std::string(dtype_name(dt)) << "): " << describe(c));
    const Wgmma on("on");
    cuda_emulator::clear_launches();
    compare_config(c, dt, 15000 + static_cast<uint64_t>(n) * 10, rng, kCPU, run_both_orders);
    if (narrow) {
      CHECK(wgmma_launches(true) == 3 + 6);  // three kernels twice each
    } else {
      CHECK(wgmma_launches(false) == 1 + 2);  // the forward twice
    }
  }
  const Wgmma off("off");
  cuda_emulator::clear_launches();
  const Tensor x = tgtest::rnd({1, 1, 8, 16}, 1).to(kBFloat16);
  run_emulated(x, x, x, x, {});
  CHECK(wgmma_launches(true) == 0);
}

TEST_CASE("emulated tensor-core sdpa: a row's base maximum moves, and stays, as the scores say") {
  // Scores rising along the keys by about 15 (log2 units) per 64-key tile, so every tile moves
  // each row's base (kRescaleLog2 = 8), then falling, so that none does: the output and
  // statistics agree with the CPU either way, and with 16 and 32 rows per warp bitwise (each
  // row decides alone).
  for (const bool rising : {true, false}) {
    std::vector<double> kv(256 * 64);
    for (int64_t j = 0; j < 256; ++j)
      for (int64_t d = 0; d < 64; ++d)
        kv[static_cast<size_t>(j * 64 + d)] = 0.02 * static_cast<double>(rising ? j : 255 - j);
    const Tensor q = full({1, 2, 96, 64}, 1.0).to(kBFloat16);
    const Tensor k = from_vector(kv, {1, 1, 256, 64}).expand({1, 2, 256, 64}).to(kBFloat16);
    const Tensor v = tgtest::rnd({1, 2, 256, 64}, 5).to(kBFloat16);
    const Tensor dout = tgtest::rnd({1, 2, 96, 64}, 6).to(kBFloat16);
    const SdpaResult cpu = sdpa_forward(q, k, v, {});
    std::vector<std::vector<double>> bits;
    for (const int rows : {16, 32}) {
      const WarpRows mode(rows);
      const Wgmma mma_sync("off");
      const SdpaResult r = run_emulated(q, k, v, dout, {}).first;
      INFO((rising ? "rising" : "falling") << " scores, " << rows << " rows per warp");
      check_close("out", cpu.out, r.out, 4 * unit(kBFloat16));
      check_close("stats", cpu.stats, r.stats, 1e-5);
      bits.push_back(r.out.to(kFloat64).to_vector<double>());
    }
    CHECK(bits[0] == bits[1]);
    // The kernel on warpgroup products (128-key tiles: rising scores move the base at every
    // tile but the first, where the output is still 0).
    const Wgmma on("on");
    cuda_emulator::clear_launches();
    const SdpaResult r = run_emulated(q, k, v, dout, {}).first;
    INFO((rising ? "rising" : "falling") << " scores, warpgroup products");
    CHECK(cuda_emulator::launched().front() == "sdpa wgmma forward kernel with a producer");
    check_close("out", cpu.out, r.out, 4 * unit(kBFloat16));
    check_close("stats", cpu.stats, r.stats, 1e-5);
  }
}

TEST_CASE("emulated tensor-core sdpa: scores near 10^9 and 10^12 stay finite") {
  // A probability's exponent once took the row's base rounded and its product unrounded: half
  // an ulp apart, 512 at scores near 10^9, where exp2 overflowed (scale_huge_row).
  check_huge_scores(kCPU, run_emulated);
}

TEST_CASE("emulated tensor-core sdpa: a NaN in q or the float mask gives NaN where the CPU does") {
  // ops/sdpa.h's rule: a row with a NaN score has out NaN, stats -inf and NaN gradients. A NaN
  // in a query row makes all its scores NaN, one in the float mask one score.
  using tgtest::nan_positions, tgtest::neg_inf_positions, tgtest::with_nan_at;
  // The warpgroup kernels take bfloat16 without a mask (the NaN in q); the rest runs mma.sync.
  for (const auto& [wgmma, dtype] :
       {std::pair{"off", kFloat32}, {"off", kBFloat16}, {"on", kBFloat16}}) {
    const Wgmma mode(wgmma);
    const DType dt = dtype;  // a copy: INFO's lambda cannot capture a structured binding (clang 14)
    const std::string where = std::string("wgmma ") + wgmma + ", " + std::string(dtype_name(dt));
    for (const bool in_q : {true, false}) {
      INFO(where << ", NaN in " << (in_q ? "q" : "the mask"));
      Tensor q = tgtest::rnd({1, 1, 20, 16}, 1);
      SdpaOptions o;
      if (in_q)
        q = with_nan_at(q, 3);  // row 0
      else
        o.mask = with_nan_at(tgtest::rnd({20, 21}, 4), 2).to(dt);  // row 0, key 2
      const Tensor qd = q.to(dt), k = tgtest::rnd({1, 1, 21, 16}, 2).to(dt);
      const Tensor v = tgtest::rnd({1, 1, 21, 16}, 3).to(dt);
      const Tensor dout = tgtest::rnd({1, 1, 20, 16}, 5).to(dt);
      const SdpaResult cpu = sdpa_forward(qd, k, v, o);
      const SdpaGrads cg = sdpa_backward(qd, k, v, cpu.out, dout, cpu.stats, o);
      const std::pair<SdpaResult, SdpaGrads> dev = run_emulated(qd, k, v, dout, o);
      CHECK(nan_positions(dev.first.out) == nan_positions(cpu.out));
      CHECK(neg_inf_positions(dev.first.stats) == neg_inf_positions(cpu.stats));
      CHECK(nan_positions(dev.second.dq) == nan_positions(cg.dq));
      CHECK(nan_positions(dev.second.dk) == nan_positions(cg.dk));
      // With the NaN in the mask, the CPU's dV is NaN at that key, as the reference's is; the
      // kernels' P is 0 there (the row's stats are -inf), so their dV has no NaN. dQ and dK are
      // NaN on both.
      if (in_q) CHECK(nan_positions(dev.second.dv) == nan_positions(cg.dv));
    }
  }
}

TEST_CASE("emulated tensor-core sdpa: a softmax scale of 0 (uniform attention, dq and dk 0)") {
  // The kernels' raw-score path and the warpgroup products need a positive scale, so both
  // switch settings run the mma.sync kernels' other path here: against the CPU, whose dq and dk
  // are exactly 0, so the bounds leave them no room.
  std::mt19937_64 rng(2057);
  Config c;
  c.Hq = 2;
  c.Sq = 70;
  c.Skv = 50;
  c.Dqk = c.Dv = 32;
  c.opts.scale = 0.0;
  for (const char* wgmma : {"off", "on"}) {
    const Wgmma mode(wgmma);
    for (DType dt : {kFloat32, kBFloat16}) {
      INFO("wgmma " << wgmma << ", " << std::string(dtype_name(dt)));
      compare_config(c, dt, 15000, rng, kCPU, run_both_orders);
    }
  }
}
