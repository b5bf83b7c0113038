// SDPA kernels against sdpa_reference over random option combinations, gradcheck of sdpa
// itself, the backward's key parts, edge cases and bad input. The double backward's tests are in
// test_sdpa_double_backward.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <tuple>

#include "backends/sdpa_params.h"
#include "sdpa_dense.h"

using namespace tg;
using namespace sdpa_dense;
using tgtest::check_throws_with_prefix;
using tgtest::rel_error;
using tgtest::rnd;

TEST_CASE("kernels agree with sdpa_reference over random option combinations") {
  std::mt19937_64 rng(20261122);
  const int configs = 300;
  for (int n = 0; n < configs; ++n) {
    Config c = random_config(rng);
    Inputs in = make_inputs(c, 100 + 10 * n);
    SdpaOptions o = c.opts;
    if (c.mask_kind) o.mask = in.mask;
    INFO("config " << n << ": " << c.describe());

    // float64 kernel against the float64 reference, forward and backward.
    auto [out, stats] = sdpa_forward(in.q, in.k, in.v, o);
    SdpaGrads g = sdpa_backward(in.q, in.k, in.v, out, in.dout, stats, o);
    Tensor rq = in.q.detach().requires_grad_(), rk = in.k.detach().requires_grad_();
    Tensor rv = in.v.detach().requires_grad_();
    SdpaOptions ro = o;
    if (c.mask_kind == 1) ro.mask = in.mask.detach().requires_grad_();
    auto ref = sdpa_reference(rq, rk, rv, ro);
    std::vector<Tensor> wrt{rq, rk, rv};
    if (c.mask_kind == 1) wrt.push_back(*ro.mask);
    auto rg = grad({ref.out}, wrt, {in.dout});
    check_against_reference(out, stats, g, ref, rg, 1e-10);

    // float32, bfloat16 and float16 kernels: float32 against the float64 reference, the 16-bit
    // dtypes against the reference on the same rounded inputs.
    for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
      CAPTURE(dt);
      if (dt == kFloat32) {
        const Rounded x = run_rounded(c, o, in, dt);
        check_rounded(c, o, 0x1p-24, x.in, x.r.out, x.r.stats, x.g, ref, rg);
      } else {
        check_16bit(c, o, in, dt);
      }
    }
  }
}

TEST_CASE("sdpa is differentiable through the tape: float64 gradcheck") {
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  Tensor q = rnd({1, 2, 5, 4}, 1).requires_grad_(), k = rnd({1, 1, 6, 4}, 2).requires_grad_();
  Tensor v = rnd({1, 1, 6, 3}, 3).requires_grad_(), m = rnd({2, 5, 6}, 4).requires_grad_();
  SUBCASE("causal, GQA, float mask with its gradient") {
    const Fn f = causal_bottom_right_with_mask;
    CHECK_GRADCHECK(f, (std::vector<Tensor>{q, k, v, m}));
  }
  SUBCASE("dropout at a fixed seed, softcap, ALiBi, bool mask, padding") {
    Fn f = [](const std::vector<Tensor>& x) {
      SdpaOptions o;
      o.dropout_p = 0.3;
      o.seed = 7;
      o.softcap = 3.0;
      o.alibi = true;
      o.mask = gt(rnd({5, 6}, 9), -0.5);
      o.seq_len_kv = from_vector(std::vector<int64_t>{5}, {1});
      return sdpa(x[0], x[1], x[2], o).out;
    };
    CHECK_GRADCHECK(f, (std::vector<Tensor>{q, k, v}));
  }
  SUBCASE("a constant float mask (no gradient asked for it)") {
    Tensor bias = rnd({1, 1, 5, 6}, 8);
    Fn f = [bias](const std::vector<Tensor>& x) {
      SdpaOptions o;
      o.mask = bias;
      return sdpa(x[0], x[1], x[2], o).out;
    };
    CHECK_GRADCHECK(f, (std::vector<Tensor>{q, k, v}));
  }
  SUBCASE("strided inputs") {
    Tensor qs = rnd({1, 5, 2, 4}, 5).transpose(1, 2).requires_grad_();
    Fn f = [](const std::vector<Tensor>& x) {
      SdpaOptions o;
      o.window = 2;
      o.causal = true;
      return sdpa(x[0], x[1], x[2], o).out;
    };
    CHECK_GRADCHECK(f, (std::vector<Tensor>{qs, k, v}));
  }
  SUBCASE("heads merged as a transformer does: a view, and a strided output gradient") {
    // out is (B, Sq, Hq, Dv) in memory, so merging its heads copies nothing.
    CHECK(sdpa(q, k, v).out.transpose(1, 2).is_contiguous());
    Fn f = [](const std::vector<Tensor>& x) {
      SdpaOptions o;
      o.causal = true;
      return sdpa(x[0], x[1], x[2], o).out.transpose(1, 2).reshape({1, 5, 6});
    };
    CHECK_GRADCHECK(f, (std::vector<Tensor>{q, k, v}));
  }
}

