// Throughput of sm_90's warpgroup products (backends/cuda/cuda_wgmma.cuh) in the forms the SDPA
// kernels use, on every multiprocessor of an H100 or H200: m64nNk16 with A and B in shared
// memory (N 64 and 128: S = Q K^T, the backward's S and dP) or A from registers (N 64, 128, 256:
// O += P V, dQ += dS K, dV += P^T dO). It answers one question before the kernels are tuned:
// whether a product whose operands both come from shared memory is bound by its bandwidth (128
// bytes a clock a multiprocessor, against 4,096 flops a clock of bfloat16 products: an
// m64n64k16 product reads 4 KB in its 32 clocks). Prints, per form, TFLOP/s, the share of the
// products' peak at the device's clock, and the shared-memory bytes a clock the operands take.
// Usage: bench_wgmma [milliseconds per form, default 20]. Built for sm_90a alone.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "backends/cuda/cuda_wgmma.cuh"

namespace {

using S = __nv_bfloat16;
namespace wgmma = tg::cuda::wgmma;

constexpr int kSteps = 4;    // k steps a tile (64 values of K, one swizzle panel)
constexpr int kRepeats = 4;  // tiles a batch of products, between waits

// Shared memory of a block: each group's A (64 rows) and one B of 256 rows (or K rows by N
// columns, MN-major), 64 values of K, from a 1024-byte boundary.
constexpr size_t kSmem = wgmma::kAtomBytes + (2 * 64 + 256) * 64 * sizeof(S);

template <int kN, bool kRegistersA>
__global__ void __launch_bounds__(256, 1) products_kernel(int batches, float* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t base = wgmma::shared_address(smem);
  unsigned char* tiles = smem + (wgmma::kAtomBytes - base % wgmma::kAtomBytes) % wgmma::kAtomBytes;
  // Small finite operands (their values do not change the products' speed).
  for (size_t i = threadIdx.x; i < (2 * 64 + 256) * 64; i += blockDim.x)
    reinterpret_cast<S*>(tiles)[i] = __float2bfloat16(0.001f * static_cast<float>(i % 7));
  wgmma::fence_async_shared();
  __syncthreads();
  const int group = static_cast<int>(threadIdx.x) / 128;
  const uint32_t a_at = wgmma::shared_address(tiles) + group * 64 * wgmma::kRowBytes;
  const uint32_t b_at = wgmma::shared_address(tiles) + 2 * 64 * wgmma::kRowBytes;
  uint32_t af[kSteps][4];
  for (int kk = 0; kk < kSteps; ++kk)
    for (int r = 0; r < 4; ++r) af[kk][r] = 0x3c003c00u + threadIdx.x % 5;
  float d[kN / 8][4] = {};
  wgmma::fence_operand(d);
  for (int it = 0; it < batches; ++it) {
    wgmma::fence();
#pragma unroll
    for (int rep = 0; rep < kRepeats; ++rep) {
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk) {
        if constexpr (kRegistersA) {
          wgmma::product_rs<S, kN>(d, af[kk], wgmma::mn_major(b_at, 64, kk));
        } else {
          wgmma::product_ss<S, kN>(d, wgmma::k_major(a_at, 64, 0, kk),
                                   wgmma::k_major(b_at, 256, 0, kk), true);
        }
      }
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(d);
  }
  float sum = 0;
  for (int i = 0; i < kN / 8; ++i)
    for (int e = 0; e < 4; ++e) sum += d[i][e];
  if (sum == 1.2345f) sink[threadIdx.x] = sum;  // keeps the products
}

template <int kN, bool kRegistersA>
void measure(double ms_target, int sms, double clock_ghz, float* sink) {
  const auto kernel = products_kernel<kN, kRegistersA>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(kSmem));
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  int batches = 64;
  float ms = 0;
  for (int round = 0; round < 8; ++round) {  // grows until a launch takes ms_target
    cudaEventRecord(start);
    kernel<<<sms, 256, kSmem>>>(batches, sink);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms, start, stop);
    if (cudaGetLastError() != cudaSuccess) {
      std::printf("launch failed\n");
      std::exit(1);
    }
    if (ms >= ms_target * 0.8) break;
    batches = static_cast<int>(batches * (ms_target / (ms > 0.01f ? ms : 0.01f)));
  }
  const double products = 2.0 * sms * batches * kRepeats * kSteps;  // two groups a block
  const double flops = products * 2 * 64 * kN * 16;
  const double seconds = ms * 1e-3;
  const double peak = 4096.0 * sms * clock_ghz * 1e9;  // dense 16-bit products
  const double bytes = products * ((kRegistersA ? 0 : 64 * 16) + kN * 16) * sizeof(S);
  std::printf("%-14s %4d %10.1f %9.1f%% %14.1f\n", kRegistersA ? "A registers" : "A, B shared", kN,
              flops / seconds * 1e-12, 100 * flops / seconds / peak,
              bytes / seconds / (sms * clock_ghz * 1e9));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace

int main(int argc, char** argv) {
  const double ms_target = argc > 1 ? std::atof(argv[1]) : 20.0;
  int device = 0, major = 0, minor = 0, sms = 0, khz = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    std::printf("no CUDA device\n");
    return 77;
  }
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device);
  if (major != 9 || minor != 0) {
    std::printf("warpgroup products need compute capability 9.0 (this device: %d.%d)\n", major,
                minor);
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  const double clock_ghz = khz * 1e-6;
  std::printf("# %s, %d multiprocessors, %.2f GHz; bfloat16 m64nNk16, two warpgroups a block\n",
              prop.name, sms, clock_ghz);
  std::printf("%-14s %4s %10s %10s %14s\n", "operands", "N", "TFLOP/s", "of peak",
              "shared B/clock");
  float* sink = nullptr;
  cudaMalloc(&sink, 256 * sizeof(float));
  measure<64, false>(ms_target, sms, clock_ghz, sink);
  measure<128, false>(ms_target, sms, clock_ghz, sink);
  measure<64, true>(ms_target, sms, clock_ghz, sink);
  measure<128, true>(ms_target, sms, clock_ghz, sink);
  measure<256, true>(ms_target, sms, clock_ghz, sink);
  cudaFree(sink);
  return 0;
}
