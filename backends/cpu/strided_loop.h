// The loop every CPU elementwise kernel runs: an N-d index space over several operands with
// their own strides, put in the output's memory order and coalesced to as few dims as
// possible, the innermost dim run as a plain (vectorizable) loop, and the rest split into
// OpenMP tasks. Each element is written by one task, so results are bitwise the same for any
// thread count.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "backends/strided_coalesce.h"

namespace tg::cpu {

// The index space with its dims in the memory order of the first operand (the output): its
// strides largest first, ties in their order (as laid out already, the common case, it is
// coalesced directly). A transposed output is then written in
// sequence, and a transposed input to it read in sequence too; elementwise results do not
// depend on the order.
template <int N>
Loop<N> memory_ordered(const Shape& sizes, const std::array<const Shape*, N>& strides) {
  const std::vector<size_t> order = memory_order(*strides[0]);
  if (std::is_sorted(order.begin(), order.end())) return coalesce<N>(sizes, strides);
  Shape s;
  std::array<Shape, N> st;
  std::array<const Shape*, N> st_ptr;
  for (size_t d : order) {
    s.push_back(sizes[d]);
    for (int k = 0; k < N; ++k) st[k].push_back((*strides[k])[d]);
  }
  for (int k = 0; k < N; ++k) st_ptr[k] = &st[k];
  return coalesce<N>(s, st_ptr);
}

// Calls body(len, offs, inner_strides) for runs of the innermost dim; offs are element
// offsets of each operand at the run's start.
template <int N, class Body>
void for_each_run(const Shape& sizes, const std::array<const Shape*, N>& strides, Body&& body) {
  Loop<N> l = memory_ordered<N>(sizes, strides);
  const int64_t inner = l.inner();
  const int64_t total = numel_of(l.sizes);
  if (total == 0) return;
  const int64_t rows = total / inner;
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  const int64_t tasks = rows * chunks;
  const int nd = static_cast<int>(l.sizes.size());
  std::array<int64_t, N> inner_st;
  for (int k = 0; k < N; ++k) inner_st[k] = l.strides[k][nd - 1];
#pragma omp parallel for schedule(static) if (total > 32768 && tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t row = t / chunks, c = t % chunks;
    std::array<int64_t, N> offs{};
    int64_t r = row;
    for (int d = nd - 2; d >= 0; --d) {
      int64_t i = r % l.sizes[d];
      r /= l.sizes[d];
      for (int k = 0; k < N; ++k) offs[k] += i * l.strides[k][d];
    }
    int64_t start = c * kChunk, len = inner - start < kChunk ? inner - start : kChunk;
    for (int k = 0; k < N; ++k) offs[k] += start * inner_st[k];
    body(len, offs, inner_st);
  }
}

}  // namespace tg::cpu