TEST_CASE("the backward's key parts: against sdpa_reference at 1 to 3 threads") {
  // With fewer kv heads than four a thread the backward splits each head's keys into parts,
  // each a task with its own partial dQ sum added at the end (cpu_sdpa_backward.cpp, key_parts:
  // one part per 256 keys at most); the random suite's short sequences never get a second one.
  // Results are the same bits run to run at a given thread count.
  std::mt19937_64 rng(20261126);
  const int threads_before = get_num_threads();
  for (int n = 0; n < 6; ++n) {
    Config c = random_config(rng);
    tgtest::Draws draw{rng};
    c.B = 1;
    c.Sq = draw.pick(40, 130);
    c.Skv = draw.pick(520, 900);
    c.D = draw.coin(0.5) ? 64 : 16;
    c.Dv = draw.coin(0.5) ? c.D : 40;
    c.opts.seq_len_q.reset();
    if (c.opts.seq_len_kv) c.opts.seq_len_kv = from_vector(std::vector<int64_t>{c.Skv - 300}, {1});
    if (c.mask_kind) {
      c.mask_shape.front() = std::min<int64_t>(c.mask_shape.front(), c.B);
      c.mask_shape.back() = c.Skv;
      if (c.mask_shape.size() > 1 && c.mask_shape[c.mask_shape.size() - 2] != 1)
        c.mask_shape[c.mask_shape.size() - 2] = c.Sq;
    }
    const Inputs in = make_inputs(c, 7000 + 10 * n);
    SdpaOptions o = c.opts;
    if (c.mask_kind) o.mask = in.mask;
    INFO("config " << n << ": " << c.describe());
    Tensor rq = in.q.detach().requires_grad_(), rk = in.k.detach().requires_grad_();
    Tensor rv = in.v.detach().requires_grad_();
    const SdpaResult ref = sdpa_reference(rq, rk, rv, o);
    const std::vector<Tensor> rg = grad({ref.out}, {rq, rk, rv}, {in.dout});
    for (int threads : {1, 2, 3}) {
      CAPTURE(threads);
      set_num_threads(threads);
      auto [out, stats] = sdpa_forward(in.q, in.k, in.v, o);
      const SdpaGrads g = sdpa_backward(in.q, in.k, in.v, out, in.dout, stats, o);
      CHECK(rel_error(out, ref.out) < 1e-10);
      CHECK(rel_error(g.dq, rg[0]) < 1e-10);
      CHECK(rel_error(g.dk, rg[1]) < 1e-10);
      CHECK(rel_error(g.dv, rg[2]) < 1e-10);
      const SdpaGrads again = sdpa_backward(in.q, in.k, in.v, out, in.dout, stats, o);
      CHECK(max_abs(sub(again.dq, g.dq)) == 0);
      CHECK(max_abs(sub(again.dk, g.dk)) == 0);
    }
    set_num_threads(threads_before);
  }
}

