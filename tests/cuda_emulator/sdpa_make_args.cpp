// make_args and set_grad_args for the emulated kernels: in a CPU-only build of the library they
// exist nowhere else (in a CUDA build these template instantiations merge with its own).
#include "tests/cuda_emulator/cuda_shim.h"

#include "backends/cuda/cuda_sdpa_make_args.cu"
