// SDPA over a paged K/V cache: against sdpa on the same keys held contiguously (random block
// placements, lengths 0 to full, every option but dropout), read in place (no gradients)
// bitwise as gathered, gradients through the pools, gradcheck, and bad tables.
#include <algorithm>
#include <numeric>
#include <random>

#include "sdpa_random.h"
#include "test_util.h"

using namespace tg;
using tgtest::check_throws_with_prefix;
using tgtest::rnd;

namespace {

// Rows [p * block, p * block + rows) of sequence b of t (B, H, S, D), as a pool block's
// (1, rows, H, D).
Tensor page_of(const Tensor& t, int64_t b, int64_t p, int64_t block, int64_t rows) {
  return t.narrow(0, b, 1).narrow(2, p * block, rows).transpose(1, 2);
}
// The first `rows` rows of block `at` of a pool (N, block, H, D).
Tensor block_rows(const Tensor& pool, int64_t at, int64_t rows) {
  return pool.narrow(0, at, 1).narrow(1, 0, rows);
}

// Contiguous keys k (B, Hk, S, D) scattered into a pool of blocks: each sequence's pages go to
// blocks in a shuffled order (with spare blocks in between), unused table entries are -1.
struct Paged {
  Tensor pool, table;
};

Paged scatter(const Tensor& k, const std::vector<int64_t>& lengths, int64_t block, int64_t pages,
              std::mt19937_64& rng) {
  const int64_t B = k.size(0), Hk = k.size(1), D = k.size(3);
  int64_t used = 0;
  for (int64_t len : lengths) used += (len + block - 1) / block;
  const int64_t n = used + 2;  // two blocks nobody uses
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  Tensor pool = mul(ones({n, block, Hk, D}, kFloat64), 1e3);  // junk where nothing is written
  std::vector<int64_t> table(static_cast<size_t>(B * pages), -1);
  size_t next = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t p = 0; p * block < lengths[static_cast<size_t>(b)]; ++p) {
      const int64_t at = order[next++];
      table[static_cast<size_t>(b * pages + p)] = at;
      const int64_t rows = std::min(block, k.size(2) - p * block);
      block_rows(pool, at, rows).copy_(page_of(k, b, p, block, rows));
    }
  }
  return {pool, from_vector(table, {B, pages})};
}

}  // namespace

TEST_CASE("sdpa_paged: equals sdpa on the same keys held contiguously, forward and gradients") {
  std::mt19937_64 rng(11);
  tgtest::Draws draw{rng};
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t B = draw.pick(1, 3), Hk = draw.pick(1, 2), Hq = Hk * draw.pick(1, 2), D = 4,
                  Dv = draw.pick(3, 5);
    const int64_t block = std::vector<int64_t>{1, 2, 4}[static_cast<size_t>(draw.pick(0, 2))];
    const int64_t pages = draw.pick(1, 4), Sq = draw.pick(1, 3);
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < B; ++b) lengths.push_back(draw.pick(0, pages * block));
    const int64_t S = std::max<int64_t>(1, *std::max_element(lengths.begin(), lengths.end()));
    SdpaOptions o;
    o.causal = draw.pick(0, 1);
    o.causal_align = CausalAlign::BottomRight;  // decoding: the new rows are the last
    o.window = draw.pick(0, 1) ? draw.pick(1, 3) : 0;
    o.alibi = draw.pick(0, 1);
    o.softcap = draw.pick(0, 1) ? 2.0 : 0.0;
    CAPTURE(trial);
    const uint64_t seed = static_cast<uint64_t>(trial) * 7;
    Tensor q = rnd({B, Hq, Sq, D}, seed + 1).requires_grad_(true);
    Tensor k = rnd({B, Hk, S, D}, seed + 2), v = rnd({B, Hk, S, Dv}, seed + 3);
    Paged pk = scatter(k, lengths, block, pages, rng);
    // v's blocks where k's are: one table for both.
    Paged pv = scatter(v, lengths, block, pages, rng);
    pv.pool = zeros({pk.pool.size(0), block, Hk, Dv}, kFloat64);
    const std::vector<int64_t> table = pk.table.to_vector<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t p = 0; p * block < lengths[static_cast<size_t>(b)]; ++p) {
        const int64_t rows = std::min(block, S - p * block);
        block_rows(pv.pool, table[static_cast<size_t>(b * pages + p)], rows)
            .copy_(page_of(v, b, p, block, rows));
      }
    }
    Tensor k_pool = pk.pool.requires_grad_(true), v_pool = pv.pool.requires_grad_(true);
    k.requires_grad_(true);
    v.requires_grad_(true);
    const Tensor len = from_vector(lengths, {B});
    const SdpaResult paged = sdpa_paged(q, k_pool, v_pool, pk.table, len, o);
    {  // Without gradients the kernel reads the blocks in place: the same numbers, bitwise.
      NoGradGuard no_grad;
      const SdpaResult in_place = sdpa_paged(q, k_pool, v_pool, pk.table, len, o);
      CHECK(in_place.out.to_vector<double>() == paged.out.to_vector<double>());
      CHECK(in_place.stats.to_vector<double>() == paged.stats.to_vector<double>());
    }
    // The reference: each sequence attended alone with its own keys (no keys: zero rows).
    std::vector<Tensor> alone;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = lengths[static_cast<size_t>(b)];
      alone.push_back(n == 0 ? zeros({1, Hq, Sq, Dv}, kFloat64)
                             : sdpa(q.narrow(0, b, 1), k.narrow(0, b, 1).narrow(2, 0, n),
                                    v.narrow(0, b, 1).narrow(2, 0, n), o)
                                   .out);
    }
    const Tensor want = cat(alone, 0);
    tgtest::check_close(paged.out.to_vector<double>(), want.to_vector<double>(), 1e-12);
    if (!want.requires_grad()) continue;  // no keys at all: nothing to differentiate
    // Gradients: q's alike; a pool's block rows hold the gradient of the keys they cache.
    const Tensor w = rnd({B, Hq, Sq, Dv}, seed + 4);
    const std::vector<Tensor> gp = grad({sum(mul(paged.out, w))}, {q, k_pool, v_pool});
    const std::vector<Tensor> gd = grad({sum(mul(want, w))}, {q, k, v});
    tgtest::check_close(gp[0].to_vector<double>(), gd[0].to_vector<double>(), 1e-12);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t p = 0; p * block < lengths[static_cast<size_t>(b)]; ++p) {
        const int64_t at = table[static_cast<size_t>(b * pages + p)];
        const int64_t rows = std::min(block, lengths[static_cast<size_t>(b)] - p * block);
        for (int i : {1, 2}) {
          tgtest::check_close(block_rows(gp[i], at, rows).contiguous().to_vector<double>(),
                              page_of(gd[i], b, p, block, rows).contiguous().to_vector<double>(),
                              1e-12);
        }
      }
    }
  }
}

