// The tensor-core SDPA's comparison with the CPU (sdpa_mma_compare.h).
#include "sdpa_mma_compare.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "sdpa_random.h"

using namespace tg;

namespace sdpamma {

namespace {

// (B, Hk, S, D) rows seen by each of the Hq query heads: (B, Hq, S, D).
Tensor per_query_head(const Tensor& x, int64_t Hq) {
  const Shape& s = x.sizes();
  return x.unsqueeze(2).expand({s[0], s[1], Hq / s[1], s[2], s[3]}).reshape({s[0], Hq, s[2], s[3]});
}
// (B, Hq, S, D) summed over each key/value head's group: (B, Hk, S, D).
Tensor per_kv_head(const Tensor& x, int64_t Hk) {
  const Shape& s = x.sizes();
  return sum(x.reshape({s[0], Hk, s[1] / Hk, s[2], s[3]}), {2});
}

std::string lengths(const std::optional<Tensor>& len) {
  if (!len) return "all";
  std::ostringstream os;
  for (int64_t n : len->to_vector<int64_t>()) os << n << " ";
  return os.str();
}

}  // namespace

double unit(DType dt) {
  if (dt == kFloat32) return 0x1p-20;
  return dt == kBFloat16 ? 0x1p-8 : 0x1p-11;
}

double unit(DType dt, int64_t width) {
  return unit(dt) * (dt == kFloat32 ? std::max(1.0, static_cast<double>(width) / 64.0) : 1.0);
}

void check_close(const std::string& what, const Tensor& cpu, const Tensor& result, double tol) {
  const double err = tgtest::rel_error(result.to(kCPU), cpu);
  INFO(what << ": error " << err << " of the largest element, allowed " << tol);
  CHECK(err <= tol);
}

void check_bounded(const std::string& what, const Tensor& cpu, const Tensor& result,
                   const Tensor& bound, double tol, const Tensor& floor) {
  const std::vector<double> c = cpu.to(kFloat64).to_vector<double>();
  const std::vector<double> g = result.to(kCPU).to(kFloat64).to_vector<double>();
  const std::vector<double> m = bound.to_vector<double>();
  const std::vector<double> f =
      floor.defined() ? floor.to_vector<double>() : std::vector<double>(c.size(), 0.0);
  REQUIRE(c.size() == g.size());
  REQUIRE(c.size() == m.size());
  REQUIRE(c.size() == f.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    double ratio = 0;
    if (std::isnan(g[i]) || std::isnan(c[i]))
      ratio = INFINITY;
    else if (std::abs(g[i] - c[i]) > f[i])  // infinite where the bound is 0
      ratio = (std::abs(g[i] - c[i]) - f[i]) / m[i];
    if (ratio > worst) {
      worst = ratio;
      at = i;
    }
  }
  INFO(what << ": worst element " << at << ": cpu " << c[at] << ", result " << g[at]
            << ", terms' magnitude " << m[at] << ", absolute allowance " << f[at] << ": error "
            << worst << " x the magnitude past the allowance, allowed " << tol);
  CHECK(worst <= tol);
}

// The CPU's sdpa itself, with V the identity (out = P).
Tensor probabilities(const Tensor& q, const Tensor& k, SdpaOptions o) {
  const int64_t B = q.size(0), Hk = k.size(1), Skv = k.size(2);
  if (o.mask && o.mask->dtype() != kBool) o.mask = o.mask->to(kFloat64);
  std::vector<double> eye(static_cast<size_t>(Skv * Skv), 0.0);
  for (int64_t j = 0; j < Skv; ++j) eye[static_cast<size_t>(j * Skv + j)] = 1;
  const Tensor ident = from_vector(eye, {1, 1, Skv, Skv}).expand({B, Hk, Skv, Skv});
  return sdpa_forward(q, k, ident, o).out;
}

// For each result element, the sum of the magnitudes of the terms it is made of, from the
// 16-bit inputs (as float64) and the CPU options o: with P the probabilities, Pd those after
// dropout (P V = O), A = |dO| |V|^T (which bounds |dP| and, weighted by Pd, |rowsum(dO * O)|):
// out ~ Pd |V|; dS ~ E = Pd A + P rowsum(Pd A); dQ ~ scale E |K|; dK ~ scale E^T |Q|;
// dV ~ Pd^T |dO|; dMask ~ E summed as the mask broadcasts.
Magnitudes term_magnitudes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                           const SdpaOptions& o, const Tensor& p) {
  const int64_t Hq = q.size(1), Hk = k.size(1);
  const Tensor pd = o.dropout_p > 0 ? probabilities(q, k, o) : p;
  const Tensor av = abs(per_query_head(v, Hq)), ak = abs(per_query_head(k, Hq));
  const Tensor a = matmul(abs(dout), av.transpose(2, 3));
  const Tensor pa = pd * a;
  const Tensor e = pa + p * sum(pa, {3}, true);
  const double scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  Magnitudes m;
  m.out = matmul(pd, av);
  m.dq = matmul(e, ak) * scale;
  m.dk = per_kv_head(matmul(e.transpose(2, 3), abs(q)), Hk) * scale;
  m.dv = per_kv_head(matmul(pd.transpose(2, 3), abs(dout)), Hk);
  if (o.mask && o.mask->dtype() != kBool) m.dmask = sum_to(e, o.mask->sizes());
  return m;
}

