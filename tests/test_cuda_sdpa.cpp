// SDPA on CUDA against the CPU op: a table of option combinations, 300 random ones with
// NaN-poisoned device allocations (an unwritten element fails), the deterministic backward,
// and fully masked rows.
#include <cmath>
#include <random>
#include <sstream>

#include "cuda_parity.h"
#include "sdpa_mma_compare.h"

using namespace tg;
using namespace cudatest;

namespace {

// SDPA with options combined: the CUDA kernels (tiled up to head dim 128, simple above)
// against the CPU's.
std::vector<OpCase> sdpa_cases() {
  struct Shape4 {
    int64_t B, Hq, Hk, Sq, Skv, Dqk, Dv;
  };
  std::vector<OpCase> cases;
  auto add_case = [&](const std::string& name, Shape4 s,
                      std::function<void(SdpaOptions&, const Inputs&)> opt, bool float_mask = false,
                      bool transpose_inputs = false) {
    cases.push_back({"sdpa " + name,
                     [s, float_mask] {
                       Inputs in{r({s.B, s.Hq, s.Sq, s.Dqk}, 60), r({s.B, s.Hk, s.Skv, s.Dqk}, 61),
                                 r({s.B, s.Hk, s.Skv, s.Dv}, 62)};
                       if (float_mask) in.push_back(r({1, s.Hq, s.Sq, s.Skv}, 63));
                       return in;
                     },
                     [opt, transpose_inputs](const Inputs& in) {
                       SdpaOptions o;
                       opt(o, in);
                       if (in.size() > 3) o.mask = in[3];
                       Tensor q = in[0], k = in[1], v = in[2];
                       if (transpose_inputs) {  // strided (B, S, H, D) storage seen as (B, H, S, D)
                         q = q.transpose(1, 2).contiguous().transpose(1, 2);
                         k = k.transpose(1, 2).contiguous().transpose(1, 2);
                       }
                       return sdpa(q, k, v, o).out;
                     },
                     1e-5, 1e-4});
  };
  const Shape4 base{2, 4, 2, 37, 45, 16, 24};
  add_case("plain, GQA, Dqk != Dv, Sq != Skv", base, [](SdpaOptions&, const Inputs&) {});
  add_case("causal top-left", base, [](SdpaOptions& o, const Inputs&) { o.causal = true; });
  add_case("causal bottom-right, window 9", base, [](SdpaOptions& o, const Inputs&) {
    o.causal = true;
    o.causal_align = CausalAlign::BottomRight;
    o.window = 9;
  });
  add_case(
      "float mask with its gradient", base, [](SdpaOptions&, const Inputs&) {}, true);
  add_case("boolean mask and padding", base, [](SdpaOptions& o, const Inputs& in) {
    Generator g{5, 0};
    Tensor m = gt(rand({2, 1, 37, 45}, g).to(in[0].device()), 0.3);
    o.mask = m;
    o.seq_len_q = from_vector(std::vector<int64_t>{30, 37}, {2},
                              TensorOptions(kInt64).device(in[0].device()));
    o.seq_len_kv = from_vector(std::vector<int64_t>{45, 20}, {2},
                               TensorOptions(kInt64).device(in[0].device()));
  });
  add_case("ALiBi, softcap, scale", base, [](SdpaOptions& o, const Inputs&) {
    o.alibi = true;
    o.softcap = 5;
    o.scale = 0.4;
  });
  add_case("dropout (bit-identical keep mask)", base, [](SdpaOptions& o, const Inputs&) {
    o.dropout_p = 0.25;
    o.seed = 11;
    o.offset = 8;
  });
  add_case(
      "strided inputs, MQA, head dim 100", {1, 3, 1, 20, 20, 100, 72},
      [](SdpaOptions& o, const Inputs&) { o.causal = true; }, false, true);
  return cases;
}

// One random SDPA configuration: shapes and every option drawn from `rng`.
struct SdpaConfig {
  int64_t B, Hq, Hk, Sq, Skv, Dqk, Dv;
  SdpaOptions opts;
  Shape mask_shape;  // empty: no mask
  bool bool_mask = false, strided = false;
  std::string describe() const {
    std::ostringstream os;
    os << "B" << B << " Hq" << Hq << " Hk" << Hk << " Sq" << Sq << " Skv" << Skv << " Dqk" << Dqk
       << " Dv" << Dv << (opts.causal ? " causal" : "")
       << (opts.causal_align == CausalAlign::BottomRight ? "(bottom-right)" : "") << " window"
       << opts.window << " mask" << shape_str(mask_shape) << (bool_mask ? "(bool)" : "")
       << (opts.seq_len_q ? " padded" : "") << (opts.alibi ? " alibi" : "") << " softcap"
       << opts.softcap << " dropout" << opts.dropout_p << (strided ? " strided" : "");
    return os.str();
  }
};

SdpaConfig random_config(std::mt19937& rng) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const int64_t dims[] = {8, 16, 24, 32, 40, 64, 72, 96, 128, 160};
  SdpaConfig c;
  c.B = pick(1, 2);
  c.Hk = pick(1, 2);
  c.Hq = c.Hk * pick(1, 3);
  c.Sq = pick(1, 150);
  c.Skv = coin(0.5) ? c.Sq : pick(1, 150);
  c.Dqk = dims[pick(0, 9)];
  c.Dv = coin(0.6) ? c.Dqk : dims[pick(0, 9)];
  SdpaOptions& o = c.opts;
  o.causal = coin(0.5);
  if (coin(0.5)) o.causal_align = CausalAlign::BottomRight;
  if (coin(0.25)) o.window = pick(1, 40);
  if (coin(0.3)) o.scale = 0.05 + 0.3 * std::uniform_real_distribution<double>()(rng);
  o.alibi = coin(0.2);
  if (coin(0.2)) o.softcap = 2 + 10 * std::uniform_real_distribution<double>()(rng);
  if (coin(0.3)) {
    o.dropout_p = 0.1 + 0.4 * std::uniform_real_distribution<double>()(rng);
    o.seed = static_cast<uint64_t>(pick(0, 1000));
    o.offset = 4 * static_cast<uint64_t>(pick(0, 100));
  }
  if (coin(0.4)) {  // a mask broadcast from a random subset of (B, Hq, Sq, Skv)
    c.mask_shape = {coin(0.5) ? c.B : 1, coin(0.5) ? c.Hq : 1, coin(0.8) ? c.Sq : 1,
                    coin(0.9) ? c.Skv : 1};
    c.bool_mask = coin(0.5);
  }
  c.strided = coin(0.3);
  return c;
}

}  // namespace