// The CPU kernels accumulate float32 and float64 outputs in their own rows where a row is whole
// vectors (rows_to_accumulate): those outputs must keep nothing of the memory they were given.
// Each call follows the freeing of NaN tensors of its outputs' sizes, whose blocks malloc hands
// back to it (each under glibc's first mmap threshold). The padding leaves query rows and keys
// that nothing reaches. With 150 keys the backward's dQ accumulates in place; with 600 keys of
// one kv head it splits them into two parts (key_parts), whose dQ are partial sums, and causal
// leaves the second part unreached.
TEST_CASE("outputs accumulated in place keep nothing of their memory") {
  const int threads_before = get_num_threads();
  for (DType dt : {kFloat32, kFloat64}) {
    for (const auto& keys : {std::pair<int64_t, int64_t>{150, 70}, {600, 550}}) {
      const int64_t skv = keys.first, len_kv = keys.second;
      CAPTURE(dt);
      CAPTURE(skv);
      const Tensor q = rnd({1, 2, 150, 16}, 1).to(dt), k = rnd({1, 1, skv, 16}, 2).to(dt);
      const Tensor v = rnd({1, 1, skv, 16}, 3).to(dt), dout = rnd({1, 2, 150, 16}, 4).to(dt);
      SdpaOptions o;
      o.causal = true;
      o.seq_len_q = from_vector(std::vector<int64_t>{100}, {1});
      o.seq_len_kv = from_vector(std::vector<int64_t>{len_kv}, {1});
      Tensor rq = q.to(kFloat64).requires_grad_(), rk = k.to(kFloat64).requires_grad_();
      Tensor rv = v.to(kFloat64).requires_grad_();
      const SdpaResult ref = sdpa_reference(rq, rk, rv, o);
      const std::vector<Tensor> rg = grad({ref.out}, {rq, rk, rv}, {dout.to(kFloat64)});
      const double nan = std::numeric_limits<double>::quiet_NaN();
      const Shape qs{1, 2, 150, 16}, ks{1, 1, skv, 16};
      const auto nan_blocks = [&] {
        std::vector<Tensor> junk{full(qs, nan, dt), full(qs, nan, dt), full(ks, nan, dt),
                                 full(ks, nan, dt)};
      };
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
      for (int threads : {1, 2, 3}) {
        CAPTURE(threads);
        set_num_threads(threads);
        nan_blocks();
        const SdpaResult r = sdpa_forward(q, k, v, o);
        nan_blocks();
        const SdpaGrads g = sdpa_backward(q, k, v, r.out, dout, r.stats, o);
        for (const Tensor& t : {r.out, g.dq, g.dk, g.dv}) CHECK(tgtest::all_finite(t));
        CHECK(rel_error(r.out, ref.out) < tol);
        CHECK(rel_error(g.dq, rg[0]) < tol);
        CHECK(rel_error(g.dk, rg[1]) < tol);
        CHECK(rel_error(g.dv, rg[2]) < tol);
      }
    }
  }
  set_num_threads(threads_before);
}

