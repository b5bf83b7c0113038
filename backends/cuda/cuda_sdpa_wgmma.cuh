// What the tensor-core SDPA's kernels on warpgroup products (cuda_sdpa_wgmma_forward.cu,
// cuda_sdpa_wgmma_backward.cu; sm_90a) share: a block of two warpgroups, and the shared tiles'
// alignment.
#pragma once
#include <cstdint>

#include "backends/cuda/cuda_sdpa_mma_launch.cuh"
#include "backends/cuda/cuda_wgmma.cuh"

namespace tg::cuda::mma_sdpa::wg {

constexpr int kGroupThreads = 128;  // a warpgroup
constexpr int kGroupRows = 64;      // the rows (query rows, or keys) a group's products take
constexpr int kGroups = 2;          // groups a block
constexpr int kThreads = kGroups * kGroupThreads;
constexpr int kBlockRows = kGroups * kGroupRows;

// The tiles' start in the dynamic shared array: the swizzle is the hardware's on address bits,
// so they start on its period (wgmma::kAtomBytes, which each kernel's shared memory adds)
// whatever the array's own alignment.
__device__ __forceinline__ unsigned char* aligned_tiles(unsigned char* smem) {
  const uint32_t at = wgmma::shared_address(smem);
  return smem + (wgmma::kAtomBytes - at % wgmma::kAtomBytes) % wgmma::kAtomBytes;
}

// Rows row0 .. row0 + 15 (a warp's) of a Swizzled tile of kRows rows as register A operands of
// kD / 16 k-steps, in mma.m16n8k16's A layout: ldmatrix, each lane pointing at one 16-byte chunk.
template <class S, int kRows, int kD>
__device__ __forceinline__ void load_a_operands(S* tile, int row0, uint32_t (&af)[kD / 16][4]) {
  const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const mma::RowCol at = mma::a_address(lane, kk);
    mma::ldmatrix_x4(af[kk], Swizzled<S, kRows>::at(tile, row0 + at.row, at.col / 8));
  }
}

// A group's 64 rows of a block's Swizzled tile (Q or dO, kRows rows of kD values) as the A
// operand of a product with a K-major B (S = Q K^T, dP = dO V^T). At head dim 64 they are held
// in registers (16 a tile): a 64 x 64 product with both operands in shared memory reads 4 KB
// in its 32 clocks, all of shared memory's 128 bytes a clock (64 x 128: 6 KB in 64 clocks,
// three quarters), and with A in registers half of that. Above 64 they are read from the tile
// (32 more registers would not fit beside the kernels' others).
template <class S, int kRows, int kD>
struct RowOperand {
  static constexpr bool kRegisters = kD <= 64;
  uint32_t at;  // the tile's shared address
  int row0;     // the group's first row in it
  uint32_t f[kRegisters ? kD / 16 : 1][4];
  // Once the tile's copies are visible to the group.
  __device__ __forceinline__ RowOperand(S* tile, int group, int warp)
      : at(wgmma::shared_address(tile)), row0(kGroupRows * group) {
    if constexpr (kRegisters) load_a_operands<S, kRows, kD>(tile, row0 + 16 * warp, f);
  }
  // d = A B^T, B the kN rows of kD values at shared address b_tile (Swizzled); not committed.
  template <int kN>
  __device__ __forceinline__ void times_transposed(float (&d)[kN / 8][4], uint32_t b_tile) const {
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint64_t b = wgmma::k_major(b_tile, kN, 0, kk);
      if constexpr (kRegisters) {
        wgmma::product_rs_kmajor<S, kN>(d, f[kk], b, kk > 0);
      } else {
        wgmma::product_ss<S, kN>(d, wgmma::k_major(at, kRows, row0, kk), b, kk > 0);
      }
    }
  }
};

// A block's query rows of Q or dO (`rows`: its (b, h) slice, row stride st[2]) into a Swizzled
// tile of kBlockRows rows, zeros past the sequence's rows and column `width`, by the 256 threads
// of the block's two groups that multiply.
template <class S, int kD>
__device__ __forceinline__ void load_block_rows(S* dst, const S* rows, const int64_t* st,
                                                const QueryBlock& qb, int64_t width, bool vec) {
  load_rows<S, kD, kBlockRows, kThreads, Swizzled<S, kBlockRows>>(
      dst, rows, st, qb.sq.q0 + qb.i0, qb.sq.q0 + qb.sq.rows_q, width, nullptr, vec);
}

// Which group of the block this thread is in, and which warp of its group.
__device__ __forceinline__ int group() { return static_cast<int>(threadIdx.x) / kGroupThreads; }
__device__ __forceinline__ int warp_in_group() { return static_cast<int>(threadIdx.x / 32) % 4; }

}  // namespace tg::cuda::mma_sdpa::wg
