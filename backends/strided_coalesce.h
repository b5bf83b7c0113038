// Strided index spaces made as small as possible: dims of size 1 dropped, and neighbours
// merged wherever every operand steps through them as one (stride[d] == stride[d+1] *
// size[d+1]). Shared by the CPU loops and the CUDA kernels' offset calculators.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/shape.h"

namespace tg {

// A view's dims in its memory order: by stride, largest first, ties in their order.
inline std::vector<size_t> memory_order(const Shape& strides) {
  std::vector<size_t> order(strides.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  return order;
}

template <int N>
struct Loop {
  Shape sizes;                   // coalesced, innermost last
  std::array<Shape, N> strides;  // per operand
  int64_t inner() const { return sizes.empty() ? 1 : sizes.back(); }
};

template <int N>
Loop<N> coalesce(const Shape& sizes, const std::array<const Shape*, N>& strides) {
  Loop<N> l;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool merge = !l.sizes.empty();
    for (int k = 0; k < N && merge; ++k) merge = l.strides[k].back() == (*strides[k])[d] * sizes[d];
    if (merge) {
      l.sizes.back() *= sizes[d];
      for (int k = 0; k < N; ++k) l.strides[k].back() = (*strides[k])[d];
    } else {
      l.sizes.push_back(sizes[d]);
      for (int k = 0; k < N; ++k) l.strides[k].push_back((*strides[k])[d]);
    }
  }
  if (l.sizes.empty()) {
    l.sizes.push_back(1);
    for (int k = 0; k < N; ++k) l.strides[k].push_back(0);
  }
  return l;
}

}  // namespace tg