TEST_CASE("packed operands whose rows are a multiple of 1 KiB apart (padded strides)") {
  // 256 float32 keys or head dims (128 float64) make rows of the packed K^T, V^T and K 1 KiB
  // apart; the kernels pad those strides by a cache line (tile_gemm.h, packed_stride). The
  // random suites never reach these widths.
  for (auto [dt, keys, dim, tol] : {std::tuple{kFloat32, int64_t{256}, int64_t{256}, 1e-4},
                                    std::tuple{kFloat64, int64_t{128}, int64_t{128}, 1e-10}}) {
    const DType dtype = dt;  // a copy: doctest's CAPTURE is a lambda, which clang 14 does not
                             // let capture a structured binding
    CAPTURE(dtype);
    Config c;
    c.B = 1, c.Hq = 2, c.Hk = 1, c.Sq = 70, c.Skv = keys, c.D = dim, c.Dv = dim / 2;
    c.opts.causal = true;
    c.opts.causal_align = CausalAlign::BottomRight;
    const Inputs in = make_inputs(c, 4242);
    const Tensor q = in.q.to(dt), k = in.k.to(dt), v = in.v.to(dt), dout = in.dout.to(dt);
    auto [out, stats] = sdpa_forward(q, k, v, c.opts);
    SdpaGrads g = sdpa_backward(q, k, v, out, dout, stats, c.opts);
    Tensor rq = in.q.detach().requires_grad_(), rk = in.k.detach().requires_grad_();
    Tensor rv = in.v.detach().requires_grad_();
    auto ref = sdpa_reference(rq, rk, rv, c.opts);
    check_against_reference(out, stats, g, ref, grad({ref.out}, {rq, rk, rv}, {in.dout}), tol);
    if (dt == kFloat64) {
      const auto got = second_order(sdpa, in, c, c.opts, 99);
      const auto want = second_order(sdpa_reference, in, c, c.opts, 99);
      for (size_t i = 0; i < got.size(); ++i)
        CHECK(max_abs(sub(got[i], want[i])) <= 1e-10 * max_abs(want[i]) + 1e-14);
    }
  }
}

TEST_CASE("fully masked rows give out 0, stats -inf and zero gradients") {
  for (DType dtype : {kFloat64, kBFloat16, kFloat16}) {
    CAPTURE(dtype);
    Tensor q = rnd({1, 1, 4, 8}, 1).to(dtype).requires_grad_();
    Tensor k = rnd({1, 1, 4, 8}, 2).to(dtype).requires_grad_();
    Tensor v = rnd({1, 1, 4, 8}, 3).to(dtype).requires_grad_();
    SdpaOptions o;
    o.mask = from_vector(std::vector<bool>{true, true, false, false, false, false, false, false,
                                           true, false, true, false, false, false, false, false},
                         {4, 4});
    o.seq_len_q = from_vector(std::vector<int64_t>{3}, {1});
    auto [out, stats] = sdpa(q, k, v, o);
    CHECK(stats.dtype() == compute_dtype(dtype));
    auto s = stats.to(kFloat64).to_vector<double>();
    CHECK(std::isfinite(s[0]));
    CHECK(s[1] == -INFINITY);  // every key masked
    CHECK(s[3] == -INFINITY);  // padding row
    auto ov = out.to(kFloat64).to_vector<double>();
    for (int c = 0; c < 8; ++c) {
      CHECK(ov[8 + c] == 0.0);
      CHECK(ov[24 + c] == 0.0);
    }
    tg::sum(out).backward();
    for (const Tensor& t : {q.grad(), k.grad(), v.grad()}) {
      CHECK(t.dtype() == dtype);
      for (double x : t.to(kFloat64).to_vector<double>()) CHECK(std::isfinite(x));
    }
    auto gq = q.grad().to(kFloat64).to_vector<double>();
    for (int c = 0; c < 8; ++c) CHECK(gq[8 + c] == 0.0);
  }
  // No key at all.
  auto [o0, s0] = sdpa(rnd({1, 1, 2, 4}, 4), rnd({1, 1, 0, 4}, 5), rnd({1, 1, 0, 4}, 6));
  CHECK(o0.to_vector<double>() == std::vector<double>(8, 0.0));
  CHECK(s0.to_vector<double>() == std::vector<double>{-INFINITY, -INFINITY});
}

