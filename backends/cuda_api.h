// The CUDA entry points a user calls directly. They exist in every build: a CPU-only build
// reports no device (cuda_is_available() is false) and throws where a device is required.
#pragma once
#include <cstdint>
#include <string>

namespace tg {

// True when this build has CUDA and a device is present (no driver reads as no device).
bool cuda_is_available();
int cuda_device_count();
// Waits until every kernel queued on the device's stream has finished (for timing).
void cuda_synchronize(int device = 0);

// The caching allocator's figures for one device, in bytes: held by live tensors (rounded
// to the allocator's block sizes), cached for reuse, the peak of in_use, and how many
// cudaMalloc calls it has made (flat after the first training step).
struct CudaMemoryStats {
  int64_t in_use = 0, cached = 0, peak = 0, mallocs = 0;
};
CudaMemoryStats cuda_memory_stats(int device = 0);
// Returns the cached blocks to the driver (waits for the devices first).
void cuda_empty_cache();
// For tests: while on, every block the allocator hands out is first filled with 0xFF bytes
// (NaN as float32 and float64), so a kernel that leaves an output element unwritten shows.
void cuda_poison_allocations(bool on);

// Whether bfloat16 and float16 SDPA runs the tensor-core kernels (mma.sync, float32 sums and
// statistics; compute capability 8.0 and later, head dims up to 256) instead of the float32
// kernels on widened copies. On unless the environment variable
// TAPEGRAD_CUDA_SDPA_TENSOR_CORES is "0" (docs/PERFORMANCE.md, "Tensor-core SDPA"); the
// float32 route stays for comparison and for devices before compute capability 8.0. Always
// false in a build without CUDA.
bool cuda_sdpa_tensor_cores();
void set_cuda_sdpa_tensor_cores(bool on);

// Query rows per warp in the tensor-core SDPA's forward and dQ pass: 16 (blocks of 64 query
// rows) or 32 (blocks of 128, each warp two slices of 16 that share every K and V fragment it
// reads from shared memory, as FlashAttention-2 splits its work). Head dims above 128 always
// take 16. Until set, the environment variable TAPEGRAD_CUDA_SDPA_WARP_ROWS ("16" or "32")
// decides, read on every call, else 16; 32 is for measuring (docs/PERFORMANCE.md) until it
// has run on a GPU. Anything else is an error.
int cuda_sdpa_warp_rows();
void set_cuda_sdpa_warp_rows(int rows);

// How float32 products may run on CUDA devices, with PyTorch's names:
//  "highest" (the default): float32 arithmetic throughout.
//  "high": cuBLAS float32 GEMMs may use TF32 (10-bit mantissa products, float32 sums;
//  CUBLAS_COMPUTE_32F_FAST_TF32), and float32 SDPA runs on the tensor cores with each product
//  split into three TF32 ones ("3xTF32": about float32's accuracy) when
//  cuda_sdpa_tensor_cores() is on. The CPU always computes float32 in float32.
// Until set, the environment variable TAPEGRAD_FLOAT32_MATMUL_PRECISION ("highest" or "high")
// decides, read on every call, else "highest". Anything else is an error. The 3xTF32 SDPA
// kernels have not yet run on a GPU (written and checked without one; docs/PERFORMANCE.md),
// which is why "highest" stays the default.
void set_float32_matmul_precision(const std::string& precision);
std::string float32_matmul_precision();

}  // namespace tg
