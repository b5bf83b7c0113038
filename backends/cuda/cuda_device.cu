// CUDA builds: device discovery. A machine without a driver makes cudaGetDeviceCount return
// an error rather than 0; both read as "no device". The kernels are the CUDA backend issue's.
#include <cuda_runtime.h>

#include "backends/backend.h"
#include "core/error.h"

namespace tg {

bool cuda_is_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return false;
  }
  return n > 0;
}

Backend& cuda_backend() {
  TG_CHECK(cuda_is_available(), "cuda", "no CUDA device is available on this machine");
  fail("cuda",
       "this build has CUDA device discovery only; tensor kernels on CUDA come with "
       "the CUDA backend");
}

}  // namespace tg