TEST_CASE("NaN inputs give NaN where the reference's results are NaN, never a masked-looking 0") {
  // One NaN in q (a whole row of scores NaN), k (a column), v or the float mask (one score), at
  // 5 query rows (the few-rows tiles) and 70 (two query tiles; 71 keys pad the last vector of a
  // row with -inf, after which the row maxima once dropped the NaN and a NaN row came out 0).
  using tgtest::nan_positions, tgtest::neg_inf_positions, tgtest::with_nan_at;
  auto covers = [](const std::vector<bool>& got, const std::vector<bool>& want) {
    for (size_t i = 0; i < want.size(); ++i)
      if (want[i] && !got[i]) return false;
    return true;
  };
  for (int64_t S : {5, 70}) {
    for (const char* input : {"q", "k", "v", "mask"}) {
      const std::string what = input;
      CAPTURE(S);
      CAPTURE(what);
      Tensor q = rnd({1, 1, S, 8}, 1), k = rnd({1, 1, S + 1, 8}, 2), v = rnd({1, 1, S + 1, 8}, 3);
      if (what == "q") q = with_nan_at(q, 3);
      if (what == "k") k = with_nan_at(k, 3);
      if (what == "v") v = with_nan_at(v, 3);
      SdpaOptions o;
      if (what == "mask") o.mask = with_nan_at(rnd({S, S + 1}, 4), 2);
      Tensor rq = q.detach().requires_grad_(), rk = k.detach().requires_grad_();
      Tensor rv = v.detach().requires_grad_();
      const SdpaResult ref = sdpa_reference(rq, rk, rv, o);
      const Tensor dout = rnd({1, 1, S, 8}, 5);
      const std::vector<Tensor> rg = grad({ref.out}, {rq, rk, rv}, {dout});
      for (DType dt : {kFloat64, kFloat32}) {
        CAPTURE(dt);
        SdpaOptions od = o;
        if (o.mask) od.mask = o.mask->to(dt);
        const Tensor qd = q.to(dt), kd = k.to(dt), vd = v.to(dt);
        auto [out, stats] = sdpa_forward(qd, kd, vd, od);
        const SdpaGrads g = sdpa_backward(qd, kd, vd, out, dout.to(dt), stats, od);
        CHECK(nan_positions(out) == nan_positions(ref.out));
        CHECK(neg_inf_positions(stats) == neg_inf_positions(ref.stats));
        CHECK(nan_positions(g.dq) == nan_positions(rg[0]));
        // dk and dv: NaN at least where the reference's are (with a NaN in the mask the kernels
        // make the whole row of P NaN, as the CUDA kernels do, and so every key's dK).
        CHECK(covers(nan_positions(g.dk), nan_positions(rg[1])));
        CHECK(covers(nan_positions(g.dv), nan_positions(rg[2])));
      }
    }
  }
}

TEST_CASE("edge cases: single query or key, huge scores, p = 0 and p near 1") {
  SdpaOptions o;
  for (auto [sq, skv] : {std::pair<int64_t, int64_t>{1, 7}, {7, 1}, {1, 1}}) {
    Tensor q = rnd({2, 2, sq, 4}, 1), k = rnd({2, 2, skv, 4}, 2), v = rnd({2, 2, skv, 4}, 3);
    CHECK(rel_error(sdpa_forward(q, k, v).out, sdpa_reference(q, k, v).out) < 1e-12);
  }
  Tensor q = rnd({1, 2, 70, 8}, 4), k = rnd({1, 2, 70, 8}, 5), v = rnd({1, 2, 70, 8}, 6);
  o.scale = 1e4;  // scores in the thousands: the online softmax must not overflow
  auto big = sdpa_forward(q.to(kFloat32), k.to(kFloat32), v.to(kFloat32), o);
  for (float x : big.out.to_vector<float>()) CHECK(std::isfinite(x));
  CHECK(rel_error(big.out, sdpa_reference(q, k, v, o).out) < 1e-4);
  SdpaOptions none, zero;
  zero.dropout_p = 0.0;
  zero.seed = 99;
  CHECK(sdpa_forward(q, k, v, none).out.to_vector<double>() ==
        sdpa_forward(q, k, v, zero).out.to_vector<double>());
  SdpaOptions high;
  high.dropout_p = 0.99;
  high.seed = 3;
  auto r = sdpa_forward(q, k, v, high);
  for (double x : r.out.to_vector<double>()) CHECK(std::isfinite(x));
  CHECK(rel_error(r.out, sdpa_reference(q, k, v, high).out) < 1e-10);
}

