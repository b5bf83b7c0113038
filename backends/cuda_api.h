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

// Whether SDPA runs the tensor-core kernels (mma.sync, float32 sums and statistics; compute
// capability 8.0 and later, head dims up to 256): bfloat16 and float16 products, and float32
// ones split into three TF32 products each (3xTF32, within the float32 kernels' tolerances),
// instead of the float32 kernels (on widened copies for 16 bits), which stay for exact
// float32 arithmetic, for comparison and for devices before compute capability 8.0. On unless
// the environment variable TAPEGRAD_CUDA_SDPA_TENSOR_CORES is "0" (docs/PERFORMANCE.md,
// "Tensor-core SDPA"). Always
// false in a build without CUDA.
bool cuda_sdpa_tensor_cores();
void set_cuda_sdpa_tensor_cores(bool on);

// Query rows per warp in the tensor-core SDPA's forward and dQ pass: 16 (blocks of 64 query
// rows) or 32 (blocks of 128, each warp two slices of 16 that share every K and V fragment it
// reads from shared memory, as FlashAttention-2 splits its work), or 0, the default: automatic,
// as an H100 ran faster (docs/PERFORMANCE.md): for 16-bit inputs 32 without a causal mask (2-6%
// faster forward+backward) and 16 with one (32 was up to 18% slower); for float32, 32 up to
// head dim 64 and 16 above; and 16 wherever blocks of 128 rows would not fill every
// multiprocessor twice over (small batches: the reference model's step). Head dims above 128
// always take 16. Until set, the environment variable TAPEGRAD_CUDA_SDPA_WARP_ROWS ("0", "16"
// or "32") decides, read on every call, else 0. Anything else is an error.
int cuda_sdpa_warp_rows();
void set_cuda_sdpa_warp_rows(int rows);

// Whether the tensor-core SDPA's backward sums dQ in a fixed order (the default): in a pass of
// its own, which recomputes each tile's scores and dP (7 tile products per tile against 5), as
// DESIGN §4 asks. false sums each key block's share of dQ into float32 with atomic adds inside
// the dK/dV pass (FlashAttention-2's way, and PyTorch's flash backend's default): one pass and
// two products fewer, at the price of float32 additions in an order that varies from run to run
// (dQ may then differ in its last bits between two identical calls; dK, dV and the forward do
// not). Until set, the environment variable TAPEGRAD_CUDA_SDPA_DETERMINISTIC ("1" or "0")
// decides, read on every call, else true. Anything else is an error. Nothing else reads it.
bool cuda_sdpa_deterministic();
void set_cuda_sdpa_deterministic(bool on);

// How the deterministic backward (cuda_sdpa_deterministic() true) sums dQ:
//  "pass": in a pass of its own, as above;
//  "fixed": in the dK/dV pass, each key block's share converted to a 64-bit integer count of
//    a unit of the row's own (a power of two, 2^-61 to 2^-60 of a bound on the row's dQ that
//    K, V, dO and D give) and added with integer atomic adds. Integer sums do not depend on
//    the order of their terms, so dQ is bitwise the same run to run, without the dQ pass's two
//    recomputed products; its one rounding is the sum's conversion back to float (the pass
//    rounds every add). A row whose inputs are not finite gives NaN throughout. The sums take
//    8 bytes of device memory per element of dQ while the backward runs (the pass none);
//  "auto" (the default): "fixed" for float32 rows of head dims 65 to 128, where the pass's
//    two recomputed products (three TF32 products each) cost most: on an H100 forward+backward
//    at B1 H8 S8192 D128 took 28.2 ms against 34.0 (docs/PERFORMANCE.md, session 45); else
//    "pass": elsewhere the 64-bit adds cost more than the products they save (float32 at D 64,
//    9.2 ms against 7.0, at D 256 34.0 against 30.1; bfloat16 at D 256, 3.9 against 3.15).
// Until set, the environment variable TAPEGRAD_CUDA_SDPA_DETERMINISTIC_DQ ("auto", "pass" or
// "fixed") decides, read on every call, else "auto". Anything else is an error.
std::string cuda_sdpa_deterministic_dq();
void set_cuda_sdpa_deterministic_dq(const std::string& mode);

// Where the tensor-core SDPA runs on sm_90's warpgroup products (wgmma) on a device of compute
// capability 9.0 (H100, H200). They take 16-bit inputs, options without a float or bool mask,
// ALiBi, softcap or dropout, and head dims up to 256 in the forward (with a positive scale), up
// to 128 in the backward (with dQ in its own pass); the mma.sync kernels run every other call.
//  "auto" (the default): head dims above 32 (at 32, the reference model's, the mma.sync
//    kernels' tiles of 32 run faster than their tiles of 64: docs/PERFORMANCE.md, session 41);
//  "on": every call they take (tests; comparisons);
//  "off": none (for comparison, or should a driver misbehave).
// Until set, the environment variable TAPEGRAD_CUDA_SDPA_WGMMA ("auto", "on" or "1", "off" or
// "0") decides, read on every call, else "auto". Anything else is an error. On an H100 they took
// bf16 forward+backward from 0.73x PyTorch's FlashAttention-2 to 1.24x at S 8192 D 128 on their
// first run (docs/PERFORMANCE.md, session 40).
std::string cuda_sdpa_wgmma();
void set_cuda_sdpa_wgmma(const std::string& mode);

// How cuBLAS float32 GEMMs may run on CUDA devices, with PyTorch's names:
//  "highest" (the default): float32 arithmetic.
//  "high": TF32 (10-bit mantissa products, float32 sums; CUBLAS_COMPUTE_32F_FAST_TF32).
// SDPA does not read it: as in PyTorch, its float32 runs 3xTF32 on the tensor cores either way
// (cuda_sdpa_tensor_cores() above says how to have float32 arithmetic there). The CPU always
// computes float32 in float32. Until set, the environment variable
// TAPEGRAD_FLOAT32_MATMUL_PRECISION ("highest" or "high") decides, read on every call, else
// "highest". Anything else is an error.
void set_float32_matmul_precision(const std::string& precision);
std::string float32_matmul_precision();

}  // namespace tg
