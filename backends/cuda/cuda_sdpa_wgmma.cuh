// What the tensor-core SDPA's kernels on warpgroup products (cuda_sdpa_wgmma_forward.cu,
// cuda_sdpa_wgmma_backward.cu; sm_90a) share: a block of two warpgroups, the shared tiles'
// alignment, and the copy pipeline's step.
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

// Which group of the block this thread is in, and which warp of its group.
__device__ __forceinline__ int group() { return static_cast<int>(threadIdx.x) / kGroupThreads; }
__device__ __forceinline__ int warp_in_group() { return static_cast<int>(threadIdx.x / 32) % 4; }

// The copy pipeline's step at tile `it` of n_tiles, as next_tile (cuda_sdpa_mma_tiles.cuh), with
// this thread's copies made visible to the products (they read through the async proxy) before
// the barrier.
template <class I, class Load>
__device__ __forceinline__ void next_tile(I it, I n_tiles, Load&& load) {
  if (it + 1 < n_tiles) {
    load(it + 1, static_cast<int>((it + 1) & 1));
    mma::cp_async_commit();
    mma::cp_async_wait<1>();
  } else {
    mma::cp_async_wait<0>();
  }
  wgmma::fence_async_shared();
  __syncthreads();
}

}  // namespace tg::cuda::mma_sdpa::wg
