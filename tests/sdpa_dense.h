// The dense SDPA tests' shared pieces (test_sdpa.cpp, test_sdpa_amx.cpp,
// test_sdpa_double_backward.cpp): random configurations of every option of DESIGN §4, their
// inputs, and the comparisons, the lower precisions' to tolerances from their unit roundoff.
#pragma once
#include <tapegrad.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "sdpa_random.h"
#include "test_util.h"

namespace sdpa_dense {

using namespace tg;
using tgtest::rel_error;
using tgtest::rnd;

inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to(kFloat64).to_vector<double>())
    if (std::isfinite(v)) m = std::max(m, std::abs(v));
  return m;
}

struct Config {
  int64_t B, Hq, Hk, Sq, Skv, D, Dv;
  SdpaOptions opts;
  bool strided = false;
  int mask_kind = 0;  // 0 none, 1 float, 2 bool
  Shape mask_shape;
  std::string describe() const {
    std::ostringstream os;
    os << "B=" << B << " Hq=" << Hq << " Hk=" << Hk << " Sq=" << Sq << " Skv=" << Skv << " D=" << D
       << " Dv=" << Dv << tgtest::describe_options(opts, mask_kind, mask_shape, strided);
    return os.str();
  }
};

inline Config random_config(std::mt19937_64& rng) {
  tgtest::Draws draw{rng};
  Config c;
  c.B = draw.pick(1, 2);
  c.Hk = draw.pick(1, 2);
  c.Hq = c.Hk * draw.pick(1, 3);
  const bool long_seq = draw.coin(0.25);  // several tiles of 64
  c.Sq = long_seq ? draw.pick(60, 150) : draw.pick(1, 20);
  c.Skv = draw.coin(0.5) ? c.Sq : (long_seq ? draw.pick(60, 150) : draw.pick(1, 20));
  c.D = std::vector<int64_t>{4, 8, 16}[draw.pick(0, 2)];
  c.Dv = draw.coin(0.7) ? c.D : draw.pick(3, 12);
  c.strided = draw.coin(0.3);
  c.opts = tgtest::random_sdpa_options(rng, {.causal = 0.4, .max_window = 8, .alibi = 0.25});
  SdpaOptions& o = c.opts;
  if (draw.coin(0.25)) {
    std::vector<int64_t> lq, lkv;
    for (int64_t b = 0; b < c.B; ++b) {
      lq.push_back(draw.pick(0, c.Sq));
      lkv.push_back(draw.pick(0, c.Skv));
    }
    if (draw.coin(0.5)) o.seq_len_q = from_vector(lq, {c.B});
    o.seq_len_kv = from_vector(lkv, {c.B});
  }
  c.mask_kind = static_cast<int>(draw.pick(0, 2));
  if (c.mask_kind) {
    const std::vector<Shape> shapes = {
        {c.Sq, c.Skv},          {1, 1, c.Sq, c.Skv},      {c.B, 1, c.Sq, c.Skv},
        {1, c.Hq, c.Sq, c.Skv}, {c.B, c.Hq, c.Sq, c.Skv}, {c.B, 1, 1, c.Skv}};
    c.mask_shape = shapes[draw.pick(0, static_cast<int64_t>(shapes.size()) - 1)];
  }
  return c;
}

struct Inputs {
  Tensor q, k, v, mask, dout;
};

