// The dense SDPA tests' shared pieces (test_sdpa.cpp, test_sdpa_double_backward.cpp): random
// configurations of every option of DESIGN §4, their inputs, and the comparisons.
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

}  // namespace sdpa_dense
