// The tensor-core SDPA's backward passes on warpgroup products (cuda_sdpa_wgmma_backward.cu),
// compiled for the CPU emulator: sdpa_mma_backward (sdpa_mma.h) runs them where a GPU of compute
// capability 9.0 would.
#include "tests/cuda_emulator/cuda_shim.h"

namespace tg::cuda::mma_sdpa {
namespace {
// The kernels' dynamic shared memory, this file's own array as each kernel file has.
alignas(1024) unsigned char smem[cuda_emulator::kEmulatedSharedArray];
const bool registered = cuda_emulator::register_shared(smem, sizeof smem);
}  // namespace
}  // namespace tg::cuda::mma_sdpa

#include "backends/cuda/cuda_sdpa_wgmma_backward.cu"
