// What the SDPA sweeps (test_sdpa.cpp, test_sdpa_double_backward.cpp, test_sdpa_ragged.cpp,
// test_sdpa_paged.cpp, test_cuda_ragged.cpp) share: their random options (scale, causal in
// either alignment, window, ALiBi, softcap, dropout), the options' description, the ragged
// sweeps' configuration, and the second-order gradients the double-backward sweeps compare.
#pragma once
#include <tapegrad.h>

#include "test_util.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tgtest {

// Draws from one stream: an integer uniform in [lo, hi], a coin that falls true with p.
struct Draws {
  std::mt19937_64& rng;
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
};

// The ragged layout's offsets (B + 1) of sequences of the given lengths.
inline std::vector<int64_t> offsets(const std::vector<int64_t>& lens) {
  std::vector<int64_t> cu{0};
  for (int64_t n : lens) cu.push_back(cu.back() + n);
  return cu;
}

// How often each option is drawn where the sweeps differ.
struct SdpaOptionOdds {
  double causal = 0.5;
  int64_t max_window = 6;  // a window, when drawn, is uniform in [1, max_window]
  double alibi = 0.3;
};

inline tg::SdpaOptions random_sdpa_options(std::mt19937_64& rng, const SdpaOptionOdds& odds) {
  Draws d{rng};
  tg::SdpaOptions o;
  if (d.coin(0.3)) o.scale = 0.05 + 0.5 * std::uniform_real_distribution<double>(0, 1)(rng);
  o.causal = d.coin(odds.causal);
  if (d.coin(0.5)) o.causal_align = tg::CausalAlign::BottomRight;
  if (d.coin(0.25)) o.window = d.pick(1, odds.max_window);
  o.alibi = d.coin(odds.alibi);
  if (d.coin(0.25)) o.softcap = 2.0 + static_cast<double>(d.pick(0, 20)) / 4.0;
  if (d.coin(0.25)) {
    o.dropout_p = d.coin(0.5) ? 0.2 : 0.5;
    o.seed = static_cast<uint64_t>(d.pick(0, 1000));
    o.offset = static_cast<uint64_t>(d.pick(0, 3)) * 4;
  }
  return o;
}

// A sweep configuration's options, mask (kind 0 none, 1 float, 2 bool) and layout, for its
// failure messages.
inline std::string describe_options(const tg::SdpaOptions& o, int mask_kind,
                                    const tg::Shape& mask_shape, bool strided) {
  std::ostringstream os;
  os << " causal=" << o.causal << " br=" << (o.causal_align == tg::CausalAlign::BottomRight)
     << " window=" << o.window << " mask=" << mask_kind << tg::shape_str(mask_shape)
     << " pad=" << bool(o.seq_len_q) << bool(o.seq_len_kv) << " alibi=" << o.alibi
     << " softcap=" << o.softcap << " p=" << o.dropout_p << " strided=" << strided;
  return os.str();
}

// One configuration of a ragged (packed) sweep: each sequence's query and key lengths, heads,
// head dims, options, mask (kind 0 none, 1 float, 2 bool; shape over (B, Hq, max Sq, max Skv))
// and layout. Each sweep draws its own.
struct RaggedConfig {
  std::vector<int64_t> len_q, len_kv;
  int64_t Hq = 1, Hk = 1, D = 4, Dv = 4;
  tg::SdpaOptions opts;
  bool strided = false;
  int mask_kind = 0;
  tg::Shape mask_shape;
  int64_t B() const { return static_cast<int64_t>(len_q.size()); }
  int64_t max_q() const { return *std::max_element(len_q.begin(), len_q.end()); }
  int64_t max_kv() const { return *std::max_element(len_kv.begin(), len_kv.end()); }
  // B sequences of 0 to `longest` rows (keys as long as the queries half the time), at least
  // one row and one key in all; 1-2 key/value heads shared by 1-3 query heads each.
  void draw_lengths_and_heads(Draws& draw, int64_t B, int64_t longest) {
    const bool self = draw.coin(0.5);  // self-attention: the same lengths
    for (int64_t b = 0; b < B; ++b) {
      len_q.push_back(draw.pick(0, longest));
      len_kv.push_back(self ? len_q.back() : draw.pick(0, longest));
    }
    if (max_q() == 0) len_q.back() = 1;
    if (max_kv() == 0) len_kv.front() = 1;
    Hk = draw.pick(1, 2);
    Hq = Hk * draw.pick(1, 3);
  }
  std::string describe() const {
    std::ostringstream os;
    os << "len_q=" << tg::shape_str(len_q) << " len_kv=" << tg::shape_str(len_kv) << " Hq=" << Hq
       << " Hk=" << Hk << " D=" << D << " Dv=" << Dv
       << describe_options(opts, mask_kind, mask_shape, strided);
    return os.str();
  }
};

using SdpaFn = std::function<tg::SdpaResult(const tg::Tensor&, const tg::Tensor&, const tg::Tensor&,
                                            const tg::SdpaOptions&)>;

// The second-order gradients of <dout, out> through `attend` (sdpa or sdpa_reference): the
// first-order gradients made with create_graph (of q, k, v, and of `float_mask` when defined,
// which then replaces opts.mask), then d<cot, grads>/d(q, k, v[, mask], dout) for random
// cotangents cot drawn from `seed`.
inline std::vector<tg::Tensor> second_order(const SdpaFn& attend, const tg::Tensor& q_in,
                                            const tg::Tensor& k_in, const tg::Tensor& v_in,
                                            const tg::Tensor& dout_in, const tg::Tensor& float_mask,
                                            const tg::SdpaOptions& opts, uint64_t seed) {
  using tg::Tensor;
  Tensor q = q_in.detach().requires_grad_(), k = k_in.detach().requires_grad_();
  Tensor v = v_in.detach().requires_grad_(), dout = dout_in.detach().requires_grad_();
  tg::SdpaOptions o = opts;
  std::vector<Tensor> wrt{q, k, v};
  if (float_mask.defined()) {
    o.mask = float_mask.detach().requires_grad_();
    wrt.push_back(*o.mask);
  }
  auto first = tg::grad({attend(q, k, v, o).out}, wrt, {dout}, std::nullopt, true, true);
  Tensor l2 = tg::zeros({}, q.options());
  for (size_t i = 0; i < first.size(); ++i) {
    CHECK(first[i].requires_grad());
    const Tensor cot = rnd(first[i].sizes(), seed + i).to(q.dtype()).to(q.device());
    l2 = tg::add(l2, tg::sum(tg::mul(first[i], cot)));
  }
  wrt.push_back(dout);
  return tg::grad({l2}, wrt, {}, std::nullopt, true);
}

}  // namespace tgtest