TEST_CASE("parity: sdpa with options combined") { run_all(sdpa_cases()); }

// float32 runs on the tensor cores as 3xTF32 by default; the same 300 configurations and
// tolerances hold there and on the exact float32 kernels (tensor cores off).
TEST_CASE("sdpa: CUDA against CPU over 300 random option combinations, outputs poisoned") {
  for (const bool tensor_cores : {false, true}) {
    const sdpamma::TensorCores mode(tensor_cores);
    std::mt19937 rng(2026);
    int tiled = 0;
    for (int n = 0; n < 300; ++n) {
      SdpaConfig c = random_config(rng);
      INFO("config " << n << (tensor_cores ? " (3xTF32)" : " (float32 kernels)") << ": "
                     << c.describe());
      const uint64_t seed = 1000 + static_cast<uint64_t>(n) * 10;
      Tensor q = tgtest::rnd({c.B, c.Hq, c.Sq, c.Dqk}, seed).to(kFloat32);
      Tensor k = tgtest::rnd({c.B, c.Hk, c.Skv, c.Dqk}, seed + 1).to(kFloat32);
      Tensor v = tgtest::rnd({c.B, c.Hk, c.Skv, c.Dv}, seed + 2).to(kFloat32);
      Tensor dout = tgtest::rnd({c.B, c.Hq, c.Sq, c.Dv}, seed + 3).to(kFloat32);
      SdpaOptions cpu = c.opts, gpu = c.opts;
      if (!c.mask_shape.empty()) {
        Tensor m = c.bool_mask ? gt(tgtest::rnd(c.mask_shape, seed + 4), -0.6)  // some rows empty
                               : tgtest::rnd(c.mask_shape, seed + 4, -3, 1).to(kFloat32);
        cpu.mask = m;
        gpu.mask = m.to(kCUDA);
      }
      if (std::bernoulli_distribution(0.3)(rng)) {
        std::vector<int64_t> lq, lkv;
        for (int64_t b = 0; b < c.B; ++b) {
          lq.push_back(std::uniform_int_distribution<int64_t>(0, c.Sq)(rng));
          lkv.push_back(std::uniform_int_distribution<int64_t>(0, c.Skv)(rng));
        }
        cpu.seq_len_q = from_vector(lq, {c.B});
        cpu.seq_len_kv = from_vector(lkv, {c.B});
        gpu.seq_len_q = cpu.seq_len_q->to(kCUDA);
        gpu.seq_len_kv = cpu.seq_len_kv->to(kCUDA);
      }
      auto on_gpu = [&](const Tensor& t) {
        Tensor g = t.to(kCUDA);  // strided: (B, S, H, D) storage seen as (B, H, S, D)
        return c.strided ? g.transpose(1, 2).contiguous().transpose(1, 2) : g;
      };
      Tensor gq = on_gpu(q), gk = on_gpu(k), gv = on_gpu(v), gdout = dout.to(kCUDA);
      tiled += std::max(c.Dqk, c.Dv) <= 128;
      SdpaResult rc = sdpa_forward(q, k, v, cpu);
      cuda_poison_allocations(true);
      SdpaResult rg = sdpa_forward(gq, gk, gv, gpu);
      SdpaGrads gg = sdpa_backward(gq, gk, gv, rg.out, gdout, rg.stats, gpu);
      cuda_poison_allocations(false);
      SdpaGrads gc = sdpa_backward(q, k, v, rc.out, dout, rc.stats, cpu);
      compare("out", rc.out, rg.out, 2e-5);
      compare("stats", rc.stats, rg.stats, 2e-5);
      compare("dq", gc.dq, gg.dq, 1e-4);
      compare("dk", gc.dk, gg.dk, 1e-4);
      compare("dv", gc.dv, gg.dv, 1e-4);
      if (gc.dmask.defined()) compare("dmask", gc.dmask, gg.dmask, 1e-4);
    }
    CHECK(tiled > 200);  // most configurations exercise the tiled kernels
  }
}

