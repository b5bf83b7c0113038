// SDPA's ragged layout (cu_seqlens_q/kv): the kernels against the reference (which computes it
// padded and masked) and against each sequence attended alone, gradcheck and gradgradcheck
// through the tape (the double backward against the reference's too), and bad offsets.
#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "backends/half_kernels.h"
#include "ops/op_util.h"
#include "ops/sdpa_check.h"
#include "sdpa_random.h"
#include "test_util.h"

using namespace tg;
using tgtest::check_throws_with_prefix;
using tgtest::offsets;
using tgtest::RaggedConfig;
using tgtest::rel_error;
using tgtest::rnd;

namespace {

// With `long_keys`, sequences of up to 700 rows and head dim 64: the backward's key parts
// (up to one per 256 keys, with few heads for the threads).
RaggedConfig random_config(std::mt19937_64& rng, bool long_keys = false) {
  tgtest::Draws draw{rng};
  RaggedConfig c;
  const int64_t B = draw.pick(1, 4);
  const int64_t longest = long_keys ? 700 : draw.coin(0.15) ? 140 : 9;  // sometimes several tiles
  // At least one row and one key (no rows or no keys at all: the edge-case test below).
  c.draw_lengths_and_heads(draw, B, longest);
  c.D = long_keys ? 64 : draw.coin(0.5) ? 4 : 8;
  c.Dv = draw.coin(0.7) ? c.D : draw.pick(3, 9);
  c.strided = draw.coin(0.3);
  c.opts = tgtest::random_sdpa_options(rng, {.causal = 0.5, .max_window = 6, .alibi = 0.3});
  c.mask_kind = static_cast<int>(draw.pick(0, 2));
  if (c.mask_kind) {
    const int64_t Sq = c.max_q(), Skv = c.max_kv();
    const std::vector<Shape> shapes = {
        {Sq, Skv}, {B, 1, Sq, Skv}, {1, c.Hq, Sq, Skv}, {B, c.Hq, Sq, Skv}, {B, 1, 1, Skv}};
    c.mask_shape = shapes[draw.pick(0, static_cast<int64_t>(shapes.size()) - 1)];
  }
  return c;
}

struct Inputs {
  Tensor q, k, v, mask, dout, cu_q, cu_kv;
};

Inputs make_inputs(const RaggedConfig& c, uint64_t seed) {
  Inputs in;
  auto make = [&](int64_t T, int64_t H, int64_t D, uint64_t s) {
    if (!c.strided) return rnd({T, H, D}, s, -1.5, 1.5);
    return rnd({H, T, D}, s, -1.5, 1.5).transpose(0, 1);  // heads outermost in memory
  };
  const std::vector<int64_t> cq = offsets(c.len_q), ckv = offsets(c.len_kv);
  in.q = make(cq.back(), c.Hq, c.D, seed);
  in.k = make(ckv.back(), c.Hk, c.D, seed + 1);
  in.v = make(ckv.back(), c.Hk, c.Dv, seed + 2);
  in.dout = rnd({cq.back(), c.Hq, c.Dv}, seed + 3);
  in.cu_q = from_vector(cq, {c.B() + 1});
  in.cu_kv = from_vector(ckv, {c.B() + 1});
  if (c.mask_kind == 1) in.mask = rnd(c.mask_shape, seed + 4, -2, 2);
  if (c.mask_kind == 2) in.mask = gt(rnd(c.mask_shape, seed + 5), -0.6);
  return in;
}

// The call's options: the configuration's, with the inputs' offsets and mask.
SdpaOptions options_for(const RaggedConfig& c, const Inputs& in) {
  SdpaOptions o = c.opts;
  o.cu_seqlens_q = in.cu_q;
  o.cu_seqlens_kv = in.cu_kv;
  if (c.mask_kind) o.mask = in.mask;
  return o;
}

// Sequence b's rows of a packed (T, H, D) tensor as the dense (1, H, L, D).
Tensor sequence(const Tensor& t, const std::vector<int64_t>& cu, int64_t b) {
  return t.slice(0, cu[b], cu[b + 1]).transpose(0, 1).unsqueeze(0);
}

}  // namespace

