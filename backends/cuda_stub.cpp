// CPU-only builds: every CUDA entry point says how the library was built.
#include "backends/backend.h"
#include "core/error.h"

namespace tg {

Backend& cuda_backend() { fail("cuda", "tapegrad was built without CUDA (TAPEGRAD_CUDA=OFF)"); }

bool cuda_is_available() { return false; }

}  // namespace tg
