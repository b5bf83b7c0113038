// CPU-only builds: every CUDA entry point says how the library was built.
#include "backends/backend.h"
#include "backends/cuda_api.h"
#include "core/error.h"

namespace tg {

namespace {
[[noreturn]] void built_without_cuda() {
  fail("cuda", "tapegrad was built without CUDA (TAPEGRAD_CUDA=OFF or no nvcc at build time)");
}
}  // namespace

Backend& cuda_backend(int) { built_without_cuda(); }
bool cuda_is_available() { return false; }
int cuda_device_count() { return 0; }
void cuda_synchronize(int) { built_without_cuda(); }
CudaMemoryStats cuda_memory_stats(int) { return {}; }
void cuda_empty_cache() {}
void cuda_poison_allocations(bool) {}
// Nothing to switch without CUDA: the setting reads as off.
bool cuda_sdpa_tensor_cores() { return false; }
void set_cuda_sdpa_tensor_cores(bool) {}

}  // namespace tg