TEST_CASE("ragged kernels agree with the padded, masked reference over random configurations") {
  std::mt19937_64 rng(20261123);
  const int configs = 250;
  for (int n = 0; n < configs; ++n) {
    const RaggedConfig c = random_config(rng);
    const Inputs in = make_inputs(c, 500 + 10 * n);
    const SdpaOptions o = options_for(c, in);
    INFO("config " << n << ": " << c.describe());

    // float64 kernels against the reference, forward and every gradient.
    auto [out, stats] = sdpa_forward(in.q, in.k, in.v, o);
    REQUIRE(out.sizes() == Shape{in.q.size(0), c.Hq, c.Dv});
    REQUIRE(stats.sizes() == Shape{in.q.size(0), c.Hq, 1});
    SdpaGrads g = sdpa_backward(in.q, in.k, in.v, out, in.dout, stats, o);
    Tensor rq = in.q.detach().requires_grad_(), rk = in.k.detach().requires_grad_();
    Tensor rv = in.v.detach().requires_grad_();
    SdpaOptions ro = o;
    std::vector<Tensor> wrt{rq, rk, rv};
    if (c.mask_kind == 1) {
      ro.mask = in.mask.detach().requires_grad_();
      wrt.push_back(*ro.mask);
    }
    const SdpaResult ref = sdpa_reference(rq, rk, rv, ro);
    const std::vector<Tensor> rg = grad({ref.out}, wrt, {in.dout});
    CHECK(rel_error(out, ref.out) < 1e-12);
    CHECK(rel_error(stats, ref.stats) < 1e-12);
    CHECK(rel_error(g.dq, rg[0]) < 1e-12);
    CHECK(rel_error(g.dk, rg[1]) < 1e-12);
    CHECK(rel_error(g.dv, rg[2]) < 1e-12);
    if (c.mask_kind == 1) CHECK(rel_error(g.dmask, rg[3]) < 1e-12);

    // Each sequence attended alone by the dense kernel: the same rows (its own lengths give
    // the alignment and ALiBi; dropout's padded index has no dense counterpart, so not then).
    if (c.opts.dropout_p == 0) {
      const std::vector<int64_t> cq = offsets(c.len_q), ckv = offsets(c.len_kv);
      for (int64_t b = 0; b < c.B(); ++b) {
        CAPTURE(b);
        SdpaOptions d = c.opts;
        if (c.mask_kind) {
          const Tensor m =
              in.mask.dim() == 4 ? in.mask : in.mask.reshape({1, 1, c.max_q(), c.max_kv()});
          const Tensor mb = m.size(0) == 1 ? m : m.slice(0, b, b + 1);
          d.mask = mb.slice(2, 0, std::min(mb.size(2), c.len_q[b]))
                       .slice(3, 0, std::min(mb.size(3), c.len_kv[b]));
        }
        const SdpaResult alone =
            sdpa_forward(sequence(in.q, cq, b), sequence(in.k, ckv, b), sequence(in.v, ckv, b), d);
        CHECK(rel_error(sequence(out, cq, b), alone.out) < 1e-12);
      }
    }

    // The float32 kernels against the float64 reference.
    SdpaOptions o32 = o;
    if (c.mask_kind == 1) o32.mask = in.mask.to(kFloat32);
    const Tensor q32 = in.q.to(kFloat32), k32 = in.k.to(kFloat32), v32 = in.v.to(kFloat32);
    auto [out32, stats32] = sdpa_forward(q32, k32, v32, o32);
    SdpaGrads g32 = sdpa_backward(q32, k32, v32, out32, in.dout.to(kFloat32), stats32, o32);
    CHECK(rel_error(out32, ref.out) < 1e-4);
    CHECK(rel_error(stats32, ref.stats) < 1e-4);
    CHECK(rel_error(g32.dq, rg[0]) < 1e-4);
    CHECK(rel_error(g32.dk, rg[1]) < 1e-4);
    CHECK(rel_error(g32.dv, rg[2]) < 1e-4);

    // bfloat16 and float16 (read and written in place by the float32 kernels) on every tenth:
    // the output against the float64 reference on the same rounded inputs, to a rounding.
    if (n % 10 == 0) {
      for (DType h : {kBFloat16, kFloat16}) {
        CAPTURE(h);
        SdpaOptions oh = o;
        if (c.mask_kind == 1) oh.mask = in.mask.to(h);
        const Tensor qh = in.q.to(h), kh = in.k.to(h), vh = in.v.to(h);
        const SdpaResult got = sdpa_forward(qh, kh, vh, oh);
        SdpaOptions ow = o;
        if (c.mask_kind == 1) ow.mask = oh.mask->to(kFloat64);
        const SdpaResult want =
            sdpa_reference(qh.to(kFloat64), kh.to(kFloat64), vh.to(kFloat64), ow);
        CHECK(got.out.dtype() == h);
        CHECK(rel_error(got.out, want.out) < (h == kBFloat16 ? 0x1p-8 : 0x1p-11) + 1e-4);
        CHECK(rel_error(got.stats, want.stats) < 1e-4);
      }
    }
  }
}

