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

// The same index space in square tiles, for an output written along its innermost dim while
// some input reads that dim across its rows and reads another dim, d, along them (an operand
// transposed: contiguous() of a transpose, a + b^T). The runs of for_each_run then take one
// element from each cache line and page of that input; within a tile its lines are used whole
// by the tile's next rows while they are in L1 (a 1024 x 4096 float32 copy on two Intel
// AVX-512 cores: 14-16 ms in runs, 0.3-0.4x PyTorch's; 3.7-3.9 in tiles of 16, 3.1-3.3 of 32,
// 2.6-2.9 of 64, 2.6 of 128). Calls body(rows, cols, offs, row_strides, col_strides) for each
// tile: its element (i, j), i along d and j along the innermost dim, is at offs[k] + i *
// row_strides[k] + j * col_strides[k] of operand k. Returns false, calling nothing, where the
// layout is not such (or the tiles would be partial ones only): the caller runs for_each_run.
template <int N, class Body>
bool for_each_transposed_tile(const Shape& sizes, const std::array<const Shape*, N>& strides,
                              Body&& body) {
  constexpr int64_t kTile = 64;
  const Loop<N> l = memory_ordered<N>(sizes, strides);
  const int nd = static_cast<int>(l.sizes.size());
  if (nd < 2 || l.strides[0][nd - 1] != 1) return false;
  int d = -1;  // the innermost outer dim along which a transposed input is contiguous
  for (int k = 1; k < N && d < 0; ++k) {
    const int64_t s = l.strides[k][nd - 1];
    if (s == 0 || s == 1) continue;
    for (int e = nd - 2; e >= 0 && d < 0; --e)
      if (l.strides[k][e] == 1) d = e;
  }
  if (d < 0) return false;
  const int64_t n = l.sizes[nd - 1], m = l.sizes[d];
  if (n < kTile || m < kTile) return false;
  const int64_t tn = (n + kTile - 1) / kTile, tm = (m + kTile - 1) / kTile;
  const int64_t outer = numel_of(l.sizes) / (n * m), tasks = outer * tm * tn;
  std::array<int64_t, N> rs, cs;
  for (int k = 0; k < N; ++k) {
    rs[k] = l.strides[k][d];
    cs[k] = l.strides[k][nd - 1];
  }
#pragma omp parallel for schedule(static) if (outer * n * m > 32768)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t i0 = t / tn % tm * kTile, j0 = t % tn * kTile;
    std::array<int64_t, N> offs{};
    int64_t r = t / (tn * tm);
    for (int e = nd - 2; e >= 0; --e) {
      if (e == d) continue;
      const int64_t i = r % l.sizes[e];
      r /= l.sizes[e];
      for (int k = 0; k < N; ++k) offs[k] += i * l.strides[k][e];
    }
    for (int k = 0; k < N; ++k) offs[k] += i0 * rs[k] + j0 * cs[k];
    body(std::min(kTile, m - i0), std::min(kTile, n - j0), offs, rs, cs);
  }
  return true;
}

}  // namespace tg::cpu