// A softmax scale of 0 makes every score 0: out is the mean of v, dq and dk are 0. (The CPU's
// backward multiplied dK by scale / q's share of it, 0 / 0: dk came out NaN.)
TEST_CASE("softmax scale 0: uniform attention, zero dq and dk") {
  SdpaOptions o;
  o.scale = 0.0;
  for (DType dt : {kFloat64, kFloat32, kBFloat16}) {
    for (int64_t sq : {3, 100}) {  // scores by dots of K's rows, and by tile products
      CAPTURE(dt);
      CAPTURE(sq);
      const Tensor q = rnd({1, 2, sq, 16}, 1).to(dt), k = rnd({1, 2, 90, 16}, 2).to(dt);
      const Tensor v = rnd({1, 2, 90, 16}, 3).to(dt), dout = rnd({1, 2, sq, 16}, 4).to(dt);
      const SdpaResult r = sdpa_forward(q, k, v, o);
      const SdpaGrads g = sdpa_backward(q, k, v, r.out, dout, r.stats, o);
      const Tensor mean_v = tg::mean(v.to(kFloat64), {2}, true);
      const double tol = dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 1e-5 : 1e-2;
      CHECK(max_abs(sub(r.out.to(kFloat64), mean_v)) < tol);
      for (const Tensor& t : {g.dq, g.dk})
        CHECK(t.to(kFloat64).to_vector<double>() == std::vector<double>(t.numel(), 0.0));
      CHECK(tgtest::all_finite(g.dv));
    }
  }
}

TEST_CASE("few query rows a head: the backward sees the forward's scores bit for bit") {
  // Up to 8 query rows a head, every pass takes the scores as dot products of K's rows, whatever
  // the threads and however many heads a forward tile stacks (scores_by_dots). At a softmax scale
  // of 1e12 the float32 scores are ~1e12, where another order of summation differs by far more
  // than exp's range: the backward's P = exp(S - lse) was inf, and so were the gradients. P is
  // one-hot there, so dV is dO summed over the queries whose maximum each key is, as in the
  // float64 reference; dq and dk stay finite (their exact values are float32's cancellation).
  const int threads_before = get_num_threads();
  for (int64_t sq : {1, 3, 8}) {
    for (int64_t hk : {1, 4}) {
      Tensor q = rnd({2, 8, sq, 16}, 1), k = rnd({2, hk, 40, 16}, 2), v = rnd({2, hk, 40, 16}, 3);
      Tensor dout = rnd({2, 8, sq, 16}, 4);
      SdpaOptions o;
      o.scale = 1e12;
      Tensor rq = q.detach().requires_grad_(), rk = k.detach().requires_grad_();
      Tensor rv = v.detach().requires_grad_();
      const SdpaResult ref = sdpa_reference(rq, rk, rv, o);
      const std::vector<Tensor> rg = grad({ref.out}, {rq, rk, rv}, {dout});
      for (int threads : {1, 2, 3}) {
        CAPTURE(sq);
        CAPTURE(hk);
        CAPTURE(threads);
        set_num_threads(threads);
        Tensor q32 = q.to(kFloat32).requires_grad_(), k32 = k.to(kFloat32).requires_grad_();
        Tensor v32 = v.to(kFloat32).requires_grad_();
        const Tensor out = sdpa(q32, k32, v32, o).out;
        const std::vector<Tensor> g = grad({out}, {q32, k32, v32}, {dout.to(kFloat32)});
        for (const Tensor& t : g) CHECK(tgtest::all_finite(t));
        CHECK(rel_error(out, ref.out) < 1e-6);
        CHECK(rel_error(g[2], rg[2]) < 1e-6);
      }
    }
  }
  // Nor do the forward's results depend on the threads: four query heads of one kv head at 3
  // rows make a tile of 12 rows at 1 thread and of 6 at 2 and 3, which took tile products and
  // dot products before the rule.
  const Tensor q = rnd({1, 4, 3, 64}, 5).to(kFloat32), k = rnd({1, 1, 300, 64}, 6).to(kFloat32);
  const Tensor v = rnd({1, 1, 300, 64}, 7).to(kFloat32);
  set_num_threads(1);
  const std::vector<float> one = sdpa(q, k, v).out.to_vector<float>();
  for (int threads : {2, 3}) {
    CAPTURE(threads);
    set_num_threads(threads);
    CHECK(sdpa(q, k, v).out.to_vector<float>() == one);
  }
  set_num_threads(threads_before);
}