TEST_CASE(
    "ragged sdpa is twice differentiable through the tape: float64 gradcheck, gradgradcheck") {
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  // Three sequences: 3 x 4, empty x 2, 2 x 1 (rows x keys); GQA 2:1.
  const Tensor cu_q = from_vector(std::vector<int64_t>{0, 3, 3, 5}, {4});
  const Tensor cu_kv = from_vector(std::vector<int64_t>{0, 4, 6, 7}, {4});
  Tensor q = rnd({5, 2, 4}, 1).requires_grad_(), k = rnd({7, 1, 4}, 2).requires_grad_();
  Tensor v = rnd({7, 1, 3}, 3).requires_grad_(), m = rnd({3, 1, 3, 4}, 4).requires_grad_();
  const auto ragged = [&cu_q, &cu_kv] {
    SdpaOptions o;
    o.cu_seqlens_q = cu_q;
    o.cu_seqlens_kv = cu_kv;
    return o;
  };
  SUBCASE("causal bottom-right, ALiBi, softcap, a float mask with its gradient") {
    Fn f = [&](const std::vector<Tensor>& x) {
      SdpaOptions o = ragged();
      o.causal = true;
      o.causal_align = CausalAlign::BottomRight;
      o.alibi = true;
      o.softcap = 3.0;
      o.mask = x[3];
      return sdpa(x[0], x[1], x[2], o).out;
    };
    CHECK_GRADCHECK(f, (std::vector<Tensor>{q, k, v, m}));
    CHECK_GRADGRADCHECK(f, (std::vector<Tensor>{q, k, v, m}));
  }
  SUBCASE("dropout at a fixed seed, a window, strided q; the composed double backward too") {
    Tensor qs = rnd({2, 5, 4}, 5).transpose(0, 1).requires_grad_();
    Fn f = [&](const std::vector<Tensor>& x) {
      SdpaOptions o = ragged();
      o.dropout_p = 0.3;
      o.seed = 11;
      o.window = 2;
      o.causal = true;
      return sdpa(x[0], x[1], x[2], o).out;
    };
    CHECK_GRADCHECK(f, (std::vector<Tensor>{qs, k, v}));
    CHECK_GRADGRADCHECK(f, (std::vector<Tensor>{qs, k, v}));
    FusedKernelsGuard off(false);
    CHECK_GRADGRADCHECK(f, (std::vector<Tensor>{qs, k, v}));
  }
  SUBCASE("a third derivative: the padded double backward is differentiable too") {
    Tensor w = rnd({5, 2, 3}, 6);
    Fn dq = [&](const std::vector<Tensor>& x) {
      EnableGradGuard grad_on;  // gradcheck evaluates f under NoGradGuard
      SdpaOptions o = ragged();
      o.softcap = 2.5;
      o.causal = true;
      o.causal_align = CausalAlign::BottomRight;
      o.mask = x[3];
      return grad({sdpa(x[0], x[1], x[2], o).out}, {x[0]}, {w}, std::nullopt, true, true)[0];
    };
    CHECK_GRADGRADCHECK(dq, (std::vector<Tensor>{q, k, v, m}));
  }
}

namespace {

double max_abs(const Tensor& t) { return t.numel() ? max(abs(t)).item<double>() : 0.0; }

}  // namespace

