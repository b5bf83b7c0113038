// The tensor-core SDPA's backward kernel file, compiled for the CPU emulator (sdpa_mma.h).
#include "tests/cuda_emulator/cuda_shim.h"

namespace tg::cuda::mma_sdpa {
namespace {
// The kernels' dynamic shared memory (their `extern __shared__` array), room for the
// largest that compiles (launches ask for at most shared_optin()).
alignas(16) unsigned char smem[cuda_emulator::kEmulatedSharedArray];
const bool registered = cuda_emulator::register_shared(smem, sizeof smem);
}  // namespace
}  // namespace tg::cuda::mma_sdpa

#include "backends/cuda/cuda_sdpa_mma_backward.cu"
#include "tests/cuda_emulator/sdpa_mma.h"

namespace tg::cuda_emulator {

bool sdpa_mma_backward(const SdpaParams& p, const View& dout, const SdpaGradViews& g) {
  using namespace cuda::mma_sdpa;
  if (p.q.dtype == kBFloat16) return backward_typed<__nv_bfloat16>(0, p, dout, g);
  if (p.q.dtype == kFloat16) return backward_typed<__half>(0, p, dout, g);
  if (p.q.dtype == kFloat32) return backward_typed<float>(0, p, dout, g);
  return false;
}

}  // namespace tg::cuda_emulator