Magnitudes subnormal_allowance(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& dout, const SdpaOptions& o, const Tensor& p,
                               DType dt) {
  Magnitudes f;
  if (dt != kFloat16) return f;  // bfloat16's and float32's subnormals lie below 2^-126
  const double half = 0x1p-25;   // half of float16's subnormal spacing, 2^-24
  const int64_t Hq = q.size(1), Hk = k.size(1);
  const Tensor seen = gt(p, 0.0).to(kFloat64);  // the keys each row sees
  const double scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  // The kernels round P and dS, a factor of each term they enter, before the second products
  // (`reach` sums the other factors' magnitudes), and each side rounds its result once; none of
  // it where no term is (a row that sees no key stays exactly 0).
  auto allowance = [&](const Tensor& reach, double per_term) {
    return reach * per_term + gt(reach, 0.0).to(kFloat64) * (2 * half);
  };
  f.out = allowance(matmul(seen, abs(per_query_head(v, Hq))), half);
  f.dq = allowance(matmul(seen, abs(per_query_head(k, Hq))), half * scale);
  f.dk = allowance(per_kv_head(matmul(seen.transpose(2, 3), abs(q)), Hk), half * scale);
  f.dv = allowance(per_kv_head(matmul(seen.transpose(2, 3), abs(dout)), Hk), half);
  // The score gradient reaches the mask's gradient in float32.
  if (o.mask && o.mask->dtype() != kBool) f.dmask = allowance(sum_to(seen, o.mask->sizes()), 0);
  return f;
}

Tensor place(const Tensor& x, DType dt, Layout layout, Device device) {
  Tensor g = x.to(dt).to(device);  // not const: returned by move
  if (layout == Layout::Strided) return g.transpose(1, 2).contiguous().transpose(1, 2);
  if (layout == Layout::Misaligned) {
    Shape pad = g.sizes();
    pad[3] = 1;
    return cat({zeros(pad, g.options()), g}, 3).narrow(3, 1, g.size(3));
  }
  return g;
}

// Shapes across the kernels' tile widths (32, 64, 128, 256 forward; the backward above 128
// widens to float32) and across several 64-row tiles; every option of DESIGN §4.
Config random_config(std::mt19937_64& rng) {
  tgtest::Draws draw{rng};
  const int64_t dims[] = {8, 12, 16, 32, 40, 64, 72, 96, 100, 128, 160, 200, 256};
  Config c;
  c.B = draw.pick(1, 2);
  c.Hk = draw.pick(1, 2);
  c.Hq = c.Hk * draw.pick(1, 3);
  c.Sq = draw.pick(1, 200);
  c.Skv = draw.coin(0.5) ? c.Sq : draw.pick(1, 200);
  c.Dqk = dims[draw.pick(0, 12)];
  c.Dv = draw.coin(0.6) ? c.Dqk : dims[draw.pick(0, 12)];
  c.opts = tgtest::random_sdpa_options(rng, {.causal = 0.5, .max_window = 40, .alibi = 0.2});
  if (draw.coin(0.4)) {
    c.mask_shape = {draw.coin(0.5) ? c.B : 1, draw.coin(0.5) ? c.Hq : 1, draw.coin(0.8) ? c.Sq : 1,
                    draw.coin(0.9) ? c.Skv : 1};
    c.bool_mask = draw.coin(0.5);
  }
  const int64_t layout = draw.pick(0, 4);
  c.layout = layout == 3 ? Layout::Strided : layout == 4 ? Layout::Misaligned : Layout::Contiguous;
  return c;
}

Config plain_config(Config c) {
  c.mask_shape = {};
  c.opts.alibi = false;
  c.opts.softcap = 0;
  c.opts.dropout_p = 0;
  if (c.opts.scale && !(*c.opts.scale > 0)) c.opts.scale = 0.5;
  c.Dqk = std::min<int64_t>(c.Dqk, 128);
  c.Dv = std::min<int64_t>(c.Dv, 128);
  return c;
}

std::string describe(const Config& c) {
  std::ostringstream os;
  os << "B" << c.B << " Hq" << c.Hq << " Hk" << c.Hk << " Sq" << c.Sq << " Skv" << c.Skv << " Dqk"
     << c.Dqk << " Dv" << c.Dv << " layout " << static_cast<int>(c.layout)
     << tgtest::describe_options(c.opts,
                                 c.mask_shape.empty() ? 0
                                 : c.bool_mask        ? 2
                                                      : 1,
                                 c.mask_shape, c.layout != Layout::Contiguous);
  return os.str();
}