TEST_CASE("ragged backward in key parts, at 1 and 3 threads") {
  std::mt19937_64 rng(20261126);
  const int threads_before = get_num_threads();
  for (int n = 0; n < 4; ++n) {
    const RaggedConfig c = random_config(rng, true);
    const Inputs in = make_inputs(c, 900 + 10 * n);
    const SdpaOptions o = options_for(c, in);
    INFO("config " << n << ": " << c.describe());
    Tensor rq = in.q.detach().requires_grad_(), rk = in.k.detach().requires_grad_();
    Tensor rv = in.v.detach().requires_grad_();
    const SdpaResult ref = sdpa_reference(rq, rk, rv, o);
    const std::vector<Tensor> rg = grad({ref.out}, {rq, rk, rv}, {in.dout});
    for (int threads : {1, 3}) {
      CAPTURE(threads);
      set_num_threads(threads);
      auto [out, stats] = sdpa_forward(in.q, in.k, in.v, o);
      const SdpaGrads g = sdpa_backward(in.q, in.k, in.v, out, in.dout, stats, o);
      CHECK(rel_error(out, ref.out) < 1e-12);
      CHECK(rel_error(g.dq, rg[0]) < 1e-12);
      CHECK(rel_error(g.dk, rg[1]) < 1e-12);
      CHECK(rel_error(g.dv, rg[2]) < 1e-12);
    }
    set_num_threads(threads_before);
  }
}

TEST_CASE("ragged double backward: against the reference's, and fused against composed") {
  std::mt19937_64 rng(20261125);
  for (int n = 0; n < 40; ++n) {
    const RaggedConfig c = random_config(rng);
    const Inputs in = make_inputs(c, 3000 + 10 * n);
    const SdpaOptions o = options_for(c, in);
    INFO("config " << n << ": " << c.describe());
    const Tensor float_mask = c.mask_kind == 1 ? in.mask : Tensor();
    const auto second = [&](const tgtest::SdpaFn& attend) {
      return tgtest::second_order(attend, in.q, in.k, in.v, in.dout, float_mask, o, 900 + n);
    };
    const std::vector<Tensor> tiled = second(sdpa), want = second(sdpa_reference);
    std::vector<Tensor> composed;
    {
      FusedKernelsGuard off(false);  // the padded composition the other backends run
      composed = second(sdpa);
    }
    REQUIRE(tiled.size() == want.size());
    REQUIRE(composed.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      REQUIRE(tiled[i].sizes() == want[i].sizes());
      // Relative with an absolute floor, as the dense sweep: a gradient that is exactly 0
      // (a row with one key has dq = 0) is the roundoff of cancelling terms in the reference.
      CHECK(max_abs(sub(tiled[i], want[i])) <= 1e-10 * max_abs(want[i]) + 1e-14);
      CHECK(max_abs(sub(composed[i], want[i])) <= 1e-10 * max_abs(want[i]) + 1e-14);
    }
  }
}