TEST_CASE("sdpa_paged: ragged queries equal each sequence's own call, forward and gradients") {
  // Sequence b has n_q[b] new rows and len[b] keys (prefill and decoding in one call).
  const std::vector<int64_t> n_q{3, 1, 0, 2}, lengths{5, 1, 2, 2};
  const int64_t B = 4, Hq = 2, Hk = 1, D = 4, block = 2, pages = 3;
  const Tensor table =
      from_vector(std::vector<int64_t>{4, 0, 6, 1, -1, -1, 2, -1, -1, 3, -1, -1}, {B, pages});
  const Tensor len = from_vector(lengths, {B});
  Tensor k_pool = rnd({7, block, Hk, D}, 2).requires_grad_(true);
  Tensor v_pool = rnd({7, block, Hk, D}, 3).requires_grad_(true);
  Tensor q = rnd({6, Hq, D}, 1).requires_grad_(true);  // (Tq, Hq, D)
  SdpaOptions o;
  o.causal = true;
  o.causal_align = CausalAlign::BottomRight;
  o.alibi = true;
  o.cu_seqlens_q = from_vector(std::vector<int64_t>{0, 3, 4, 4, 6}, {B + 1});
  const SdpaResult r = sdpa_paged(q, k_pool, v_pool, table, len, o);
  CHECK(r.out.sizes() == Shape{6, Hq, D});
  CHECK(r.stats.sizes() == Shape{6, Hq, 1});
  const Tensor w = rnd({6, Hq, D}, 4);
  const std::vector<Tensor> g = grad({sum(mul(r.out, w))}, {q, k_pool, v_pool});
  // The reference: one sequence at a time, q as (1, Hq, n, D).
  SdpaOptions one = o;
  one.cu_seqlens_q.reset();
  std::vector<Tensor> want_g{zeros_like(q), zeros_like(k_pool), zeros_like(v_pool)};
  int64_t at = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = n_q[static_cast<size_t>(b)];
    if (n == 0) continue;
    Tensor qb = q.detach().narrow(0, at, n).transpose(0, 1).unsqueeze(0).requires_grad_(true);
    const SdpaResult rb =
        sdpa_paged(qb, k_pool, v_pool, table.narrow(0, b, 1), len.narrow(0, b, 1), one);
    const Tensor got = r.out.narrow(0, at, n).transpose(0, 1).unsqueeze(0);
    tgtest::check_close(got.contiguous().to_vector<double>(), rb.out.to_vector<double>(), 1e-12);
    const Tensor wb = w.narrow(0, at, n).transpose(0, 1).unsqueeze(0);
    const std::vector<Tensor> gb = grad({sum(mul(rb.out, wb))}, {qb, k_pool, v_pool});
    want_g[0].narrow(0, at, n).copy_(gb[0].squeeze(0).transpose(0, 1));
    want_g[1].add_(gb[1]);
    want_g[2].add_(gb[2]);
    at += n;
  }
  for (size_t i = 0; i < 3; ++i) {
    tgtest::check_close(g[i].to_vector<double>(), want_g[i].to_vector<double>(), 1e-12);
  }
  SdpaOptions bad = o;
  bad.cu_seqlens_q = from_vector(std::vector<int64_t>{0, 3, 2, 4, 6}, {B + 1});
  check_throws_with_prefix([&] { sdpa_paged(q, k_pool, v_pool, table, len, bad); }, "[sdpa_paged]",
                           "'cu_seqlens_q' must not decrease");
  bad.cu_seqlens_q = from_vector(std::vector<int64_t>{0, 3, 4, 4, 5}, {B + 1});
  check_throws_with_prefix([&] { sdpa_paged(q, k_pool, v_pool, table, len, bad); }, "[sdpa_paged]",
                           "from 0 to q's 6 rows");
  check_throws_with_prefix([&] { sdpa_paged(q.unsqueeze(0), k_pool, v_pool, table, len, o); },
                           "[sdpa_paged]", "must be ragged (Tq, Hq, D)");
}

