// The per-element score rules of the CPU SDPA kernels (DESIGN.md §4), applied to a tile of
// scores in memory, and the tile loads and stores. Included by the CPU SDPA kernels alone.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/philox_fill.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/vector_tanh.h"
#include "backends/sdpa_params.h"
#include "core/half.h"

namespace tg::cpu::sdpa_tiles {

// The tiles of the forward, backward and double backward kernels.
constexpr int64_t kBr = 64;   // query rows per tile
constexpr int64_t kBc = 128;  // keys per tile (a multiple of every vector width)
// The row stride of the forward's and backward's score tiles: kBc plus one cache line, so that
// the column walks of the transposed products (P^T dO, dS^T Q read a column of the tile per
// step) spread over the L1's sets rather than landing every 512 bytes in an eighth of them.
constexpr int64_t kLd = kBc + 16;

// Whether a call's scores are dot products of K's rows (tile_dots) rather than tile products:
// when a head has at most kDotRows query rows (decoding), few enough that transposing K into
// panels for the tile products costs more than the products themselves. The forward, the
// backward and the double backward all decide by this rule, from the call's shape alone (not
// from the threads, nor from how many heads a forward tile stacks), so that the backward's
// P = exp(S - lse) meets the forward's scores bit for bit. The two ways of summing round
// differently, and with scores of 10^8 or more the difference outgrew exp's range: a finite
// forward, then gradients of inf (float32, a few query rows, softmax scale 10^12).
constexpr int64_t kDotRows = 8;
inline bool scores_by_dots(const SdpaParams& p) { return p.len_q() <= kDotRows; }

// Calls f(data) with v's elements typed as they are stored: T, or bfloat16/float16 for the
// 16-bit views of a float32 kernel, converted as the tiles are loaded and rounded once as
// they are stored (no float32 copies of whole tensors).
template <class T, class F>
void with_elements(const View& v, F&& f) {
  if constexpr (std::is_same_v<T, float>) {
    if (v.dtype == kBFloat16) return f(static_cast<bfloat16*>(v.data));
    if (v.dtype == kFloat16) return f(static_cast<float16*>(v.data));
  }
  f(static_cast<T*>(v.data));
}

// Rows [row0, row0 + rows) of the (b, h) matrix of v, element (r, c) at
// dst[r * rs + (c / W) * ps + c % W] (W = kLanes<T>), columns [width, cols) zeroed: load_rows
// and load_rows_panels below are its two layouts.
template <class T>
void load_rows_as(const View& v, int64_t b, int64_t h, int64_t row0, int64_t rows, T* dst,
                  int64_t rs, int64_t ps, int64_t cols, const int64_t* at) {
  constexpr int64_t W = simd::kLanes<T>;
  const int64_t width = v.sizes[3], sr = v.strides[2], sd = v.strides[3];
  with_elements<T>(v, [&](const auto* data) {
    const auto* src = data + b * v.strides[0] + h * v.strides[1];
    for (int64_t r = 0; r < rows; ++r) {
      const auto* s = src + (at ? at[r] : row0 + r) * sr;
      T* d = dst + r * rs;
      if (ps == W) {  // row-major: each row contiguous
        if (sd == 1) {
          for (int64_t c = 0; c < width; ++c) d[c] = static_cast<T>(s[c]);
        } else {
          for (int64_t c = 0; c < width; ++c) d[c] = static_cast<T>(s[c * sd]);
        }
        std::fill(d + width, d + cols, T(0));
      } else {  // a panel's W columns at a time: whole vectors where the row has them
        for (int64_t c0 = 0; c0 < cols; c0 += W) {
          T* p = d + c0 / W * ps;
          const int64_t m = std::clamp<int64_t>(width - c0, 0, W);
          if (m == W && sd == 1) {
            for (int64_t c = 0; c < W; ++c) p[c] = static_cast<T>(s[c0 + c]);
          } else {
            for (int64_t c = 0; c < W; ++c) p[c] = c < m ? static_cast<T>(s[(c0 + c) * sd]) : T(0);
          }
        }
      }
    }
  });
}

// Rows [row0, ...) of the (b, h) matrix of v where they lie, for a tile product to read in place
// (row stride v.strides[2]): when its elements are T, a row's are adjacent and fill whole
// vectors, and rows are at one stride (`at` null: not paged). Null otherwise.
template <class T>
const T* rows_in_place(const View& v, int64_t b, int64_t h, int64_t row0, const int64_t* at) {
  if (at || v.dtype != dtype_of<T>::value || v.strides[3] != 1 || v.sizes[3] % simd::kLanes<T> != 0)
    return nullptr;
  return static_cast<const T*>(v.data) + b * v.strides[0] + h * v.strides[1] + row0 * v.strides[2];
}

// Rows [row0, ...) of the (b, h) matrix of an output view for a tile product to accumulate into
// in place (row stride v.strides[2]), when its elements are T, a row's are adjacent and `width`
// (the accumulator's width in whole vectors) is the row's length; null otherwise, and the kernel
// accumulates in its own rows, which store_rows copies out. In place, the products' stores reach
// the output's cache lines a micro-tile at a time, between their FMAs, where copying a finished
// tile out waited on every line's first write at once: on an Intel AVX-512 core, forward+backward
// at (4, 8, 256, 64) ran 9% faster with no output written at all, and 8% faster in place.
template <class T>
T* rows_to_accumulate(const View& v, int64_t b, int64_t h, int64_t row0, int64_t width) {
  if (v.dtype != dtype_of<T>::value || v.strides[3] != 1 || v.sizes[3] != width) return nullptr;
  return static_cast<T*>(v.data) + b * v.strides[0] + h * v.strides[1] + row0 * v.strides[2];
}

// A tile's rows of an output for its products to accumulate into, `count` rows of `width`
// (whole vectors): the output's own (rows_to_accumulate) where `allowed` and they can be, which
// the first product then writes and the later ones add to; else `scratch` (row stride width),
// zeroed, which the caller copies out at the end.
template <class T>
struct TileRows {
  T* rows;
  int64_t ld;
  bool in_place;
};
template <class T>
TileRows<T> tile_rows(bool allowed, const View& v, int64_t b, int64_t h, int64_t row0,
                      int64_t count, int64_t width, T* scratch) {
  if (T* own = allowed ? rows_to_accumulate<T>(v, b, h, row0, width) : nullptr)
    return {own, v.strides[2], true};
  std::fill(scratch, scratch + count * width, T(0));
  return {scratch, width, false};
}

// The rows of a backward task's dK and dV that its products have written so far, when they
// accumulate in the outputs themselves (rows_to_accumulate): the first product that reaches a key
// writes its rows, later ones add to them, and the rows no query tile reaches are zeroed at the
// end. The keys a task's query tiles reach form one interval, [lo, hi): each tile's keys are an
// interval, and as the tiles move down the sequence the causal, window and padding rules move
// their intervals so that they overlap or touch. (Were a tile's keys ever apart from the
// interval, the rows between would be zeroed then, keeping it one.) Where dK and dV are the task's
// own rows (in_place false), zeroed before the first product, every product adds to them.
class KeyRowsWritten {
 public:
  explicit KeyRowsWritten(bool in_place) : in_place_(in_place) {}
  // f(r0, m, accumulate) over the rows [a, a + n), in up to three runs.
  template <class F>
  void product(int64_t a, int64_t n, F&& f) const {
    if (!in_place_) {
      f(a, n, true);
      return;
    }
    const int64_t c = a + n;
    if (lo_ >= hi_) {
      f(a, n, false);
      return;
    }
    const int64_t w0 = std::clamp(lo_, a, c), w1 = std::clamp(hi_, a, c);
    if (w0 > a) f(a, w0 - a, false);
    if (w1 > w0) f(w0, w1 - w0, true);
    if (c > w1) f(w1, c - w1, false);
  }
  // Rows [a, a + n) written; zero(r0, r1) writes 0 to rows [r0, r1).
  template <class Zero>
  void wrote(int64_t a, int64_t n, Zero&& zero) {
    if (!in_place_) return;
    const int64_t c = a + n;
    if (lo_ >= hi_) {
      lo_ = a;
      hi_ = c;
      return;
    }
    if (c < lo_) zero(c, lo_);
    if (a > hi_) zero(hi_, a);
    lo_ = std::min(lo_, a);
    hi_ = std::max(hi_, c);
  }
  // The task's rows [0, n) that no product wrote, to 0.
  template <class Zero>
  void finish(int64_t n, Zero&& zero) const {
    if (!in_place_) return;
    if (lo_ >= hi_) {
      zero(0, n);
      return;
    }
    zero(0, lo_);
    zero(hi_, n);
  }