TEST_CASE("dropout: keep rate within 4 sigma, one mask for forward, backward and the dump") {
  SdpaOptions o;
  o.dropout_p = 0.3;
  o.seed = 1234;
  o.offset = 8;
  Tensor keep = sdpa_dropout_mask(2, 4, 64, 64, o);
  const double n = 2 * 4 * 64 * 64, kept = static_cast<double>(tg::sum(keep).item<int64_t>());
  CHECK(std::abs(kept - n * 0.7) < 4 * std::sqrt(n * 0.3 * 0.7));
  // Element (b, h, i, j) uses stream position offset + its row-major index.
  auto kv = keep.to_vector<bool>();
  for (uint64_t idx : {0ull, 1ull, 4095ull, 12345ull, 32767ull})
    CHECK(kv[idx] == (philox_uniform(1234, 8 + idx) > 0.3f));
  // With V = identity rows, out is exactly P_dropped: zero exactly where the mask drops.
  Tensor q = rnd({1, 1, 6, 6}, 1), k = rnd({1, 1, 6, 6}, 2);
  Tensor v = eq(arange(6, kFloat64).reshape({6, 1}), arange(6, kFloat64))
                 .to(kFloat64)
                 .reshape({1, 1, 6, 6});
  auto out = sdpa_forward(q, k, v, o).out.to_vector<double>();
  auto mask = sdpa_dropout_mask(1, 1, 6, 6, o).to_vector<bool>();
  for (size_t i = 0; i < out.size(); ++i) CHECK((out[i] != 0.0) == mask[i]);
  // Backward: dV row j collects only kept P, so a dropped column gives no gradient to V there.
  Tensor dout = ones({1, 1, 6, 6}, kFloat64);
  auto [o2, st] = sdpa_forward(q, k, v, o);
  SdpaGrads g = sdpa_backward(q, k, v, o2, dout, st, o);
  auto dv = g.dv.to_vector<double>();
  for (int j = 0; j < 6; ++j) {
    bool any = false;
    for (int i = 0; i < 6; ++i) any = any || mask[i * 6 + j];
    CHECK((dv[j * 6] != 0.0) == any);
  }
}

TEST_CASE("ALiBi slopes") {
  auto s8 = alibi_slopes(8).to_vector<double>();
  for (int h = 0; h < 8; ++h) CHECK(s8[h] == doctest::Approx(std::pow(2.0, -(h + 1))));
  auto s6 = alibi_slopes(6).to_vector<double>();  // 4 from H=4, then odd ones of H=8
  std::vector<double> want = {std::pow(2, -2), std::pow(2, -4), std::pow(2, -6),
                              std::pow(2, -8), std::pow(2, -1), std::pow(2, -3)};
  for (int h = 0; h < 6; ++h) CHECK(s6[h] == doctest::Approx(want[h]));
}