TEST_CASE("sdpa_paged: gradcheck through q and both pools") {
  const Tensor table = from_vector(std::vector<int64_t>{2, 0, 1, -1}, {2, 2});
  const Tensor len = from_vector(std::vector<int64_t>{3, 2}, {2});
  SdpaOptions o;
  o.causal = true;
  o.causal_align = CausalAlign::BottomRight;
  auto f = [&](const std::vector<Tensor>& x) {
    return sdpa_paged(x[0], x[1], x[2], table, len, o).out;
  };
  const std::vector<Tensor> inputs{rnd({2, 2, 2, 4}, 1).requires_grad_(true),
                                   rnd({3, 2, 1, 4}, 2).requires_grad_(true),
                                   rnd({3, 2, 1, 3}, 3).requires_grad_(true)};
  CHECK_GRADCHECK(f, inputs);
}

TEST_CASE("sdpa_paged: bad tables, lengths and pools are [sdpa_paged] errors") {
  const Tensor q = rnd({2, 2, 1, 4}), pool = rnd({3, 2, 1, 4});
  const Tensor table = from_vector(std::vector<int64_t>{2, 0, 1, -1}, {2, 2});
  const Tensor len = from_vector(std::vector<int64_t>{3, 2}, {2});
  auto call = [&](const Tensor& t, const Tensor& l, const Tensor& kp, const SdpaOptions& o = {}) {
    return [=] { sdpa_paged(q, kp, kp, t, l, o); };
  };
  CHECK(sdpa_paged(q, pool, pool, table, len).out.sizes() == Shape{2, 2, 1, 4});
  check_throws_with_prefix(call(from_vector(std::vector<int64_t>{2, 3, 1, -1}, {2, 2}), len, pool),
                           "[sdpa_paged]", "names block 3");
  check_throws_with_prefix(call(from_vector(std::vector<int64_t>{2, 0, -1, -1}, {2, 2}), len, pool),
                           "[sdpa_paged]", "names block -1");
  check_throws_with_prefix(call(table, from_vector(std::vector<int64_t>{5, 2}, {2}), pool),
                           "[sdpa_paged]", "'seq_len_kv' must be in [0, 4]");
  check_throws_with_prefix(call(table.to(kFloat64), len, pool), "[sdpa_paged]", "page_table");
  check_throws_with_prefix(call(table.view({4}), len, pool), "[sdpa_paged]", "(B, pages)");
  check_throws_with_prefix(call(table, len.view({1, 2}), pool), "[sdpa_paged]", "'seq_len_kv'");
  check_throws_with_prefix(call(table, len, rnd({3, 2, 4})), "[sdpa_paged]",
                           "(blocks, block, Hk, D)");
  SdpaOptions twice;
  twice.seq_len_kv = len;
  check_throws_with_prefix(call(table, len, pool, twice), "[sdpa_paged]", "must not give");
  check_throws_with_prefix(
      [&] {
        sdpa_paged(q, pool, rnd({3, 1, 1, 4}), table, len);
      },
      "[sdpa_paged]", "share blocks, block size and heads");
}
