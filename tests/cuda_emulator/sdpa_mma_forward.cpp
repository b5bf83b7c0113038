// The tensor-core SDPA's forward kernel file, compiled for the CPU emulator (sdpa_mma.h).
#include "tests/cuda_emulator/cuda_shim.h"

namespace tg::cuda::mma_sdpa {
namespace {
// The kernel's dynamic shared memory (its `extern __shared__` array), room for the
// largest that compiles (launches ask for at most shared_optin()).
alignas(16) unsigned char smem[cuda_emulator::kEmulatedSharedArray];
const bool registered = cuda_emulator::register_shared(smem, sizeof smem);
}  // namespace
// The emulated device's limit, as the real file's shared_optin reads it from an H100.
int shared_optin(int) { return cuda_emulator::kSharedOptin; }
int multiprocessors(int) { return cuda_emulator::kMultiprocessors; }
bool wgmma_device(int) { return true; }  // an H100
int blocks_fit(int, size_t smem) {
  return static_cast<int>(cuda_emulator::kSharedPerMultiprocessor /
                          (smem + cuda_emulator::kSharedReserved));
}
}  // namespace tg::cuda::mma_sdpa

#include "backends/cuda/cuda_sdpa_mma_forward.cu"
#include "tests/cuda_emulator/sdpa_mma.h"

namespace tg::cuda_emulator {

bool sdpa_mma_forward(const SdpaParams& p) {
  using namespace cuda::mma_sdpa;
  if (p.q.dtype == kBFloat16) return forward_typed<__nv_bfloat16>(0, p);
  if (p.q.dtype == kFloat16) return forward_typed<__half>(0, p);
  if (p.q.dtype == kFloat32) return forward_typed<float>(0, p);
  return false;
}

Tf32Halves split_tf32(float x) {
  const cuda::mma::SplitTf32 s = cuda::mma::split_tf32(x);
  return {s.hi, s.lo};
}

}  // namespace tg::cuda_emulator