TEST_CASE("sdpa on CUDA: the backward is deterministic (bitwise equal run to run)") {
  Tensor q = tgtest::rnd({2, 4, 150, 64}, 1).to(kFloat32).to(kCUDA);
  Tensor k = tgtest::rnd({2, 2, 130, 64}, 2).to(kFloat32).to(kCUDA);
  Tensor v = tgtest::rnd({2, 2, 130, 64}, 3).to(kFloat32).to(kCUDA);
  Tensor dout = tgtest::rnd({2, 4, 150, 64}, 4).to(kFloat32).to(kCUDA);
  SdpaOptions o;
  o.dropout_p = 0.2;
  o.seed = 5;
  SdpaResult r = sdpa_forward(q, k, v, o);
  SdpaGrads a = sdpa_backward(q, k, v, r.out, dout, r.stats, o);
  SdpaGrads b = sdpa_backward(q, k, v, r.out, dout, r.stats, o);
  CHECK(a.dq.to_vector<float>() == b.dq.to_vector<float>());
  CHECK(a.dk.to_vector<float>() == b.dk.to_vector<float>());
  CHECK(a.dv.to_vector<float>() == b.dv.to_vector<float>());
}

TEST_CASE("sdpa on CUDA: fully masked rows give zeros and -inf statistics") {
  Tensor q = tgtest::rnd({1, 1, 4, 8}, 1).to(kFloat32).to(kCUDA);
  Tensor k = tgtest::rnd({1, 1, 6, 8}, 2).to(kFloat32).to(kCUDA);
  Tensor v = tgtest::rnd({1, 1, 6, 8}, 3).to(kFloat32).to(kCUDA);
  SdpaOptions o;
  o.mask =
      from_vector(std::vector<bool>(24, false), {1, 1, 4, 6}, TensorOptions(kBool).device(kCUDA));
  SdpaResult res = sdpa(q, k, v, o);
  for (float x : res.out.to_vector<float>()) CHECK(x == 0.0f);
  for (float s : res.stats.to_vector<float>()) CHECK(std::isinf(s));
}
