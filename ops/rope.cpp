#include "ops/rope.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <compare>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/fused_kernels.h"
#include "ops/host_values.h"
#include "ops/join.h"
#include "ops/nn.h"
#include "ops/op_util.h"

namespace tg {

namespace {

// What a pair of tables depends on: rows at positions 0..rows-1 (or positions[t] when given)
// plus offset, for D = 2 * half features, in x's compute dtype on x's device.
struct TableKey {
  int64_t rows = 0, half = 0;
  double theta = 0;
  int64_t offset = 0;
  bool inverse = false;
  DType dtype = kFloat32;
  DeviceType device_type = DeviceType::CPU;
  int device_index = 0;
  std::vector<int64_t> positions;
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy reads the defaulted <=> as a 0 literal
  auto operator<=>(const TableKey&) const = default;
  Device device() const { return {device_type, device_index}; }
};

// cos and sin (rows, half) of the angles (position(t) + offset) * theta^(-2i/D), position(t) =
// t or positions[t], computed in double and cast to the key's dtype; sin is negated for the
// inverse rotation.
std::pair<Tensor, Tensor> computed_tables(const TableKey& k) {
  std::vector<double> c(static_cast<size_t>(k.rows * k.half)), s(c.size());
  for (int64_t i = 0; i < k.half; ++i) {
    const double freq = std::pow(k.theta, -2.0 * static_cast<double>(i) / (2.0 * k.half));
    for (int64_t t = 0; t < k.rows; ++t) {
      const int64_t at = k.positions.empty() ? t : k.positions[static_cast<size_t>(t)];
      const double angle = static_cast<double>(at + k.offset) * freq;
      c[t * k.half + i] = std::cos(angle);
      s[t * k.half + i] = k.inverse ? -std::sin(angle) : std::sin(angle);
    }
  }
  const TensorOptions opts = TensorOptions(k.dtype).device(k.device());
  return {from_vector(c, {k.rows, k.half}, opts), from_vector(s, {k.rows, k.half}, opts)};
}

// The tables of the last few keys seen: a model asks for the same ones in every layer and every
// step, and on a GPU each new table is a host-to-device copy. Rows at given positions that lie
// among few (a packed batch's, restarting at every sequence: positions below a power of two no
// more than 4 T) are the rows of the table of positions 0 .. that power of two, gathered on the
// device (the same values): those positions change every step, and T x D/2 cosines and sines
// on the host took longer than the step's rope kernels, their tables above 64 KiB going up as
// waited copies. Others (a decoding step's few rows far along) are computed as they are. The
// caller holds the mutex.
std::pair<Tensor, Tensor> tables(const TableKey& key) {
  static std::map<TableKey, std::pair<Tensor, Tensor>> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::pair<Tensor, Tensor> made;
  TableKey all = key;
  if (!key.positions.empty()) {
    const int64_t most = *std::max_element(key.positions.begin(), key.positions.end());
    all.rows = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(most) + 1));
    all.positions.clear();
  }
  if (key.positions.empty() || all.rows > 4 * key.rows) {
    made = computed_tables(key);
  } else {
    const auto [c, s] = tables(all);
    NoGradGuard no_grad;
    const Tensor at = detail::int64_to_device(key.positions, {key.rows}, key.device());
    made = {embedding(c, at), embedding(s, at)};
  }
  if (cache.size() >= 64) cache.clear();  // decoding walks offsets: keep the cache bounded
  cache.emplace(key, made);
  return made;
}

void rope_tables(const Tensor& x, int64_t seq, const RopeOptions& o, Tensor& cos_t, Tensor& sin_t) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::tie(cos_t, sin_t) =
      tables({x.size(seq), x.sizes().back() / 2, o.theta, o.offset, o.inverse,
              compute_dtype(x.dtype()), x.device().type, x.device().index, o.positions});
}

// The composite rotation (what the fused kernel computes), differentiable by the tape: the
// tables (S, D/2) seen as (S, 1, ..., 1, D/2) against x's pairs (..., D/2, 2).
Tensor rope_composite(const Tensor& x, const Tensor& cos_t, const Tensor& sin_t, int64_t seq) {
  const int64_t half = x.sizes().back() / 2;
  Shape table{cos_t.size(0)};
  for (int64_t i = seq + 1; i < x.dim() - 1; ++i) table.push_back(1);
  table.push_back(half);
  Tensor c = cos_t.reshape(table), s = sin_t.reshape(table);
  Shape pairs = x.sizes();
  pairs.back() = half;
  pairs.push_back(2);
  Tensor xp = x.reshape(pairs);
  Tensor even = xp.narrow(-1, 0, 1).squeeze(-1), odd = xp.narrow(-1, 1, 1).squeeze(-1);
  return stack({sub(mul(even, c), mul(odd, s)), add(mul(even, s), mul(odd, c))}, -1)
      .reshape(x.sizes())
      .to(x.dtype());  // float32 tables for 16-bit x: back to x's dtype
}

}  // namespace

Tensor rope(const Tensor& x, const RopeOptions& opts) {
  detail::check_defined(x, "rope", "x");
  detail::check_floating(x, "rope", "x");
  TG_CHECK(x.dim() >= 2, "rope",
           "argument 'x' must have at least 2 dims (positions, features), "
           "got shape ",
           shape_str(x.sizes()));
  TG_CHECK(x.sizes().back() % 2 == 0, "rope",
           "argument 'x' must have an even last dim (pairs), "
           "got ",
           x.sizes().back());
  const int64_t seq = opts.seq_dim < 0 ? opts.seq_dim + x.dim() : opts.seq_dim;
  TG_CHECK(seq >= 0 && seq < x.dim() - 1, "rope",
           "argument 'seq_dim' must name a dim before the "
           "last of a ",
           x.dim(), "-d tensor, got ", opts.seq_dim);
  TG_CHECK(opts.offset >= 0, "rope", "argument 'offset' must be >= 0, got ", opts.offset);
  TG_CHECK(opts.theta > 0 && std::isfinite(opts.theta), "rope",
           "argument 'theta' must be a positive finite number, got ", opts.theta);
  if (!opts.positions.empty()) {
    TG_CHECK(static_cast<int64_t>(opts.positions.size()) == x.size(seq), "rope",
             "argument 'positions' must hold one entry per row along seq_dim (", x.size(seq),
             "), got ", opts.positions.size());
    for (size_t t = 0; t < opts.positions.size(); ++t) {
      TG_CHECK(opts.positions[t] >= 0, "rope", "argument 'positions' must be >= 0, got ",
               opts.positions[t], " at row ", t);
    }
  }
  Tensor out = Tensor::empty_like_shape(x.sizes(), x.dtype(), x.device());
  if (out.numel()) {
    Tensor cos_t, sin_t;
    rope_tables(x, seq, opts, cos_t, sin_t);
    if (!fused_kernels()) return rope_composite(x, cos_t, sin_t, seq);
    // Rows at any strides (the heads of a packed projection, a transposed gradient) are read
    // in place; only the pairs must be adjacent.
    Tensor xc = detail::rows_ready(x);
    if (!detail::backend_of(x).rope(detail::view_of(xc), detail::view_of(cos_t),
                                    detail::view_of(sin_t), seq, detail::view_of(out))) {
      return rope_composite(x, cos_t, sin_t, seq);
    }
  }
  if (any_requires_grad({x})) {
    RopeOptions back = opts;
    back.inverse = !opts.inverse;
    record("rope", {x}, {&out},
           [back](const std::vector<Tensor>& g) { return std::vector<Tensor>{rope(g[0], back)}; });
  }
  return out;
}

}  // namespace tg
