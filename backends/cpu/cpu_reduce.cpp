// Sum / max / min over any set of dims. Each output element is reduced by one thread in a
// fixed order, so the result is bitwise the same for every thread count.
#include <limits>

#include "backends/cpu/cpu_backend.h"
#include "backends/reduce_dims.h"

namespace tg::cpu {
namespace {

template <class T, class Acc>
void reduce_typed(ReduceOp op, const View& x, const View& out, const View& arg) {
  const ReduceDims rd = split_reduce_dims(x, out);
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
#pragma omp parallel for schedule(static) if (n_out * n_red > 32768 && n_out > 1)
  for (int64_t o = 0; o < n_out; ++o) {
    int64_t xoff = 0, ooff = 0, r = o;
    for (int d = static_cast<int>(kept_sizes.size()) - 1; d >= 0; --d) {
      int64_t i = r % kept_sizes[d];
      r /= kept_sizes[d];
      xoff += i * kept_xst[d];
      ooff += i * kept_ost[d];
    }
    Acc acc = is_sum ? Acc(0)
                     : (is_max ? -std::numeric_limits<Acc>::infinity()
                               : std::numeric_limits<Acc>::infinity());
    int64_t best = 0;
    bool seen_nan = false;
    for (int64_t orow = 0; orow < outer_red; ++orow) {
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
        acc += s;
      } else {
        for (int64_t i = 0; i < inner; ++i) {
          Acc v = static_cast<Acc>(row[i * inner_st]);
          if (seen_nan) break;
          if (v != v) {  // NaN wins, as in NumPy and PyTorch
            acc = v;
            best = orow * inner + i;
            seen_nan = true;
          } else if (is_max ? v > acc : v < acc) {
            acc = v;
            best = orow * inner + i;
          }
        }
      }
    }
    op_[ooff] = static_cast<T>(acc);
    if (ap) ap[ooff] = best;
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