 private:
  bool in_place_;
  int64_t lo_ = 0, hi_ = 0;
};

// rows x width block of a (B, H, S, D) view at (b, h, row0) into a row-major buffer with row
// stride ld >= width; columns [width, ld) are zeroed (the tile products read whole vectors).
// With `at` (the paged layout's SdpaParams::kv_rows), row r is row at[r] instead of row0 + r.
template <class T>
void load_rows(const View& v, int64_t b, int64_t h, int64_t row0, int64_t rows, T* dst, int64_t ld,
               const int64_t* at = nullptr) {
  load_rows_as(v, b, h, row0, rows, dst, ld, simd::kLanes<T>, ld, at);
}

// The same rows packed in panels of W = kLanes<T> columns, element (r, c) at
// dst[(c / W) * panel + r * W + c % W] (tile_gemm_panels' B: a panel is `panel` >= rows * W
// elements), columns [width, cols) zeroed; cols a multiple of W.
template <class T>
void load_rows_panels(const View& v, int64_t b, int64_t h, int64_t row0, int64_t rows, T* dst,
                      int64_t cols, int64_t panel, const int64_t* at = nullptr) {
  load_rows_as(v, b, h, row0, rows, dst, simd::kLanes<T>, panel, cols, at);
}

// dst[c * ldd + r] = src[r * lds + c] for an 8 x 8 block of float32, in three rounds of
// two-vector shuffles (unpack, pairs, halves) on 8-lane vectors whatever the build's width.
// Element by element, packing K^T and V^T took about 3% of the forward and backward at
// (4, 8, 256, 64) on a Zen 4 core.
inline void transpose_8x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  typedef float V8 __attribute__((vector_size(32)));
  V8 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) std::memcpy(&r[i], src + i * lds, sizeof(V8));
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4) {
    for (int j = 0; j < 2; ++j) {
      u[i + 2 * j] = __builtin_shufflevector(t[i + j], t[i + j + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * j + 1] =
          __builtin_shufflevector(t[i + j], t[i + j + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  }
  // u[i] holds columns i and i + 4 of rows 0-3 (i < 4) or 4-7 (u[i + 4]), in its halves.
  for (int i = 0; i < 4; ++i) {
    const V8 lo = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    const V8 hi = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(dst + i * ldd, &lo, sizeof(V8));
    std::memcpy(dst + (i + 4) * ldd, &hi, sizeof(V8));
  }
}

// The transpose of rows [row0, row0 + rows) of the (b, h) matrix of v, packed in panels of
// W = kLanes<T> columns, each D x W and contiguous, as tile_gemm_panels reads its B: element
// (c, r) (column c of row r) at dst[(r / W) * D * W + c * W + r % W], the last panel's columns
// past `rows` zeroed; round_to_lanes(rows) * D elements. `at` as for load_rows.
template <class T>
void load_transposed_panels(const View& v, int64_t b, int64_t h, int64_t row0, int64_t rows, T* dst,
                            const int64_t* at = nullptr) {
  constexpr int64_t W = simd::kLanes<T>;
  const int64_t width = v.sizes[3], sr = v.strides[2], sd = v.strides[3];
  const int64_t padded = (rows + W - 1) / W * W;
  auto at_rc = [&](int64_t r, int64_t c) -> T& { return dst[r / W * width * W + c * W + r % W]; };
  for (int64_t c = 0; c < width; ++c)
    for (int64_t r = rows; r < padded; ++r) at_rc(r, c) = T(0);
  with_elements<T>(v, [&](const auto* data) {
    const auto* src = data + b * v.strides[0] + h * v.strides[1];
    if (at) {  // rows one by one, each written down its column of dst
      for (int64_t r = 0; r < rows; ++r) {
        const auto* s = src + at[r] * sr;
        for (int64_t c = 0; c < width; ++c) at_rc(r, c) = static_cast<T>(s[c * sd]);
      }
      return;
    }
    // Blocks of kRowBlock source rows, each read across all its columns while it sits in L1
    // (a whole column at a time would walk every row of the head per element, from L2).
    constexpr int64_t kRowBlock = 16;
    src += row0 * sr;
    int64_t r_done = 0;  // rows [0, r_done) already written by whole 8 x 8 blocks
    if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(data)>>, float>) {
      // Eight rows r_done.. in one panel (W a multiple of 8): their columns W apart.
      if (sd == 1 && W % 8 == 0) {
        const int64_t w8 = width / 8 * 8;
        for (; r_done + 8 <= rows; r_done += 8) {
          for (int64_t c = 0; c < w8; c += 8)
            transpose_8x8(src + r_done * sr + c, sr, &at_rc(r_done, c), W);
          for (int64_t c = w8; c < width; ++c)
            for (int64_t r = r_done; r < r_done + 8; ++r) at_rc(r, c) = src[r * sr + c];
        }
      }
    }
    for (int64_t r0 = r_done; r0 < rows; r0 += kRowBlock) {
      const int64_t nr = std::min(kRowBlock, rows - r0);
      for (int64_t c = 0; c < width; ++c) {
        const auto* s = src + r0 * sr + c * sd;
        for (int64_t r = 0; r < nr; ++r) at_rc(r0 + r, c) = static_cast<T>(s[r * sr]);
      }
    }
  });
}

// Part `part` of `parts` of the rows [row0, row0 + rows) of a (B, H, S, D) view at (b, h),
// asked of the cache ahead of their load_rows / load_transposed_panels (`at` as there). The kernels
// spread the next tile's or head's rows over the key blocks of the one before, so that they
// come from L2 instead of L3 or memory. Rows whose elements are not adjacent are left alone.
// Always inlined: GCC (12) takes a function whose only effect is a prefetch for a pure one and
// drops every call to it (a caller of it with no other effect would need the same).
[[gnu::always_inline]] inline void prefetch_rows(const View& v, int64_t b, int64_t h, int64_t row0,
                                                 int64_t rows, int64_t part, int64_t parts,
                                                 const int64_t* at = nullptr) {
  if (v.strides[3] != 1 || rows <= 0 || v.sizes[3] <= 0) return;
  const int64_t es = static_cast<int64_t>(dtype_size(v.dtype)), bytes = v.sizes[3] * es;
  const char* base = static_cast<const char*>(v.data) + (b * v.strides[0] + h * v.strides[1]) * es;
  for (int64_t r = rows * part / parts; r < rows * (part + 1) / parts; ++r) {
    const char* row = base + (at ? at[r] : row0 + r) * v.strides[2] * es;
    // Every 64 bytes from the row's start, and its last byte: each cache line it touches.
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(row + o, 0, 2);
    __builtin_prefetch(row + bytes - 1, 0, 2);
  }
}

// The first `width` columns of src (row stride ld), times factor, into rows of a (B, H, S, D)
// view at (b, h, row0).
template <class T>
void store_rows(const View& v, int64_t b, int64_t h, int64_t row0, int64_t rows, const T* src,
                int64_t ld, T factor) {
  const int64_t width = v.sizes[3], sr = v.strides[2], sd = v.strides[3];
  with_elements<T>(v, [&](auto* data) {
    using S = std::remove_pointer_t<decltype(data)>;
    S* dst = data + b * v.strides[0] + h * v.strides[1] + row0 * sr;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; ++c) dst[r * sr + c * sd] = S(src[r * ld + c] * factor);
  });
}

// The backward kernels' parts (parts_per_task): sum[x] += part k's sum[x + k * stride] for
// x < n, in part order, so that the result is the same bits whichever thread ran which part.
template <class T>
void add_parts(T* sum, int64_t n, int64_t parts, int64_t stride) {
  for (int64_t k = 1; k < parts; ++k) {
    const T* add = sum + k * stride;
    for (int64_t x = 0; x < n; ++x) sum[x] += add[x];
  }
}

// The keys [lo, hi) of sequence s that causal, window and padding leave visible to any row of
// the query tile [i0, i0 + rows); {0, 0} when there are none (the tile is all padding).
struct KeyRange {
  int64_t lo = 0, hi = 0;
};
inline KeyRange key_range(const SdpaParams& p, const SdpaSequence& s, int64_t i0, int64_t rows) {
  if (i0 >= s.len_q) return {};
  const IndexRange r =
      sdpa_key_range(p.causal, p.window, i0 + s.shift, i0 + rows - 1 + s.shift, s.len_kv);
  if (r.hi <= r.lo) return {};
  return {r.lo, r.hi};
}

// The first key tile starts on a whole vector so that every B operand read of a tile stays
// inside the padded rows; the keys this adds before `lo` are masked by finish_scores.
template <class T>
int64_t first_key(int64_t lo) {
  return lo / simd::kLanes<T> * simd::kLanes<T>;
}

// Turns dot products S (rows x cols, leading dim ld; q already multiplied by the scale) into
// the final masked scores: softcap, ALiBi, float mask, then -inf wherever a mask hides the key.
// When `tanh_out` is given it receives tanh(s / softcap) for the backward's chain rule (0 for
// hidden keys).
template <class T>
void finish_scores(const SdpaParams& p, const SdpaSequence& seq, T* S, int64_t ld, int64_t b,
                   int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols, T* tanh_out) {
  const T cap = static_cast<T>(p.softcap);
  const T slope = p.alibi ? static_cast<T>(alibi_slope(h, p.heads_q())) : T(0);
  const int64_t shift = seq.shift, len_q = seq.len_q, len_kv = seq.len_kv;
  const T ninf = -std::numeric_limits<T>::infinity();
  const bool float_mask = p.mask.data && p.mask.dtype != kBool;
  const bool bool_mask = p.mask.data && p.mask.dtype == kBool;
  const int64_t* ms = p.mask.strides.data();
  if (cap <= T(0) && !p.alibi && !p.mask.data && i0 + rows <= len_q && j0 + cols <= len_kv &&
      sdpa_all_visible(p.causal, p.window, i0 + shift, i0 + rows - 1 + shift, j0, j0 + cols - 1))
    return;  // no rule touches this tile: the dot products are the scores
  // ALiBi with query and key positions that fit int32: its distances in 32-bit lanes.
  const bool alibi_int32 =
      p.alibi && std::max(i0 + rows + std::abs(shift), j0 + cols) < (int64_t{1} << 30);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r, ia = i + shift;
    T* row = S + r * ld;
    // Keys [lo, hi) of this row that causal, window and padding leave visible.
    const IndexRange keys = sdpa_key_range(p.causal, p.window, ia, ia, i < len_q ? len_kv : 0);
    const int64_t lo = std::clamp<int64_t>(keys.lo - j0, 0, cols);
    const int64_t hi = std::clamp<int64_t>(keys.hi - j0, lo, cols);
    if (cap > T(0)) {
      if constexpr (std::is_same_v<T, float>) {  // vectorized: std::tanh is a call per score
        float scratch[kBc];
        float* t = tanh_out ? tanh_out + r * ld : scratch;
        tanh_of_scaled(row + lo, cap, t + lo, hi - lo);
        for (int64_t c = lo; c < hi; ++c) row[c] = cap * t[c];
      } else {
        for (int64_t c = lo; c < hi; ++c) {
          T t;
          row[c] = sdpa_softcap(row[c], cap, t);
          if (tanh_out) tanh_out[r * ld + c] = t;
        }
      }
    }
    if (p.alibi) {
      if (alibi_int32) {  // sdpa_alibi's |ia - j| in int32 lanes: the same integers, vectorized
        const int32_t d0 = static_cast<int32_t>(ia - j0);
        for (int64_t c = lo; c < hi; ++c) {
          const int32_t d = d0 - static_cast<int32_t>(c);
          row[c] -= slope * static_cast<T>(d < 0 ? -d : d);
        }
      } else {
        for (int64_t c = lo; c < hi; ++c) row[c] = sdpa_alibi(row[c], slope, ia, j0 + c);
      }
    }
    if (p.mask.data) {
      const int64_t base = b * ms[0] + h * ms[1] + i * ms[2] + j0 * ms[3];
      // A mask row of contiguous keys (the usual layout) gets loops the compiler vectorizes. The
      // bool mask as `m[c * ms[3]] ? row[c] : ninf` compiled (g++ 12) to a conditional store: a
      // branch per score, mispredicted at random.
      if (float_mask) {
        const T* m = static_cast<const T*>(p.mask.data) + base;
        if (ms[3] == 1) {
          for (int64_t c = lo; c < hi; ++c) row[c] += m[c];
        } else {
          for (int64_t c = lo; c < hi; ++c) row[c] += m[c * ms[3]];
        }
      } else if (bool_mask) {
        const bool* m = static_cast<const bool*>(p.mask.data) + base;
        if (ms[3] == 1) {
          const auto* mb = reinterpret_cast<const uint8_t*>(m);
          for (int64_t c = lo; c < hi; ++c) row[c] = mb[c] != 0 ? row[c] : ninf;
        } else {
          for (int64_t c = lo; c < hi; ++c) row[c] = m[c * ms[3]] ? row[c] : ninf;
        }
      }
    }
    std::fill(row, row + lo, ninf);
    std::fill(row + hi, row + cols, ninf);
    if (tanh_out && cap > T(0)) {  // hidden keys: a defined 0 (their dS is 0 times this)
      std::fill(tanh_out + r * ld, tanh_out + r * ld + lo, T(0));
      std::fill(tanh_out + r * ld + hi, tanh_out + r * ld + cols, T(0));
    }
  }
}

