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

// Which group of the block this thread is in, and which warp of its group.
__device__ __forceinline__ int group() { return static_cast<int>(threadIdx.x) / kGroupThreads; }
__device__ __forceinline__ int warp_in_group() { return static_cast<int>(threadIdx.x / 32) % 4; }

}  // namespace tg::cuda::mma_sdpa::wg