TEST_CASE("16-bit ragged rows through float32 stand-ins (CUDA's path) equal the CPU's reads") {
  // The CUDA backend runs 16-bit SDPA on float32 copies of its views (half_kernels.h); a
  // ragged view must be copied as the whole packed tensor behind it, not its first `max` rows.
  // The CPU backend runs that path here too, against its own in-place 16-bit reads: both
  // compute in float32 and round once.
  const std::vector<int64_t> cq{0, 2, 9, 9, 12}, ckv{0, 5, 6, 17, 20};
  SdpaOptions o;
  o.causal = true;
  o.causal_align = CausalAlign::BottomRight;
  o.cu_seqlens_q = from_vector(cq, {5});
  o.cu_seqlens_kv = from_vector(ckv, {5});
  o.mask = rnd({1, 2, 7, 11}, 9).to(kBFloat16);
  const Tensor q = rnd({12, 2, 8}, 1).to(kBFloat16), k = rnd({20, 1, 8}, 2).to(kBFloat16);
  const Tensor v = rnd({20, 1, 8}, 3).to(kBFloat16), dout = rnd({12, 2, 8}, 4).to(kBFloat16);
  const SdpaResult want = sdpa_forward(q, k, v, o);
  const SdpaGrads want_g = sdpa_backward(q, k, v, want.out, dout, want.stats, o);
  Backend& cpu = detail::backend_of(q);
  SdpaParams p = detail::sdpa_params(q, k, v, o);
  const Tensor out = empty(q.sizes(), q.options()), stats = empty({12, 2, 1});
  p.out = detail::sdpa_rows(out, p, true);
  p.stats = detail::sdpa_rows(stats, p, true);
  REQUIRE(half_kernels::sdpa_forward(cpu, kCPU, p));
  CHECK(out.to_vector<float>() == want.out.to_vector<float>());
  CHECK(stats.to_vector<float>() == want.stats.to_vector<float>());
  const Tensor dq = empty(q.sizes(), q.options()), dk = empty(k.sizes(), k.options());
  const Tensor dv = empty(v.sizes(), v.options());
  REQUIRE(half_kernels::sdpa_backward(cpu, kCPU, p, detail::sdpa_rows(dout, p, true),
                                      {detail::sdpa_rows(dq, p, true),
                                       detail::sdpa_rows(dk, p, false),
                                       detail::sdpa_rows(dv, p, false),
                                       {}}));
  CHECK(dq.to_vector<float>() == want_g.dq.to_vector<float>());
  CHECK(dk.to_vector<float>() == want_g.dk.to_vector<float>());
  CHECK(dv.to_vector<float>() == want_g.dv.to_vector<float>());
  // Keys read through row indices from a larger pool (the paged layout, SdpaParams::kv_rows):
  // the pool's rows reversed, so key row r lies at pool row 29 - r.
  std::vector<int64_t> at(20);
  for (int64_t r = 0; r < 20; ++r) at[r] = 29 - r;
  const Tensor pool_rows = from_vector(at, {20});
  Tensor k_pool = zeros({30, 1, 8}, kBFloat16), v_pool = zeros({30, 1, 8}, kBFloat16);
  k_pool.index_copy_(0, pool_rows, k);
  v_pool.index_copy_(0, pool_rows, v);
  SdpaParams pr = p;
  pr.k = detail::ragged_rows(k_pool, p.batch(), p.len_kv());
  pr.v = detail::ragged_rows(v_pool, p.batch(), p.len_kv());
  pr.kv_rows = detail::view_of(pool_rows);
  pr.packed_kv = 30;
  const Tensor out2 = empty(q.sizes(), q.options());
  pr.out = detail::sdpa_rows(out2, pr, true);
  REQUIRE(half_kernels::sdpa_forward(cpu, kCPU, pr));
  CHECK(out2.to_vector<float>() == want.out.to_vector<float>());
}

TEST_CASE("ragged edge cases: no keys, no rows, all sequences empty") {
  SdpaOptions o;
  o.cu_seqlens_q = from_vector(std::vector<int64_t>{0, 2, 3}, {3});
  o.cu_seqlens_kv = from_vector(std::vector<int64_t>{0, 0, 0}, {3});
  const Tensor q = rnd({3, 2, 4}, 1).requires_grad_();
  const Tensor k = zeros({0, 1, 4}).to(kFloat64).requires_grad_();
  const Tensor v = zeros({0, 1, 5}).to(kFloat64).requires_grad_();
  auto [out, stats] = sdpa(q, k, v, o);
  CHECK(out.sizes() == Shape{3, 2, 5});
  CHECK(max(abs(out)).item<double>() == 0);
  CHECK(std::isinf(max(stats).item<double>()));
  sum(out).backward();
  CHECK(max(abs(q.grad())).item<double>() == 0);
  // Keys for one sequence only: the other's rows see nothing and stay 0.
  o.cu_seqlens_kv = from_vector(std::vector<int64_t>{0, 0, 2}, {3});
  const Tensor k2 = rnd({2, 1, 4}, 2), v2 = rnd({2, 1, 5}, 3);
  auto r = sdpa_forward(q.detach(), k2, v2, o);
  CHECK(max(abs(r.out.slice(0, 0, 2))).item<double>() == 0);
  CHECK(max(abs(r.out.slice(0, 2, 3))).item<double>() > 0);
  // No rows at all.
  o.cu_seqlens_q = from_vector(std::vector<int64_t>{0, 0, 0}, {3});
  auto e = sdpa_forward(zeros({0, 2, 4}), k2.to(kFloat32), v2.to(kFloat32), o);
  CHECK(e.out.sizes() == Shape{0, 2, 5});
}