// e^(row[c] - m) for the cp <= kBc columns of a row, handed to f(c, e) a vector at a time.
// Without AVX-512, the two halves of simd::exp_nonpositive in two passes, r kept in the row
// itself and the scales in a scratch row between them (simd.h says why; forward+backward at
// (1, 8, 1024, 64), one Zen 4 core, AVX2: 0.6-1.5% faster than one pass).
template <class T, class F>
void exp_row(T* row, int64_t cp, T m, F&& f) {
  using V = simd::Vec<T>;
  constexpr int64_t W = simd::kLanes<T>;
  const V vm = simd::splat(m);
#if defined(__AVX512F__)
  for (int64_t c = 0; c < cp; c += W) f(c, simd::exp_nonpositive<T>(simd::load(row + c) - vm));
#else
  alignas(64) T scale[kBc];
  for (int64_t c = 0; c < cp; c += W) {
    V sc;
    simd::store(row + c, simd::exp_nonpositive_reduce<T>(simd::load(row + c) - vm, sc));
    simd::store(scale + c, sc);
  }
  for (int64_t c = 0; c < cp; c += W)
    f(c, simd::exp_nonpositive_finish<T>(simd::load(row + c), simd::load(scale + c)));
#endif
}

// The probabilities of a row that no key is visible to (its maximum, or its logsumexp, is -inf),
// in place: 0, except where a score is NaN (a NaN in q, k or the float mask), which stays NaN, as
// in the reference and the CUDA kernels: NaN inputs give NaN results, not a row of zeros that
// looks masked. (The row maxima drop a NaN when a larger score or -inf follows it, so such a row
// can come here.) Returns the row's lane sums.
template <class T>
simd::Vec<T> hidden_row(T* row, int64_t cp) {
  using V = simd::Vec<T>;
  V sum{};
  for (int64_t c = 0; c < cp; c += simd::kLanes<T>) {
    const V x = simd::load(row + c);
    const V p = x == x ? V{} : x;
    simd::store(row + c, p);
    sum += p;
  }
  return sum;
}

