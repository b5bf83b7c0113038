// The tensor-core SDPA kernels (backends/cuda/cuda_sdpa_mma_forward.cu, _backward.cu) run on the
// CPU emulator (runtime.h), on host memory: the same arguments as the CUDA backend's
// sdpa_mma_forward / sdpa_mma_backward, q's dtype picking bfloat16, float16 or float32 (as
// 3xTF32). False where the kernels do not apply (head dims above 256). Rows per warp follow
// tg::cuda_sdpa_warp_rows(), as on a GPU.
#pragma once
#include "backends/sdpa_params.h"

namespace tg::cuda_emulator {

bool sdpa_mma_forward(const SdpaParams& p);
bool sdpa_mma_backward(const SdpaParams& p, const View& dout, const SdpaGradViews& g);

}  // namespace tg::cuda_emulator
