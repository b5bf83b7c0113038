// The 16-bit SDPA on AMX's tile units (backends/cpu/cpu_sdpa_amx.h) and its switch,
// cpu_sdpa_amx().
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include "backends/cpu/amx_tiles.h"
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

// The B operand from K's rows (pair_columns, K^T for the scores) is the B operand from K^T's rows
// (pair_rows) bit for bit: every element in its place of AMX's pair layout, zeros past k and n,
// at row strides longer than k; and the three terms of each element add up to it exactly.
TEST_CASE("AMX operands: pair_columns is pair_rows of the transpose") {
  namespace amx = cpu::amx;
  if (!amx::available()) {
    MESSAGE("no AMX on this CPU: its operand layouts are not built");
    return;
  }
  for (const auto& shape : {std::tuple<int64_t, int64_t, int64_t>{40, 37, 45},
                            {64, 130, 64},
                            {7, 16, 9},
                            {33, 1, 33}}) {
    const int64_t k = std::get<0>(shape), n = std::get<1>(shape), ld = std::get<2>(shape);
    CAPTURE(k);
    CAPTURE(n);
    std::vector<float> rows(n * ld, 99.0f), cols(k * n);  // K: n rows of k (padding 99)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t x = 0; x < k; ++x) {
        const float v = std::ldexp(static_cast<float>(rnd({1}, 100 * j + x).item<double>()),
                                   static_cast<int>(x % 5) - 2);
        rows[j * ld + x] = v;
        cols[x * n + j] = v;
      }
    }
    for (int terms = 1; terms <= 3; ++terms) {
      CAPTURE(terms);
      const int64_t size = amx::split_b_size(k, n, terms);
      std::vector<uint16_t> a(size, 0xffff), b(size, 0xffff);
      const amx::SplitB pa = amx::pair_columns(k, n, rows.data(), ld, terms, a.data());
      const amx::SplitB pb = amx::pair_rows(k, n, cols.data(), n, terms, b.data());
      CHECK(pa.ld == pb.ld);
      CHECK(pa.split == pb.split);
      CHECK(a == b);
      if (terms < 3) continue;
      // Element (x, j) of term t at t * split + (x / 2) * ld + 2 j + x % 2, as bfloat16 bits.
      int64_t wrong = 0;
      for (int64_t x = 0; x < k; ++x) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int t = 0; t < 3; ++t) {
            const uint32_t bits = uint32_t{a[t * pa.split + x / 2 * pa.ld + 2 * j + x % 2]} << 16;
            float f;
            std::memcpy(&f, &bits, sizeof f);
            sum += f;
          }
          wrong += sum != rows[j * ld + x];
        }
      }
      CHECK(wrong == 0);
    }
  }
}