inline Inputs make_inputs(const Config& c, uint64_t seed) {
  Inputs in;
  auto make = [&](int64_t H, int64_t S, int64_t D, uint64_t s) {
    if (!c.strided) return rnd({c.B, H, S, D}, s, -1.5, 1.5);
    return rnd({c.B, S, H, D}, s, -1.5, 1.5).transpose(1, 2);  // (B, S, H, D) viewed as BHSD
  };
  in.q = make(c.Hq, c.Sq, c.D, seed);
  in.k = make(c.Hk, c.Skv, c.D, seed + 1);
  in.v = make(c.Hk, c.Skv, c.Dv, seed + 2);
  in.dout = rnd({c.B, c.Hq, c.Sq, c.Dv}, seed + 3);
  if (c.mask_kind == 1) in.mask = rnd(c.mask_shape, seed + 4, -2, 2);
  if (c.mask_kind == 2) in.mask = gt(rnd(c.mask_shape, seed + 5), -0.6);
  if (c.mask_kind && c.strided) {  // the same values with keys not adjacent in memory
    const int64_t n = static_cast<int64_t>(c.mask_shape.size());
    in.mask = in.mask.transpose(n - 2, n - 1).contiguous().transpose(n - 2, n - 1);
  }
  return in;
}

// A kernel's output, statistics and gradients (the mask's when the reference has one) against
// the reference's, to a relative tolerance.
inline void check_against_reference(const Tensor& out, const Tensor& stats, const SdpaGrads& g,
                                    const SdpaResult& ref, const std::vector<Tensor>& ref_grads,
                                    double tol) {
  CHECK(rel_error(out, ref.out) < tol);
  CHECK(rel_error(stats, ref.stats) < tol);
  CHECK(rel_error(g.dq, ref_grads[0]) < tol);
  CHECK(rel_error(g.dk, ref_grads[1]) < tol);
  CHECK(rel_error(g.dv, ref_grads[2]) < tol);
  if (ref_grads.size() > 3) CHECK(rel_error(g.dmask, ref_grads[3]) < tol);
}

// sdpa(q, k, v) causal bottom-right with the float mask x[3]: checked once and twice
// differentiated.
inline Tensor causal_bottom_right_with_mask(const std::vector<Tensor>& x) {
  SdpaOptions o;
  o.causal = true;
  o.causal_align = CausalAlign::BottomRight;
  o.mask = x[3];
  return sdpa(x[0], x[1], x[2], o).out;
}

// The second-order gradients of <dout, out> through `attend` (tgtest::second_order) on a
// configuration's inputs, with the float mask's when it has one.
inline std::vector<Tensor> second_order(const tgtest::SdpaFn& attend, const Inputs& in,
                                        const Config& c, const SdpaOptions& o, uint64_t seed) {
  return tgtest::second_order(attend, in.q, in.k, in.v, in.dout,
                              c.mask_kind == 1 ? in.mask : Tensor(), o, seed);
}

