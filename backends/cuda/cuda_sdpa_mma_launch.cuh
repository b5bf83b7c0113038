// The host side the tensor-core SDPA's two kernel files share (cuda_sdpa_mma.cu has the
// overview): which rows allow 16-byte copies, the shared memory a block may have, the launch,
// the slices per warp, and the per-dtype entry points each kernel file instantiates.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "backends/cuda/cuda_sdpa_mma_tiles.cuh"
#include "backends/cuda_api.h"

namespace tg::cuda::mma_sdpa {

// Which of q, k, v and dout (absent in the forward: View{}) allow 16-byte copies.
Vectorized vectorized(const SdpaParams& p, const View& dout);
// The shared memory a block may have on the device; 0 before compute capability 8.0, where
// mma.sync on 16-bit inputs does not run.
int shared_optin(int device);

template <class K, class S>
void launch(K kernel, int64_t blocks, size_t smem, cudaStream_t s, const Args<float, S>& a,
            const Vectorized& vec, const char* name) {
  TG_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)));
  kernel<<<static_cast<unsigned>(blocks), kBlockThreads, smem, s>>>(a, vec);
  check_launch(name);
}

// Calls f(std::integral_constant<int, kM>) with the forward's and the dQ pass's 16-row slices
// per warp: two when cuda_sdpa_warp_rows() is 32 and the head dims allow (up to 128), else one.
template <int kD, class F>
void with_slices(F&& f) {
  if constexpr (kD <= 128) {
    if (cuda_sdpa_warp_rows() == 32) return f(std::integral_constant<int, 2>{});
  }
  f(std::integral_constant<int, 1>{});
}

// The forward and the backward of S's kernels (bfloat16, float16, float for 3xTF32): false when
// the head dims or the shared memory rule them out (nothing was run).
template <class S>
bool forward_typed(int device, const SdpaParams& p);
template <class S>
bool backward_typed(int device, const SdpaParams& p, const View& dout, const SdpaGradViews& g);

}  // namespace tg::cuda::mma_sdpa
