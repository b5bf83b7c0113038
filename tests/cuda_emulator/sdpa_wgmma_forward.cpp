// The tensor-core SDPA's forward on warpgroup products (cuda_sdpa_wgmma_forward.cu), compiled
// for the CPU emulator: sdpa_mma_forward (sdpa_mma.h) runs it where a GPU of compute capability
// 9.0 would, the emulated device being an H100 (wgmma_device, sdpa_mma_forward.cpp).
#include "tests/cuda_emulator/cuda_shim.h"

namespace tg::cuda::mma_sdpa {
namespace {
// The kernel's dynamic shared memory, its own array as each kernel file has.
alignas(1024) unsigned char smem[cuda_emulator::kEmulatedSharedArray];
const bool registered = cuda_emulator::register_shared(smem, sizeof smem);
}  // namespace
}  // namespace tg::cuda::mma_sdpa

#include "backends/cuda/cuda_sdpa_wgmma_forward.cu"