// A float32, bfloat16 or float16 kernel's results (inputs q, k, v, dout as it had them) against
// the float64 reference's, norm-wise like rel_error, to tolerances from the storage's unit
// roundoff u: out and dv are results rounded once (u, plus 1e-4 for float32 arithmetic). dq, dk
// and the mask's gradient come from dS_ij = P_ij (dP_ij - D_i), whose two terms cancel where
// the softmax is saturated (a row with one visible key has dS = 0 exactly), so there the errors
// of dP and D_i = rowsum(dO o O) remain when the gradient they feed is small: D from the O
// rounded when it was saved (u max_i sum_c |dO_ic O_ic|, as FlashAttention and cuDNN take it),
// both from the kernels' float32 arithmetic (2^-24 times that sum, and times max_i sum_c |dO_ic|
// max|v| for dP). That error dD enters dS_ij as P_ij dD (P with dropout's 1/(1-p)); dq_i =
// scale sum_j dS_ij k_j adds at most scale dD max|k| (a row of P sums to one); dk_j sums over
// the G Sq query rows of its group, scale dD max|q| G Sq; the mask's gradient sums dS over its
// broadcast dims, dD times their count. (With 1e-4 alone, float32 failed in 5 of 60,000
// configurations from three other seeds: a few rows and keys, float or bool masks, softmaxes
// saturated, errors of 1e-7 on gradients of 1e-5 to 1e-3.)
inline void check_rounded(const Config& c, const SdpaOptions& o, double u, const Inputs& in,
                          const Tensor& out, const Tensor& stats, const SdpaGrads& g,
                          const SdpaResult& ref, const std::vector<Tensor>& rg) {
  auto f64 = [](const Tensor& t) { return t.to(kFloat64); };
  const double do_o = max_abs(sum(abs(mul(f64(in.dout), f64(out))), {-1}));
  const double do_v = max_abs(sum(abs(f64(in.dout)), {-1})) * max_abs(in.v);
  const double dD = u * do_o + 0x1p-24 * (do_o + do_v);
  const double keep = 1 / (1 - o.dropout_p);
  const double scale = o.scale ? *o.scale : 1 / std::sqrt(static_cast<double>(c.D));
  const int64_t group = c.Hq / c.Hk;  // query heads a key/value head serves
  const double group_rows = static_cast<double>(group * c.Sq);
  const double tol = u + 1e-4;
  CHECK(rel_error(f64(out), ref.out) < tol);
  CHECK(rel_error(stats, ref.stats) < 1e-4);
  CHECK(rel_error(f64(g.dv), rg[2]) < tol);
  auto check_grad = [&](const Tensor& got, const Tensor& want, double extra) {
    CHECK(rel_error(f64(got), want) < tol + extra / std::max(max_abs(want), 1e-30));
  };
  check_grad(g.dq, rg[0], scale * dD * keep * max_abs(in.k));
  check_grad(g.dk, rg[1], scale * dD * keep * max_abs(in.q) * group_rows);
  if (c.mask_kind == 1) {
    const double spread = static_cast<double>(numel_of({c.B, c.Hq, c.Sq, c.Skv})) /
                          static_cast<double>(numel_of(in.mask.sizes()));
    check_grad(g.dmask, rg[3], dD * keep * spread);
  }
}

// The kernels of dtype dt on the inputs rounded to dt: those inputs and what came out.
struct Rounded {
  Inputs in;
  SdpaResult r;
  SdpaGrads g;
};
inline Rounded run_rounded(const Config& c, const SdpaOptions& o, const Inputs& in, DType dt) {
  Rounded x{{in.q.to(dt), in.k.to(dt), in.v.to(dt), {}, in.dout.to(dt)}, {}, {}};
  SdpaOptions od = o;
  if (c.mask_kind == 1) od.mask = x.in.mask = in.mask.to(dt);
  x.r = sdpa_forward(x.in.q, x.in.k, x.in.v, od);
  x.g = sdpa_backward(x.in.q, x.in.k, x.in.v, x.r.out, x.in.dout, x.r.stats, od);
  CHECK(x.r.out.dtype() == dt);
  CHECK(x.r.stats.dtype() == kFloat32);
  CHECK(x.g.dq.dtype() == dt);
  return x;
}

// The bfloat16 or float16 kernels against the float64 reference on the same rounded inputs
// (check_rounded, the unit roundoff of dt); returns out and dq, dk, dv.
inline std::vector<Tensor> check_16bit(const Config& c, const SdpaOptions& o, const Inputs& in,
                                       DType dt) {
  const Rounded x = run_rounded(c, o, in, dt);
  Tensor hq = x.in.q.to(kFloat64).requires_grad_(), hk = x.in.k.to(kFloat64).requires_grad_();
  Tensor hv = x.in.v.to(kFloat64).requires_grad_();
  SdpaOptions ho = o;
  if (c.mask_kind == 1) ho.mask = x.in.mask.to(kFloat64).requires_grad_();
  auto href = sdpa_reference(hq, hk, hv, ho);
  std::vector<Tensor> hwrt{hq, hk, hv};
  if (c.mask_kind == 1) hwrt.push_back(*ho.mask);
  auto hg = grad({href.out}, hwrt, {x.in.dout.to(kFloat64)});
  check_rounded(c, o, dt == kBFloat16 ? 0x1p-8 : 0x1p-11, x.in, x.r.out, x.r.stats, x.g, href, hg);
  return {x.r.out, x.g.dq, x.g.dk, x.g.dv};
}

}  // namespace sdpa_dense
