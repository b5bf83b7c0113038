// The tensor-core SDPA kernels (backends/cuda/cuda_sdpa_mma_forward.cu, _backward.cu) run on the
// CPU emulator (runtime.h), on host memory: the same arguments as the CUDA backend's
// sdpa_mma_forward / sdpa_mma_backward, q's dtype picking bfloat16, float16 or float32 (as
// 3xTF32). False where the kernels do not apply (head dims above 256). Rows per warp follow
// tg::cuda_sdpa_warp_rows(), as on a GPU.
#pragma once
#include <cstdint>

#include "backends/sdpa_params.h"

namespace tg::cuda_emulator {

bool sdpa_mma_forward(const SdpaParams& p);
bool sdpa_mma_backward(const SdpaParams& p, const View& dout, const SdpaGradViews& g);

// cuda_mma.cuh's split of a float32 into 3xTF32's halves (the bits of hi and lo), as the kernels
// above compute it.
struct Tf32Halves {
  uint32_t hi, lo;
};
Tf32Halves split_tf32(float x);

}  // namespace tg::cuda_emulator