void compare_config(const Config& c, DType dt, uint64_t seed, std::mt19937_64& rng, Device device,
                    const RunSdpa& run) {
  const Tensor q = tgtest::rnd({c.B, c.Hq, c.Sq, c.Dqk}, seed);
  const Tensor k = tgtest::rnd({c.B, c.Hk, c.Skv, c.Dqk}, seed + 1);
  const Tensor v = tgtest::rnd({c.B, c.Hk, c.Skv, c.Dv}, seed + 2);
  const Tensor dout = tgtest::rnd({c.B, c.Hq, c.Sq, c.Dv}, seed + 3);
  SdpaOptions cpu = c.opts, dev = c.opts;
  if (!c.mask_shape.empty()) {
    const Tensor m = c.bool_mask ? gt(tgtest::rnd(c.mask_shape, seed + 4), -0.6)  // some rows empty
                                 : tgtest::rnd(c.mask_shape, seed + 4, -3, 1).to(dt);
    cpu.mask = m;
    dev.mask = m.to(device);
  }
  if (tgtest::Draws{rng}.coin(0.3)) {
    std::vector<int64_t> lq, lkv;
    for (int64_t b = 0; b < c.B; ++b) {
      lq.push_back(tgtest::Draws{rng}.pick(0, c.Sq));
      lkv.push_back(tgtest::Draws{rng}.pick(0, c.Skv));
    }
    cpu.seq_len_q = from_vector(lq, {c.B});
    cpu.seq_len_kv = from_vector(lkv, {c.B});
    dev.seq_len_q = cpu.seq_len_q->to(device);
    dev.seq_len_kv = cpu.seq_len_kv->to(device);
  }
  INFO("lengths: " << lengths(cpu.seq_len_q) << " / " << lengths(cpu.seq_len_kv));
  const Tensor cq = q.to(dt), ck = k.to(dt), cv = v.to(dt), cdout = dout.to(dt);
  const SdpaResult rc = sdpa_forward(cq, ck, cv, cpu);
  const SdpaGrads gc = sdpa_backward(cq, ck, cv, rc.out, cdout, rc.stats, cpu);
  const auto [rg, gg] = run(place(q, dt, c.layout, device), place(k, dt, c.layout, device),
                            place(v, dt, c.layout, device), place(dout, dt, c.layout, device), dev);
  const Tensor q64 = cq.to(kFloat64), k64 = ck.to(kFloat64), v64 = cv.to(kFloat64);
  const Tensor dout64 = cdout.to(kFloat64);
  SdpaOptions no_dropout = cpu;
  no_dropout.dropout_p = 0;
  const Tensor p = probabilities(q64, k64, no_dropout);
  const Magnitudes m = term_magnitudes(q64, k64, v64, dout64, cpu, p);
  const Magnitudes f = subnormal_allowance(q64, k64, v64, dout64, cpu, p, dt);
  // float32 as 3xTF32: the tensor cores' sums truncate instead of rounding (Fasi, Higham,
  // Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021), so their
  // error grows with the number of chained products, three per 8 of the head dim, not as a
  // random walk: 2^-20 (float32's unit here) covers head dims up to 64 and grows in proportion
  // above (on an H100, 1.0e-5 of the terms' magnitude at head dim 256 against 3.8e-6 allowed).
  const double u = unit(dt, std::max(c.Dqk, c.Dv));
  check_bounded("out", rc.out, rg.out, m.out, 4 * u, f.out);
  check_close("stats", rc.stats, rg.stats, 1e-5);
  check_bounded("dq", gc.dq, gg.dq, m.dq, 8 * u, f.dq);
  check_bounded("dk", gc.dk, gg.dk, m.dk, 8 * u, f.dk);
  check_bounded("dv", gc.dv, gg.dv, m.dv, 8 * u, f.dv);
  if (gc.dmask.defined()) check_bounded("dmask", gc.dmask, gg.dmask, m.dmask, 8 * u, f.dmask);
}

void check_huge_scores(Device device, const RunSdpa& run) {
  struct Kind {
    const char* wgmma;
    DType dt;
  };
  for (const Kind kind : {Kind{"off", kFloat32}, {"off", kBFloat16}, {"on", kBFloat16}}) {
    const Wgmma mode(kind.wgmma);
    for (const double scale : {1e9, 1e12}) {
      INFO("wgmma " << std::string(kind.wgmma) << ", " << std::string(dtype_name(kind.dt))
                    << ", scale " << scale);
      SdpaOptions o;
      o.scale = scale;
      const Tensor q = tgtest::rnd({1, 2, 24, 64}, 1).to(kind.dt);
      const Tensor k = tgtest::rnd({1, 2, 40, 64}, 2).to(kind.dt);
      const Tensor v = tgtest::rnd({1, 2, 40, 64}, 3).to(kind.dt);
      const Tensor dout = tgtest::rnd({1, 2, 24, 64}, 4).to(kind.dt);
      const SdpaResult cpu = sdpa_forward(q, k, v, o);
      const auto [r, g] = run(q.to(device), k.to(device), v.to(device), dout.to(device), o);
      check_close("out", cpu.out, r.out, 4 * unit(kind.dt));
      check_close("stats", cpu.stats, r.stats, 1e-5);
      CHECK(tgtest::all_finite(g.dq));
      CHECK(tgtest::all_finite(g.dk));
      CHECK(tgtest::all_finite(g.dv));
    }
  }
}

}  // namespace sdpamma