TEST_CASE("bad input gets an [sdpa] error") {
  Tensor q = ones({1, 4, 3, 8}), k = ones({1, 2, 5, 8}), v = ones({1, 2, 5, 6});
  check_throws_with_prefix([&] { sdpa(ones({4, 3, 8}), k, v); }, "[sdpa]", "4-D");
  check_throws_with_prefix([&] { sdpa(ones({1, 3, 3, 8}), k, v); }, "[sdpa]", "multiple");
  check_throws_with_prefix([&] { sdpa(ones({1, 4, 3, 7}), k, v); }, "[sdpa]", "head dims");
  check_throws_with_prefix([&] { sdpa(q, k, ones({1, 2, 4, 6})); }, "[sdpa]", "sequence lengths");
  check_throws_with_prefix([&] { sdpa(q, k.to(kFloat64), v); }, "[sdpa]", "float64");
  check_throws_with_prefix([&] { sdpa(q.to(kInt64), k.to(kInt64), v.to(kInt64)); }, "[sdpa]",
                           "int64");
  SdpaOptions o;
  o.mask = ones({3, 4});
  check_throws_with_prefix([&] { sdpa(q, k, v, o); }, "[sdpa]", "not broadcastable");
  o.mask = ones({3, 5}, kInt64);
  check_throws_with_prefix([&] { sdpa(q, k, v, o); }, "[sdpa]", "'mask' must be bool");
  o.mask = ones({3, 5}, kFloat64);
  check_throws_with_prefix([&] { sdpa(q, k, v, o); }, "[sdpa]", "'mask' must be bool");
  SdpaOptions d;
  d.dropout_p = 1.0;
  check_throws_with_prefix([&] { sdpa(q, k, v, d); }, "[sdpa]", "dropout_p");
  d.dropout_p = -0.5;
  check_throws_with_prefix([&] { sdpa(q, k, v, d); }, "[sdpa]", "dropout_p");
  SdpaOptions w;
  w.window = -1;
  check_throws_with_prefix([&] { sdpa(q, k, v, w); }, "[sdpa]", "window");
  SdpaOptions l;
  l.seq_len_kv = from_vector(std::vector<int64_t>{5, 5}, {2});
  check_throws_with_prefix([&] { sdpa(q, k, v, l); }, "[sdpa]", "shape [1]");
  l.seq_len_kv = from_vector(std::vector<int64_t>{6}, {1});
  check_throws_with_prefix([&] { sdpa(q, k, v, l); }, "[sdpa]", "[0, 5]");
  l.seq_len_kv = ones({1});
  check_throws_with_prefix([&] { sdpa(q, k, v, l); }, "[sdpa]", "int64");
  const SdpaResult r = sdpa_forward(q, k, v);
  check_throws_with_prefix(
      [&] {
        sdpa_backward(q, k, v, r.out, ones({1, 4, 3, 5}), r.stats);
      },
      "[sdpa_backward]", "'dout'");
}

TEST_CASE("sdpa_all_visible: a tile is all visible exactly when each of its pairs is") {
  // The GPU kernels skip the per-element rules on such tiles (backends/cuda/cuda_sdpa_mma.cu).
  int all = 0, some = 0;
  for (bool causal : {false, true}) {
    for (int64_t window : {0, 1, 2, 5}) {
      for (int64_t ia = -3; ia <= 8; ++ia) {
        for (int64_t rows = 1; rows <= 4; ++rows) {
          for (int64_t j = 0; j <= 10; ++j) {
            for (int64_t keys = 1; keys <= 4; ++keys) {
              bool each = true;
              for (int64_t r = ia; r < ia + rows; ++r)
                for (int64_t c = j; c < j + keys; ++c)
                  each = each && sdpa_visible(causal, window, r, c);
              CAPTURE(causal);
              CAPTURE(window);
              CAPTURE(ia);
              CAPTURE(rows);
              CAPTURE(j);
              CAPTURE(keys);
              CHECK(sdpa_all_visible(causal, window, ia, ia + rows - 1, j, j + keys - 1) == each);
              (each ? all : some) += 1;
            }
          }
        }
      }
    }
  }
  CHECK(all > 100);  // both answers are exercised
  CHECK(some > 100);
}
