// How a reduction splits x's dims: those kept (sizes, x strides, out strides) and those
// reduced (out has size 1 there, x does not). Shared by the CPU and CUDA reduce kernels.
#pragma once
#include <type_traits>

#include "backends/backend.h"

namespace tg {

// The type a reduction over T accumulates in: float for float32 and the 16-bit floats, double
// for float64 and for int64 and bool (exact counts up to 2^53).
template <class T>
using reduce_acc_t = std::conditional_t<std::is_same_v<compute_t<T>, float>, float, double>;

struct ReduceDims {
  Shape kept_sizes, kept_xst, kept_ost;
  Shape red_sizes, red_st;  // never empty: a reduction over size-1 dims only is one element
};

inline ReduceDims split_reduce_dims(const View& x, const View& out) {
  ReduceDims r;
  for (size_t d = 0; d < x.sizes.size(); ++d) {
    if (out.sizes[d] == 1 && x.sizes[d] != 1) {
      r.red_sizes.push_back(x.sizes[d]);
      r.red_st.push_back(x.strides[d]);
    } else {
      r.kept_sizes.push_back(x.sizes[d]);
      r.kept_xst.push_back(x.strides[d]);
      r.kept_ost.push_back(out.strides[d]);
    }
  }
  if (r.red_sizes.empty()) {
    r.red_sizes.push_back(1);
    r.red_st.push_back(0);
  }
  return r;
}

}  // namespace tg
