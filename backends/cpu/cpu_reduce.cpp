// Sum / max / min over any set of dims. Each output element is reduced in a fixed order (by one
// thread, or with fewer outputs than threads its rows split among them and their results
// combined in that order), so the result is bitwise the same for every thread count.
#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "backends/reduce_dims.h"
#include "core/tensor.h"  // get_num_threads

namespace tg::cpu {
namespace {

// A reduction across rows: x's reduced dims are strided and a kept dim, kc, is x's unit-stride
// one (sum over dim 0 of a (rows, C) matrix: a bias's gradient). Taken output by output, each
// output reads one element per cache line and page (4096 x 1024 float32 over dim 0: a sum 14.7
// ms on two Intel AVX-512 cores, 0.04x PyTorch's; a max 12 ms). Instead a chunk of up to kChunk
// outputs along kc is reduced a row at a time, each row of x read in order into a row of partial
// results in L1 (a sum 0.40-0.42 ms, about 1.2x PyTorch's). Every output still takes its
// elements in the order the plain loop does, so the results are the same bits.
struct AcrossRows {
  static constexpr int64_t kChunk = 1024;
  int kc = -1;  // the kept dim along which chunks run
  int64_t n_kc = 0, chunk = 0, chunks = 0, tasks = 0;
  int64_t inner = 0, inner_st = 0, outer_red = 0;  // the reduced rows: outer_red runs of inner
};
// False where the layout is not such (the plain loop then).
bool across_rows_layout(const ReduceDims& rd, AcrossRows& a) {
  const Shape &kept_sizes = rd.kept_sizes, &kept_xst = rd.kept_xst;
  const int nr = static_cast<int>(rd.red_sizes.size()), nk = static_cast<int>(kept_sizes.size());
  a.inner = rd.red_sizes[nr - 1];
  a.inner_st = rd.red_st[nr - 1];
  a.kc = nk - 1;
  while (a.kc >= 0 && !(kept_xst[a.kc] == 1 && kept_sizes[a.kc] > 1)) --a.kc;
  if (a.inner_st == 1 || a.kc < 0) return false;
  a.n_kc = kept_sizes[a.kc];
  const int64_t n_out = numel_of(kept_sizes), n_red = numel_of(rd.red_sizes);
  // Chunks of up to kChunk, halved while that leaves threads without a task (4096 x 1024 over
  // dim 0 on two cores: chunks of 1024, one thread's, 0.57-0.59 ms; of 512 0.40-0.43).
  a.chunk = AcrossRows::kChunk;
  while (a.chunk > 64 && n_out / a.n_kc * ((a.n_kc + a.chunk - 1) / a.chunk) < get_num_threads())
    a.chunk /= 2;
  a.chunks = (a.n_kc + a.chunk - 1) / a.chunk;
  a.outer_red = a.inner ? n_red / a.inner : 0;
  a.tasks = n_out / a.n_kc * a.chunks;
  return true;
}

// Calls body(len, xoff, ooff) for every chunk, in parallel: the chunk's outputs are at ooff + k *
// kept_ost[kc] and their elements of reduced row (orow, i) at x + xoff + row_offset(rd, orow) + i
// * inner_st + k, for k < len.
template <class Body>
void for_each_chunk(const ReduceDims& rd, const AcrossRows& a, Body&& body) {
  const Shape &kept_sizes = rd.kept_sizes, &kept_xst = rd.kept_xst, &kept_ost = rd.kept_ost;
  const int nk = static_cast<int>(kept_sizes.size());
  const int64_t work = numel_of(kept_sizes) * numel_of(rd.red_sizes);
#pragma omp parallel for schedule(static) if (work > 32768 && a.tasks > 1)
  for (int64_t t = 0; t < a.tasks; ++t) {
    const int64_t c0 = t % a.chunks * a.chunk, len = std::min(a.chunk, a.n_kc - c0);
    int64_t xoff = c0, ooff = c0 * kept_ost[a.kc], r = t / a.chunks;
    for (int d = nk - 1; d >= 0; --d) {
      if (d == a.kc) continue;
      const int64_t i = r % kept_sizes[d];
      r /= kept_sizes[d];
      xoff += i * kept_xst[d];
      ooff += i * kept_ost[d];
    }
    body(len, xoff, ooff);
  }
}
// The offset of reduced row (orow, 0): orow over the reduced dims but the innermost.
inline int64_t row_offset(const ReduceDims& rd, int64_t orow) {
  int64_t base = 0;
  for (int d = static_cast<int>(rd.red_sizes.size()) - 2; d >= 0; --d) {
    base += (orow % rd.red_sizes[d]) * rd.red_st[d];
    orow /= rd.red_sizes[d];
  }
  return base;
}

// A sum across rows, in the plain loop's order: a partial sum over the innermost reduced dim,
// then those in order.
template <class T>
bool sum_across_rows(const ReduceDims& rd, const T* xp, T* op) {
  AcrossRows a;
  if (!across_rows_layout(rd, a)) return false;
  const int64_t ost = rd.kept_ost[a.kc];
  for_each_chunk(rd, a, [&](int64_t len, int64_t xoff, int64_t ooff) {
    T acc[AcrossRows::kChunk], part[AcrossRows::kChunk];
    std::fill(acc, acc + len, T(0));
    for (int64_t orow = 0; orow < a.outer_red; ++orow) {
      const T* base = xp + xoff + row_offset(rd, orow);
      std::fill(part, part + len, T(0));
      for (int64_t i = 0; i < a.inner; ++i) {
        const T* row = base + i * a.inner_st;
        for (int64_t k = 0; k < len; ++k) part[k] += row[k];
      }
      for (int64_t k = 0; k < len; ++k) acc[k] += part[k];
    }
    for (int64_t k = 0; k < len; ++k) op[ooff + k * ost] = acc[k];
  });
  return true;
}

// A max or min across rows (4096 x 1024 float32 over dim 0 on two Intel AVX-512 cores: 12 ms
// output by output, 0.53-0.55 this way with or without the indices; PyTorch's amax 0.58, its
// argmax 10.8): each output scans its elements in the plain loop's order with its rule, the
// first NaN or else the first of the extremal values, written as selects. With arg, their flat
// indices over the reduced dims too.
template <class T, bool is_max, bool with_index>
void scan_across_rows(const ReduceDims& rd, const AcrossRows& a, const T* xp, T* op, int64_t* ap) {
  constexpr T start =
      is_max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  const int64_t ost = rd.kept_ost[a.kc];
  for_each_chunk(rd, a, [&](int64_t len, int64_t xoff, int64_t ooff) {
    T acc[AcrossRows::kChunk];
    int64_t best[with_index ? AcrossRows::kChunk : 1];
    std::fill(acc, acc + len, start);
    if constexpr (with_index) std::fill(best, best + len, int64_t{0});
    for (int64_t orow = 0; orow < a.outer_red; ++orow) {
      const T* base = xp + xoff + row_offset(rd, orow);
      for (int64_t i = 0; i < a.inner; ++i) {
        const T* row = base + i * a.inner_st;
        const int64_t at = orow * a.inner + i;
        for (int64_t k = 0; k < len; ++k) {
          const T v = row[k], e = acc[k];
          // once e is NaN (the first NaN), nothing replaces it
          const bool take = e == e && (v != v || (is_max ? v > e : v < e));
          acc[k] = take ? v : e;
          if constexpr (with_index) best[k] = take ? at : best[k];
        }
      }
    }
    for (int64_t k = 0; k < len; ++k) {
      op[ooff + k * ost] = acc[k];
      if constexpr (with_index) ap[ooff + k * ost] = best[k];
    }
  });
}

template <class T>
bool extremum_across_rows(ReduceOp op, const ReduceDims& rd, const T* xp, T* out, int64_t* ap) {
  AcrossRows a;
  if (!across_rows_layout(rd, a)) return false;
  const bool is_max = op == ReduceOp::Max;
  if (ap) {
    is_max ? scan_across_rows<T, true, true>(rd, a, xp, out, ap)
           : scan_across_rows<T, false, true>(rd, a, xp, out, ap);
  } else {
    is_max ? scan_across_rows<T, true, false>(rd, a, xp, out, ap)
           : scan_across_rows<T, false, false>(rd, a, xp, out, ap);
  }
  return true;
}

// A contiguous row's first NaN, or else the first of its largest (smallest) elements: what the
// plain loop's scan finds, from whole vectors. The scan, a compare and a branch per element,
// took 2.0 ms over the rows of a 4096 x 1024 float32 matrix on two Intel AVX-512 cores (0.2x
// PyTorch's). Each lane keeps its extremum, the vector where it first took it and where it
// first saw a NaN; then the lanes are merged (the smallest index among those holding the
// extremum: -0 before +0 as in the scan) and the tail scanned.
template <class T>
struct RowExtremum {
  T value;
  int64_t index;
  bool nan;
};
template <class T, bool is_max>
RowExtremum<T> row_extremum(const T* row, int64_t n) {
  using V = simd::Vec<T>;
  using Index = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;  // as many lanes as V
  using I = simd::Vec<Index>;
  constexpr int64_t W = simd::kLanes<T>;
  constexpr T start =
      is_max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  V ext = simd::splat(start);
  I at = simd::splat(Index(0)), nan_at = simd::splat(Index(-1));
  int64_t i = 0;
  for (Index k = 0; i + W <= n; i += W, ++k) {
    const V v = simd::load(row + i);
    const I kv = simd::splat(k);
    const auto better = is_max ? v > ext : v < ext;
    ext = better ? v : ext;
    at = better ? kv : at;
    nan_at = ((v != v) & (nan_at < 0)) ? kv : nan_at;
  }
  int64_t first_nan = -1;
  T m = start;
  for (int l = 0; l < W; ++l) {
    if (nan_at[l] >= 0 && (first_nan < 0 || nan_at[l] * W + l < first_nan))
      first_nan = nan_at[l] * W + l;
    m = (is_max ? ext[l] > m : ext[l] < m) ? ext[l] : m;
  }
  if (first_nan >= 0) return {row[first_nan], first_nan, true};
  int64_t index = 0;
  if (m != start) {
    index = n;
    for (int l = 0; l < W; ++l)
      if (ext[l] == m) index = std::min<int64_t>(index, int64_t{at[l]} * W + l);
    m = row[index];
  }
  for (; i < n; ++i) {
    if (row[i] != row[i]) return {row[i], i, true};
    if (is_max ? row[i] > m : row[i] < m) {
      m = row[i];
      index = i;
    }
  }
  return {m, index, false};
}

// The same value without its index (max and min without a gradient): one vector pass of
// compares alone (4096 x 1024 float32: 0.53 ms with the indices, 0.41-0.44 without, as
// PyTorch's). A row with a NaN, or whose extremum is a zero (which of -0 and +0 comes first is
// the scan's answer), takes row_extremum.
template <class T, bool is_max>
T row_extreme_value(const T* row, int64_t n) {
  using V = simd::Vec<T>;
  constexpr int64_t W = simd::kLanes<T>;
  constexpr T start =
      is_max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  V ext = simd::splat(start);
  decltype(ext != ext) nans{};  // lanes that saw a NaN: all ones
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const V v = simd::load(row + i);
    ext = (is_max ? v > ext : v < ext) ? v : ext;
    nans |= v != v;
  }
  T m = start;
  bool nan = false;
  for (int l = 0; l < W; ++l) {
    nan |= nans[l] != 0;
    m = (is_max ? ext[l] > m : ext[l] < m) ? ext[l] : m;
  }
  for (; i < n; ++i) {
    nan |= row[i] != row[i];
    m = (is_max ? row[i] > m : row[i] < m) ? row[i] : m;
  }
  return nan || m == T(0) ? row_extremum<T, is_max>(row, n).value : m;
}

// The plain loop's running state for one output: the sum, or the extremum with where it was
// first met (row-major within the reduced dims) and whether it is a NaN.
template <class Acc>
struct Running {
  Acc acc;
  int64_t best = 0;
  bool seen_nan = false;
};

template <class T, class Acc>
void reduce_typed(ReduceOp op, const View& x, const View& out, const View& arg) {
  const ReduceDims rd = split_reduce_dims(x, out);
  if constexpr (std::is_same_v<T, Acc>) {
    const T* xs = static_cast<const T*>(x.data);
    T* os = static_cast<T*>(out.data);
    if (op == ReduceOp::Sum
            ? sum_across_rows<T>(rd, xs, os)
            : extremum_across_rows<T>(op, rd, xs, os, static_cast<int64_t*>(arg.data)))
      return;
  }
  const Shape &kept_sizes = rd.kept_sizes, &kept_xst = rd.kept_xst, &kept_ost = rd.kept_ost;
  const Shape &red_sizes = rd.red_sizes, &red_st = rd.red_st;
  const int64_t n_out = numel_of(kept_sizes), n_red = numel_of(red_sizes);
  const int nr = static_cast<int>(red_sizes.size());
  const int64_t inner = red_sizes[nr - 1], inner_st = red_st[nr - 1];
  const int64_t outer_red = n_red / (inner ? inner : 1);
  const T* xp = static_cast<const T*>(x.data);
  T* op_ = static_cast<T*>(out.data);
  int64_t* ap = static_cast<int64_t*>(arg.data);
  const bool is_sum = op == ReduceOp::Sum, is_max = op == ReduceOp::Max;
  const Running<Acc> start{is_sum ? Acc(0)
                                  : (is_max ? -std::numeric_limits<Acc>::infinity()
                                            : std::numeric_limits<Acc>::infinity())};
  // Where output o lies in x (its first element) and in out.
  const auto offsets = [&](int64_t o, int64_t& xoff, int64_t& ooff) {
    xoff = ooff = 0;
    for (int d = static_cast<int>(kept_sizes.size()) - 1; d >= 0; --d) {
      const int64_t i = o % kept_sizes[d];
      o /= kept_sizes[d];
      xoff += i * kept_xst[d];
      ooff += i * kept_ost[d];
    }
  };
  // Folds the reduced rows [r0, r1) of the output at xoff into st, in order.
  const auto fold_rows = [&](int64_t xoff, int64_t r0, int64_t r1, Running<Acc>& st) {
    for (int64_t orow = r0; orow < r1; ++orow) {
      int64_t base = xoff, q = orow;
      for (int d = nr - 2; d >= 0; --d) {
        base += (q % red_sizes[d]) * red_st[d];
        q /= red_sizes[d];
      }
      const T* row = xp + base;
      if (is_sum) {
        Acc s = 0;
        if (inner_st == 1) {
          // Independent lanes so the compiler vectorizes; a fixed order, so still deterministic.
          constexpr int64_t kLanes = 16;
          Acc lane[kLanes] = {};
          int64_t i = 0;
          for (; i + kLanes <= inner; i += kLanes)
            for (int64_t l = 0; l < kLanes; ++l) lane[l] += static_cast<Acc>(row[i + l]);
          for (int64_t l = 0; l < kLanes; ++l) s += lane[l];
          for (; i < inner; ++i) s += static_cast<Acc>(row[i]);
        } else {
          for (int64_t i = 0; i < inner; ++i) s += static_cast<Acc>(row[i * inner_st]);
        }
        st.acc += s;
      } else if (st.seen_nan) {
        break;
      } else if constexpr (std::is_same_v<T, Acc>) {
        if (inner_st == 1) {
          RowExtremum<T> e{};
          if (ap) {
            e = is_max ? row_extremum<T, true>(row, inner) : row_extremum<T, false>(row, inner);
          } else {  // the value alone; a NaN's is NaN, whatever its index
            e.value = is_max ? row_extreme_value<T, true>(row, inner)
                             : row_extreme_value<T, false>(row, inner);
            e.nan = e.value != e.value;
          }
          if (e.nan || (is_max ? e.value > st.acc : e.value < st.acc)) {
            st.acc = e.value;
            st.best = orow * inner + e.index;
            st.seen_nan = e.nan;
          }
          continue;
        }
      }
      if (!is_sum) {
        for (int64_t i = 0; i < inner; ++i) {
          Acc v = static_cast<Acc>(row[i * inner_st]);
          if (st.seen_nan) break;
          if (v != v) {  // NaN wins, as in NumPy and PyTorch
            st.acc = v;
            st.best = orow * inner + i;
            st.seen_nan = true;
          } else if (is_max ? v > st.acc : v < st.acc) {
            st.acc = v;
            st.best = orow * inner + i;
          }
        }
      }
    }
  };
  const auto finish = [&](int64_t ooff, const Running<Acc>& st) {
    op_[ooff] = static_cast<T>(st.acc);
    if (ap) ap[ooff] = st.best;
  };
  constexpr int64_t kParallelMin = 32768;  // elements, below which one thread does it all
  const int64_t threads = get_num_threads();
  if (n_out < threads && outer_red >= 2 * threads && n_out * n_red > kParallelMin) {
    // Fewer outputs than threads (a full reduction: a loss summed over a batch): each output's
    // rows are split among the threads, and their results combined in the loop's order. A sum
    // keeps each row's sum and adds them in order, as the loop does (0 + s is s); an extremum
    // combines runs of rows, the first strictly better run or the first NaN winning, which
    // gives the loop's value and index. So the bits are the loop's, on any thread count. (sum
    // and max of a 4096 x 1024 float32 matrix on two Intel AVX-512 cores: 0.62-0.66 ms on one
    // thread, 0.37-0.38 so; PyTorch 0.44-0.51.)
    for (int64_t o = 0; o < n_out; ++o) {
      int64_t xoff, ooff;
      offsets(o, xoff, ooff);
      Running<Acc> st = start;
      if (is_sum) {
        std::vector<Acc> sums(static_cast<size_t>(outer_red));
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < outer_red; ++r) {
          Running<Acc> row = start;
          fold_rows(xoff, r, r + 1, row);
          sums[static_cast<size_t>(r)] = row.acc;
        }
        for (const Acc s : sums) st.acc += s;
      } else {
        std::vector<Running<Acc>> runs(static_cast<size_t>(threads), start);
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < threads; ++t)
          fold_rows(xoff, outer_red * t / threads, outer_red * (t + 1) / threads,
                    runs[static_cast<size_t>(t)]);
        for (const Running<Acc>& r : runs) {
          if (st.seen_nan) break;
          if (r.seen_nan || (is_max ? r.acc > st.acc : r.acc < st.acc)) st = r;
        }
      }
      finish(ooff, st);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (n_out * n_red > kParallelMin && n_out > 1)
  for (int64_t o = 0; o < n_out; ++o) {
    int64_t xoff, ooff;
    offsets(o, xoff, ooff);
    Running<Acc> st = start;
    fold_rows(xoff, 0, outer_red, st);
    finish(ooff, st);
  }
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const View& x, const View& out, const View& arg) {
  dispatch(x.dtype, [&](auto t) {
    using T = decltype(t);
    reduce_typed<T, reduce_acc_t<T>>(op, x, out, arg);
  });
}

}  // namespace tg::cpu