TEST_CASE("bad ragged input gets an [sdpa] error") {
  const Tensor q = ones({5, 2, 4}), k = ones({7, 1, 4}), v = ones({7, 1, 3});
  auto with = [](const std::vector<int64_t>& cq, const std::vector<int64_t>& ckv) {
    SdpaOptions o;
    o.cu_seqlens_q = from_vector(cq, {static_cast<int64_t>(cq.size())});
    o.cu_seqlens_kv = from_vector(ckv, {static_cast<int64_t>(ckv.size())});
    return o;
  };
  const SdpaOptions good = with({0, 3, 5}, {0, 4, 7});
  CHECK(sdpa(q, k, v, good).out.sizes() == Shape{5, 2, 3});
  check_throws_with_prefix(
      [&] {
        sdpa(q, k, v, with({0, 3, 2, 5}, {0, 4, 4, 7}));
      },
      "[sdpa]", "must not decrease");
  check_throws_with_prefix(
      [&] {
        sdpa(q, k, v, with({1, 3, 5}, {0, 4, 7}));
      },
      "[sdpa]", "must start at 0");
  check_throws_with_prefix(
      [&] {
        sdpa(q, k, v, with({0, 3, 6}, {0, 4, 7}));
      },
      "[sdpa]", "must end at the 5 rows of 'q'");
  check_throws_with_prefix(
      [&] {
        sdpa(q, k, v, with({0, 3, 5}, {0, 4, 9}));
      },
      "[sdpa]", "must end at the 7 rows of 'k'");
  check_throws_with_prefix(
      [&] {
        sdpa(q, k, v, with({0, 5}, {0, 4, 7}));
      },
      "[sdpa]", "batch sizes differ");
  SdpaOptions o = good;
  o.cu_seqlens_q = ones({3});
  check_throws_with_prefix([&] { sdpa(q, k, v, o); }, "[sdpa]", "int64");
  o.cu_seqlens_q = from_vector(std::vector<int64_t>{0, 3, 5}, {1, 3});
  check_throws_with_prefix([&] { sdpa(q, k, v, o); }, "[sdpa]", "1-D");
  o = good;
  o.cu_seqlens_kv.reset();
  check_throws_with_prefix([&] { sdpa(q, k, v, o); }, "[sdpa]", "come together");
  o = good;
  o.seq_len_q = from_vector(std::vector<int64_t>{3, 2}, {2});
  check_throws_with_prefix([&] { sdpa(q, k, v, o); }, "[sdpa]", "seq_len_q");
  check_throws_with_prefix([&] { sdpa(ones({1, 2, 5, 4}), k, v, good); }, "[sdpa]", "3-D");
  check_throws_with_prefix(
      [&] {
        sdpa(q, k, ones({6, 1, 3}), good);
      },
      "[sdpa]", "rows of k and v differ");
  o = good;
  o.mask = ones({3, 5});
  check_throws_with_prefix([&] { sdpa(q, k, v, o); }, "[sdpa]", "[2, 2, 3, 4]");
  const SdpaResult fwd = sdpa_forward(q, k, v, good);
  check_throws_with_prefix(
      [&] {
        sdpa_backward(q, k, v, fwd.out, ones({5, 2, 4}), fwd.stats, good);
      },
      "[sdpa_backward]", "'dout'");
}

TEST_CASE("16-bit ragged rows: the double backward takes statistics that match its own scores") {
  // The ragged layout's query rows a head are its longest sequence's (70 here: the forward
  // multiplies bfloat16 on AMX), not the packed tensor's size(2), its head dim (16). At a softmax
  // scale of 1e12 the AMX scores differ from the float32 double backward's by more than exp's
  // range, so unless the double backward takes the statistics again its gradients are inf or NaN
  // (test_sdpa_double_backward checks the padded layout).
  SdpaOptions o;
  o.scale = 1e12;
  o.cu_seqlens_q = from_vector(std::vector<int64_t>{0, 70, 130}, {3});
  o.cu_seqlens_kv = from_vector(std::vector<int64_t>{0, 70, 130}, {3});
  const Tensor q = rnd({130, 2, 16}, 1).to(kBFloat16), k = rnd({130, 2, 16}, 2).to(kBFloat16);
  const Tensor v = rnd({130, 2, 16}, 3).to(kBFloat16);
  const Tensor dout = rnd({130, 2, 16}, 4).to(kBFloat16);
  for (const Tensor& t : tgtest::second_order(sdpa, q, k, v, dout, Tensor(), o, 5))
    CHECK(tgtest::all_finite(t));
}
