#include "ops/sdpa_paged.h"

#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/host_values.h"
#include "ops/op_util.h"
#include "ops/ops.h"
#include "ops/sdpa_check.h"

namespace tg {

namespace {

constexpr const char* kOp = "sdpa_paged";

// A pool (N, block, H, D) read through `rows` (its block rows, block * block_size + row, one
// per key in order) into sdpa's ragged (T, H, D): an embedding lookup of the pool's rows.
Tensor read_rows(const Tensor& pool, const Tensor& rows) {
  const int64_t n = pool.size(0), block = pool.size(1), h = pool.size(2), d = pool.size(3);
  return embedding(pool.reshape({n * block, h * d}), rows).view({rows.size(0), h, d});
}

// (B, H, S, D) <-> sdpa's ragged (B * S, H, D) of B sequences of S rows.
Tensor to_rows(const Tensor& t) {
  return t.transpose(1, 2).reshape({t.size(0) * t.size(2), t.size(1), t.size(3)});
}
Tensor from_rows(const Tensor& t, int64_t batch) {
  return t.view({batch, t.size(0) / batch, t.size(1), t.size(2)}).transpose(1, 2);
}

// The offsets of ragged queries (Tq, Hq, D): 1-D int64, 0 first, never decreasing, Tq last.
std::vector<int64_t> query_offsets(const Tensor& cu, const Tensor& q) {
  detail::check_dtype(cu, kInt64, kOp, "cu_seqlens_q");
  detail::check_same_device(q, cu, kOp, "cu_seqlens_q");
  TG_CHECK(cu.dim() == 1 && cu.numel() >= 1, kOp,
           "argument 'cu_seqlens_q' must be 1-D with B + 1 offsets, got shape ",
           shape_str(cu.sizes()));
  std::vector<int64_t> v = detail::host_int64(cu);
  TG_CHECK(v.front() == 0 && v.back() == q.size(0), kOp,
           "argument 'cu_seqlens_q' must run from 0 to q's ", q.size(0), " rows, got ", v.front(),
           " to ", v.back());
  for (size_t b = 1; b < v.size(); ++b) {
    TG_CHECK(v[b] >= v[b - 1], kOp, "argument 'cu_seqlens_q' must not decrease, got ", v[b - 1],
             " then ", v[b], " at index ", b);
  }
  return v;
}

}  // namespace

SdpaResult detail::sdpa_pool_rows(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                                  const Tensor& kv_rows, const SdpaOptions& opts) {
  if (!(grad_enabled() && any_requires_grad({q, k_pool, v_pool})) && kv_rows.numel() > 0) {
    // No gradient wanted (decoding): the kernel reads the blocks in place, nothing gathered.
    auto pool_rows = [](const Tensor& pool) {
      return detail::autocast_low(pool).reshape(
          {pool.size(0) * pool.size(1), pool.size(2), pool.size(3)});
    };
    SdpaOptions o = opts;
    if (o.mask) o.mask = detail::autocast_low(*o.mask);  // as sdpa casts them
    return detail::sdpa_forward_rows(detail::autocast_low(q), pool_rows(k_pool), pool_rows(v_pool),
                                     kv_rows, o);
  }
  // Differentiable: the rows gathered into the ragged layout, their gradient flowing back
  // through the gather (two sequences may share a block).
  return sdpa(q, read_rows(k_pool, kv_rows), read_rows(v_pool, kv_rows), opts);
}

SdpaResult sdpa_paged(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                      const Tensor& page_table, const Tensor& seq_len_kv, const SdpaOptions& opts) {
  for (auto [t, arg] :
       {std::pair{&q, "q"}, std::pair{&k_pool, "k_pool"}, std::pair{&v_pool, "v_pool"},
        std::pair{&page_table, "page_table"}, std::pair{&seq_len_kv, "seq_len_kv"}}) {
    detail::check_defined(*t, kOp, arg);
    if (t != &q) detail::check_same_device(q, *t, kOp, arg);
  }
  TG_CHECK(!opts.seq_len_q && !opts.seq_len_kv && !opts.cu_seqlens_kv, kOp,
           "the keys' lengths are the argument 'seq_len_kv': the options must not give "
           "seq_len_q, seq_len_kv or cu_seqlens_kv too");
  // Queries: (B, Hq, Sq, D), or ragged (Tq, Hq, D) with opts.cu_seqlens_q (B + 1 offsets).
  const bool ragged_q = opts.cu_seqlens_q.has_value();
  std::vector<int64_t> cu_q{0};
  if (ragged_q) {
    TG_CHECK(q.dim() == 3, kOp,
             "argument 'q' with cu_seqlens_q must be ragged (Tq, Hq, D), got shape ",
             shape_str(q.sizes()));
    cu_q = query_offsets(*opts.cu_seqlens_q, q);
  } else {
    TG_CHECK(q.dim() == 4, kOp, "argument 'q' must be (B, Hq, Sq, D), got shape ",
             shape_str(q.sizes()));
    for (int64_t b = 0; b < q.size(0); ++b) cu_q.push_back(cu_q.back() + q.size(2));
  }
  for (auto [t, arg] : {std::pair{&k_pool, "k_pool"}, std::pair{&v_pool, "v_pool"}}) {
    TG_CHECK(t->dim() == 4, kOp, "argument '", arg, "' must be (blocks, block, Hk, D), got shape ",
             shape_str(t->sizes()));
  }
  TG_CHECK(v_pool.size(0) == k_pool.size(0) && v_pool.size(1) == k_pool.size(1) &&
               v_pool.size(2) == k_pool.size(2),
           kOp, "arguments 'k_pool' and 'v_pool' must share blocks, block size and heads, got ",
           shape_str(k_pool.sizes()), " and ", shape_str(v_pool.sizes()));
  const auto batch = static_cast<int64_t>(cu_q.size()) - 1;
  const int64_t blocks = k_pool.size(0), block = k_pool.size(1);
  TG_CHECK(block >= 1, kOp, "argument 'k_pool' must have blocks of at least one row, got shape ",
           shape_str(k_pool.sizes()));
  detail::check_dtype(page_table, kInt64, kOp, "page_table");
  detail::check_dtype(seq_len_kv, kInt64, kOp, "seq_len_kv");
  TG_CHECK(page_table.dim() == 2 && page_table.size(0) == batch, kOp,
           "argument 'page_table' must be (B, pages) with B = ", batch,
           " (q's sequences), got shape ", shape_str(page_table.sizes()));
  TG_CHECK(seq_len_kv.dim() == 1 && seq_len_kv.size(0) == batch, kOp,
           "argument 'seq_len_kv' must be (B) with B = ", batch, ", got shape ",
           shape_str(seq_len_kv.sizes()));
  const int64_t pages = page_table.size(1);
  // Every key's pool row, sequence after sequence; the pages in use must name pool blocks.
  const std::vector<int64_t> lengths = detail::host_int64(seq_len_kv);
  const std::vector<int64_t> table = detail::host_int64(page_table);
  std::vector<int64_t> rows, cu_kv{0};
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lengths[static_cast<size_t>(b)];
    TG_CHECK(len >= 0 && len <= pages * block, kOp, "argument 'seq_len_kv' must be in [0, ",
             pages * block, "] (pages x block), got ", len, " for sequence ", b);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t at = table[static_cast<size_t>(b * pages + j / block)];
      TG_CHECK(at >= 0 && at < blocks, kOp, "argument 'page_table' names block ", at,
               " for sequence ", b, " page ", j / block, ", outside the pool's ", blocks,
               " blocks");
      rows.push_back(at * block + j % block);
    }
    cu_kv.push_back(cu_kv.back() + len);
  }
  // The row indices and offsets on q's device, where the kernel reads them, in one copy; sdpa
  // checks the offsets on the host, from the values kept here.
  const std::vector<Tensor> sent = detail::int64_to_device(
      {{rows, {static_cast<int64_t>(rows.size())}}, {cu_q, {batch + 1}}, {cu_kv, {batch + 1}}},
      q.device());
  SdpaOptions o = opts;
  o.cu_seqlens_q = sent[1];
  o.cu_seqlens_kv = sent[2];
  SdpaResult r = detail::sdpa_pool_rows(ragged_q ? q : to_rows(q), k_pool, v_pool, sent[0], o);
  if (ragged_q) return r;
  return {from_rows(r.out, batch), from_rows(r.stats, batch)};
}

}  // namespace tg
