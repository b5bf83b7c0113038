// Where each lane of a warp points ldmatrix, and where the elements of an mma.m16n8k16
// accumulator sit, for the tensor-core SDPA kernels (cuda_sdpa_mma.cu). Plain host/device
// arithmetic, so that a CPU test (tests/test_mma_layout.cpp) runs the same formulas through an
// emulation of ldmatrix and mma and checks the products without a GPU. Fragment layouts as in
// cuda_mma.cuh; g = lane / 4, t = lane % 4.
#pragma once
#include "core/philox.h"  // TG_HD

namespace tg::cuda::mma {

// A row of a shared-memory tile and the column its 8 values start at.
struct RowCol {
  int row, col;
};

// ldmatrix.x4 of A's k-step kk (16 x 16 of a row-major 16-row tile): tiles (rows 0-7, 8-15) x
// (columns 0-7, 8-15) in a0..a3 order.
TG_HD constexpr RowCol a_address(int lane, int kk) {
  return {lane % 16, kk * 16 + (lane / 16) * 8};
}

// ldmatrix.x4 (no transpose) of B = M^T for C = A M^T, M row-major with its rows the
// columns of C: b0, b1 of column tile 2 np, then b0, b1 of column tile 2 np + 1, at k-step kk.
TG_HD constexpr RowCol bt_address(int lane, int np, int kk) {
  return {np * 16 + lane % 8 + 8 * (lane / 16), kk * 16 + 8 * ((lane / 8) % 2)};
}

// ldmatrix.x4.trans of B = M for C = P M, M row-major (k rows): b0, b1 of column tile 2 dp,
// then of 2 dp + 1, at k-step kk.
TG_HD constexpr RowCol b_address(int lane, int kk, int dp) {
  return {kk * 16 + lane % 8 + 8 * ((lane / 8) % 2), dp * 16 + 8 * (lane / 16)};
}

// Element e (0-3) of a lane's accumulator for column tile nt: its row and column.
TG_HD constexpr int c_row(int lane, int e) { return lane / 4 + 8 * (e / 2); }
TG_HD constexpr int c_col(int lane, int nt, int e) { return nt * 8 + 2 * (lane % 4) + (e % 2); }

// C tile nt as A fragments of the next product: its values (c0, c1) become register
// a_slot(nt, 0) of k-step nt / 2, (c2, c3) register a_slot(nt, 1).
TG_HD constexpr int a_slot(int nt, int half) { return (nt % 2) * 2 + half; }

}  // namespace tg::cuda::mma