// Turns final scores (rows x cols, padded to cp columns) into P = exp(s - lse) in place, from
// the forward's logsumexp: 0 in the padding columns and in rows that every rule hides (lse
// -inf). With dp (row stride ld) and D, also turns dP into the score gradient dS = P (dP - D)
// in the same pass (the backward's plain case: no dropout, softcap or score gradient output),
// which saves reading P back in a pass of its own.
template <class T>
void probabilities(T* s, int64_t ld, int64_t rows, int64_t cols, int64_t cp, const T* lse,
                   T* dp = nullptr, const T* dvec = nullptr) {
  using V = simd::Vec<T>;
  const T ninf = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    T* row = s + r * ld;
    T* drow = dp ? dp + r * ld : nullptr;
    std::fill(row + cols, row + cp, ninf);
    if (lse[r] == ninf) {
      hidden_row(row, cp);
      if (drow) std::copy(row, row + cp, drow);  // dS = P (dP - D): 0, or NaN with P
    } else if (!drow) {
      exp_row(row, cp, lse[r], [&](int64_t c, V e) { simd::store(row + c, e); });
    } else {
      const V d = simd::splat(dvec[r]);
      exp_row(row, cp, lse[r], [&](int64_t c, V e) {
        simd::store(row + c, e);
        simd::store(drow + c, e * (simd::load(drow + c) - d));
      });
    }
  }
}

// Multiplies P (rows x cols, cols <= kBc) by the dropout keep mask and 1 / (1 - p), in place:
// sdpa_keep's rule, its uniforms drawn a row at a time by philox_uniforms.
template <class T>
void apply_dropout(const SdpaParams& p, T* P, int64_t ld, int64_t b, int64_t h, int64_t i0,
                   int64_t rows, int64_t j0, int64_t cols) {
  const float pf = static_cast<float>(p.dropout_p);
  const T inv = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  const uint64_t skv = static_cast<uint64_t>(p.len_kv());
  float u[kBc];
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t base =
        ((static_cast<uint64_t>(b) * p.heads_q() + h) * p.len_q() + (i0 + r)) * skv + j0;
    philox_uniforms(p.seed, p.offset + base, cols, u);
    for (int64_t c = 0; c < cols; ++c) P[r * ld + c] *= sdpa_keeps(u[c], pf) ? inv : T(0);
  }
}

}  // namespace tg::cpu::sdpa_tiles
