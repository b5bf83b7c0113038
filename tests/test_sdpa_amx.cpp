// The 16-bit SDPA on AMX's tile units (backends/cpu/cpu_sdpa_amx.h) and its switch,
// cpu_sdpa_amx().
#include <cmath>
#include <tuple>
#include <vector>

#include "sdpa_dense.h"

using namespace tg;
using namespace sdpa_dense;
using tgtest::rnd;

// bfloat16 and float16 on AMX's tile units (cpu_sdpa_amx(); where the CPU has none, the FMA
// kernels run and the test only checks the switch): against the float64 reference on the same
// rounded inputs, and against the FMA kernels, within two units of the 16-bit type's rounding
// and not bit for bit (so the switch reached the kernels). The shapes have more than one query tile
// a head (the AMX path's rule), with the options around the products: GQA, head dims that are not
// whole tiles, causal bottom-right, ragged sequences, strided inputs, dropout, softcap, ALiBi, a
// window and a float mask with its gradient.
TEST_CASE("16-bit inputs on AMX tiles: against the reference and the FMA kernels") {
  const bool had = cpu_sdpa_amx();
  set_cpu_sdpa_amx(false);
  CHECK_FALSE(cpu_sdpa_amx());
  set_cpu_sdpa_amx(true);
  if (!cpu_sdpa_amx()) {
    MESSAGE("no AMX on this CPU (or not an AVX-512 build): the FMA kernels run 16 bits");
    set_cpu_sdpa_amx(had);
    return;
  }
  auto shape = [](int64_t B, int64_t Hq, int64_t Hk, int64_t Sq, int64_t Skv, int64_t D,
                  int64_t Dv) {
    Config c{};
    std::tie(c.B, c.Hq, c.Hk, c.Sq, c.Skv, c.D, c.Dv) = std::tie(B, Hq, Hk, Sq, Skv, D, Dv);
    return c;
  };
  std::vector<Config> configs{shape(1, 4, 2, 150, 130, 64, 64), shape(2, 2, 1, 100, 200, 40, 72),
                              shape(1, 2, 2, 80, 80, 16, 8)};
  configs[1].strided = true;
  configs[1].opts.causal = true;
  configs[1].opts.causal_align = CausalAlign::BottomRight;
  configs[1].opts.seq_len_q = from_vector(std::vector<int64_t>{100, 70}, {2});
  configs[1].opts.seq_len_kv = from_vector(std::vector<int64_t>{170, 90}, {2});
  SdpaOptions& o2 = configs[2].opts;
  o2.dropout_p = 0.2;
  o2.seed = 5;
  o2.softcap = 5.0;
  o2.alibi = true;
  o2.window = 30;
  configs[2].mask_kind = 1;
  configs[2].mask_shape = {1, 1, 80, 80};
  for (size_t n = 0; n < configs.size(); ++n) {
    const Config& c = configs[n];
    INFO("config " << n << ": " << c.describe());
    const Inputs in = make_inputs(c, 7000 + 10 * n);
    SdpaOptions o = c.opts;
    if (c.mask_kind) o.mask = in.mask;
    for (DType dt : {kBFloat16, kFloat16}) {
      CAPTURE(dt);
      const std::vector<Tensor> on_amx = check_16bit(c, o, in, dt);
      set_cpu_sdpa_amx(false);
      const std::vector<Tensor> on_fma = check_16bit(c, o, in, dt);
      set_cpu_sdpa_amx(true);
      const double units = dt == kBFloat16 ? 0x1p-7 : 0x1p-10;
      for (size_t i = 0; i < on_amx.size(); ++i) {
        CAPTURE(i);
        const Tensor a = on_amx[i].to(kFloat64), f = on_fma[i].to(kFloat64);
        CHECK(max_abs(sub(a, f)) <= units * max_abs(f));
        CHECK(a.to_vector<double>() != f.to_vector<double>());
      }
    }
  }
  // Scores of about 10^12 (softmax scale 10^12): the backward's scores are the forward's to the
  // bit, or P = exp(S - lse) would be inf, and so dV. (dq and dk are float32's cancellation in
  // dS = P (dP - D) times 10^12: finite in bfloat16, beyond float16's range.)
  for (DType dt : {kBFloat16, kFloat16}) {
    CAPTURE(dt);
    const Tensor q = rnd({1, 2, 70, 16}, 1).to(dt), k = rnd({1, 2, 70, 16}, 2).to(dt);
    const Tensor v = rnd({1, 2, 70, 16}, 3).to(dt);
    SdpaOptions huge;
    huge.scale = 1e12;
    const SdpaResult r = sdpa_forward(q, k, v, huge);
    const SdpaGrads g = sdpa_backward(q, k, v, r.out, rnd({1, 2, 70, 16}, 4).to(dt), r.stats, huge);
    for (const Tensor& t : {r.out, g.dv}) CHECK(tgtest::all_finite(t));
    if (dt == kBFloat16) {
      CHECK(tgtest::all_finite(g.dq));
      CHECK(tgtest::all_finite(g.dk));
    }
  }
  set_cpu_sdpa_amx(had);
}
