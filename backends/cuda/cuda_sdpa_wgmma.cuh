// What the tensor-core SDPA's kernels on warpgroup products (cuda_sdpa_wgmma_forward.cu,
// cuda_sdpa_wgmma_backward.cu; sm_90a) share: a block of two warpgroups, and the shared tiles'
// alignment.
#pragma once
#include <cstdint>
#include <string>

#include "backends/cuda/cuda_sdpa_mma_launch.cuh"
#include "backends/cuda/cuda_wgmma.cuh"

namespace tg::cuda::mma_sdpa::wg {

constexpr int kGroupThreads = 128;  // a warpgroup
constexpr int kGroupRows = 64;      // the rows (query rows, or keys) a group's products take
constexpr int kGroups = 2;          // groups a block
constexpr int kThreads = kGroups * kGroupThreads;
constexpr int kBlockRows = kGroups * kGroupRows;

// Whether a call of head width `width` (max(Dqk, Dv)) runs on them (tg::cuda_sdpa_wgmma()):
// "on", or "auto" above 32. Their tiles are 64 wide at least, so at 32 they multiply padding
// for half their products, where the mma.sync kernels have tiles of 32. bf16 on an H100,
// medians of 300 calls in each of three runs, every pass on warpgroup products against every
// pass on mma.sync: forward+backward at the reference model's step shape (B 16, Hq 8, Hk 2,
// S 128, D 32) 0.057-0.062 ms against 0.049-0.055 causal, 0.050-0.061 against 0.046-0.057 not
// (each run's own pair 6-14% apart); the forward alone 0.020-0.022 against 0.018-0.021. At
// D 64 they win on as small a problem: B 4, H 8, S 512, causal 0.065-0.068 against 0.077-0.080.
inline bool runs_wgmma(int64_t width) {
  const std::string mode = cuda_sdpa_wgmma();
  return mode == "on" || (mode == "auto" && width > 32);
}

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
