// Where each lane of a warp points ldmatrix, and where the elements of an mma.m16n8k16
// accumulator sit, for the tensor-core SDPA kernels (cuda_sdpa_mma_forward.cu,
// cuda_sdpa_mma_backward.cu). Plain host/device arithmetic, so that a CPU test
// (tests/test_mma_layout.cpp) runs the same formulas through an emulation of ldmatrix and mma and
// checks the products without a GPU. Fragment layouts as in cuda_mma.cuh;
// g = lane / 4, t = lane % 4.
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

// ldmatrix.x4.trans of A's k-step kk from A^T stored row-major (k rows, A's 16 rows as its
// columns): the same a0..a3 as a_address gives from A itself.
TG_HD constexpr RowCol at_address(int lane, int kk) {
  return {kk * 16 + 8 * (lane / 16) + lane % 8, 8 * ((lane / 8) % 2)};
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

// float32 operands split into TF32 halves (mma.m16n8k8 .tf32, "Matrix fragments for
// mma.m16n8k8" with .tf32): A (16 x 8) a0 row g, column t; a1 row g + 8; a2, a3 the same rows
// at column t + 4. B (8 x 8, k x n) b0 row (k) t of column (n) g, b1 row t + 4. C as above.
// ldmatrix reads 32-bit values as pairs of 16-bit ones: an 8 x 8 tile of b16 is 8 rows of four
// floats, and lane L receives row L / 4, float L % 4 of it, which is the (g, t) element these
// fragments want. Columns below are in floats.

// ldmatrix.x4 of A's k-step kk (16 x 8 of a row-major 16-row float tile): tiles (rows 0-7,
// floats 0-3), (rows 8-15, 0-3), (rows 0-7, 4-7), (rows 8-15, 4-7) in a0..a3 order.
TG_HD constexpr RowCol a_address_tf32(int lane, int kk) {
  return {lane % 8 + 8 * ((lane / 8) % 2), kk * 8 + 4 * (lane / 16)};
}

// ldmatrix.x4 of B = M^T for C = A M^T (M row-major, its rows the columns of C): b0, b1 of
// column tile 2 np, then b0, b1 of column tile 2 np + 1, at k-step kk.
TG_HD constexpr RowCol bt_address_tf32(int lane, int np, int kk) {
  return {np * 16 + lane % 8 + 8 * (lane / 16), kk * 8 + 4 * ((lane / 8) % 2)};
}

// C tile nt (8 columns) as the A fragment of k-step nt of the next product, with no shuffle:
// the lane holds columns 2t, 2t + 1 of rows g, g + 8 (c0..c3), which it passes as k slots t
// (a0, a1) and t + 4 (a2, a3). So k slot t of that step stands for column 2t and slot t + 4
// for column 2t + 1; the B fragment must follow the same order (pv_b_row_tf32).
TG_HD constexpr int a_slot_tf32(int e) { return e == 1 ? 2 : e == 2 ? 1 : e; }

// Row of M (k) that register `half` (b0 or b1) of this lane takes at k-step kk of C = P M
// when P came from a C tile as above; its column is tile dt's column g (8 dt + lane / 4).
TG_HD constexpr int pv_b_row_tf32(int lane, int kk, int half) {
  return kk * 8 + 2 * (lane % 4) + half;
}

}  // namespace tg::cuda::mma
