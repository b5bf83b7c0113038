// SDPA's ragged layout (DESIGN §4): the offset checks, the kernels' row views, and the
// padding and unpadding through which sdpa_reference and the composed double backward compute
// it in the padded layout.
#include <algorithm>

#include "ops/host_values.h"
#include "ops/op_util.h"
#include "ops/ops.h"
#include "ops/sdpa_check.h"

namespace tg::detail {

namespace {

constexpr const char* kOp = "sdpa";

// The offsets on the host, checked: int64 (B + 1) on q's device, 0 first, never decreasing,
// `total` (the packed tensor's rows) last.
std::vector<int64_t> checked_offsets(const Tensor& cu, const char* arg, const Tensor& rows,
                                     const char* rows_arg, const Tensor& q) {
  check_defined(cu, kOp, arg);
  check_dtype(cu, kInt64, kOp, arg);
  check_same_device(q, cu, kOp, arg);
  TG_CHECK(cu.dim() == 1 && cu.numel() >= 1, kOp, "argument '", arg,
           "' must be 1-D with B + 1 offsets, got shape ", shape_str(cu.sizes()));
  std::vector<int64_t> v = host_int64(cu);
  TG_CHECK(v[0] == 0, kOp, "argument '", arg, "' must start at 0, got ", v[0]);
  for (size_t b = 1; b < v.size(); ++b) {
    TG_CHECK(v[b] >= v[b - 1], kOp, "argument '", arg, "' must not decrease, got ", v[b - 1],
             " then ", v[b], " at index ", b);
  }
  TG_CHECK(v.back() == rows.size(0), kOp, "argument '", arg, "' must end at the ", rows.size(0),
           " rows of '", rows_arg, "', got ", v.back());
  return v;
}

int64_t longest(const std::vector<int64_t>& cu) {
  int64_t m = 0;
  for (size_t b = 1; b < cu.size(); ++b) m = std::max(m, cu[b] - cu[b - 1]);
  return m;
}

// ids (B, max): row cu[b] + i of the packed tensor for sequence b's row i, row 0 for padding
// (masked by the lengths; its gradient is zero).
Tensor padding_ids(const std::vector<int64_t>& cu, int64_t max, Device device) {
  const int64_t B = static_cast<int64_t>(cu.size()) - 1;
  std::vector<int64_t> ids(static_cast<size_t>(B * max), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < cu[b + 1] - cu[b]; ++i) ids[b * max + i] = cu[b] + i;
  return from_vector(ids, {B, max}).to(device);
}

}  // namespace

std::optional<SdpaRagged> sdpa_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const SdpaOptions& o) {
  if (!o.cu_seqlens_q && !o.cu_seqlens_kv) return std::nullopt;
  TG_CHECK(o.cu_seqlens_q && o.cu_seqlens_kv, kOp,
           "cu_seqlens_q and cu_seqlens_kv come together (the ragged layout), got only ",
           o.cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_kv");
  TG_CHECK(!o.seq_len_q && !o.seq_len_kv, kOp,
           "seq_len_q / seq_len_kv pad the (B, H, S, D) layout; the ragged layout "
           "(cu_seqlens_q/kv) takes each sequence's length from its offsets");
  for (auto [t, arg] : {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    check_defined(*t, kOp, arg);
    TG_CHECK(t->dim() == 3, kOp, "argument '", arg,
             "' must be 3-D (T, H, D) in the ragged layout (cu_seqlens given), got shape ",
             shape_str(t->sizes()));
  }
  SdpaRagged r;
  r.cu_q = checked_offsets(*o.cu_seqlens_q, "cu_seqlens_q", q, "q", q);
  r.cu_kv = checked_offsets(*o.cu_seqlens_kv, "cu_seqlens_kv", k, "k", q);
  TG_CHECK(r.cu_q.size() == r.cu_kv.size(), kOp, "cu_seqlens_q holds ", r.cu_q.size(),
           " offsets and cu_seqlens_kv ", r.cu_kv.size(), ": the batch sizes differ");
  TG_CHECK(v.size(0) == k.size(0), kOp, "rows of k and v differ: ", k.size(0), " vs ", v.size(0));
  r.batch = static_cast<int64_t>(r.cu_q.size()) - 1;
  r.max_q = longest(r.cu_q);
  r.max_kv = longest(r.cu_kv);
  return r;
}

View ragged_rows(const Tensor& t, int64_t batch, int64_t max) {
  return View{t.raw_data(),
              t.dtype(),
              {batch, t.size(1), max, t.size(2)},
              {0, t.stride(1), t.stride(0), t.stride(2)}};
}

View sdpa_rows(const Tensor& t, const SdpaParams& p, bool query_rows) {
  if (!p.ragged()) return view_of(t);
  return ragged_rows(t, p.batch(), query_rows ? p.len_q() : p.len_kv());
}

Tensor sequence_lengths(const std::vector<int64_t>& cu, Device device) {
  std::vector<int64_t> len(cu.size() - 1);
  for (size_t b = 0; b + 1 < cu.size(); ++b) len[b] = cu[b + 1] - cu[b];
  return from_vector(len, {static_cast<int64_t>(len.size())}).to(device);
}

SdpaPadded sdpa_padded(const SdpaOptions& opts, const SdpaRagged& r, Device device) {
  SdpaPadded p{opts, zeros({r.batch, 1, 1, 1}, TensorOptions(kInt64).device(device))};
  p.opts.cu_seqlens_q.reset();
  p.opts.cu_seqlens_kv.reset();
  p.opts.seq_len_q = sequence_lengths(r.cu_q, device);
  p.opts.seq_len_kv = sequence_lengths(r.cu_kv, device);
  if (opts.causal_align == CausalAlign::BottomRight)
    p.row_shift = sub(*p.opts.seq_len_kv, *p.opts.seq_len_q).reshape({r.batch, 1, 1, 1});
  return p;
}

Tensor pad_sequences(const Tensor& t, const std::vector<int64_t>& cu, int64_t max) {
  const int64_t B = static_cast<int64_t>(cu.size()) - 1, H = t.size(1), D = t.size(2);
  const Tensor rows = embedding(t.reshape({t.size(0), H * D}), padding_ids(cu, max, t.device()));
  return rows.reshape({B, max, H, D}).transpose(1, 2);
}

Tensor unpad_sequences(const Tensor& t, const std::vector<int64_t>& cu) {
  const int64_t B = t.size(0), H = t.size(1), max = t.size(2), D = t.size(3);
  std::vector<int64_t> ids(static_cast<size_t>(cu.back()));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < cu[b + 1] - cu[b]; ++i) ids[cu[b] + i] = b * max + i;
  const Tensor flat = t.transpose(1, 2).reshape({B * max, H * D});
  const Tensor picked = embedding(flat, from_vector(ids, {cu.back()}).to(t.device()));
  return picked.reshape({cu.back(), H, D});
}

}  // namespace tg::detail
