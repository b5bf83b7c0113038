// Included first by the files that compile CUDA kernel sources as plain C++ for the emulator
// (runtime.h): CUDA's qualifiers as nothing, its built-in variables and intrinsics on the
// emulator, the PTX wrappers of cuda_mma.cuh and cuda_wgmma.cuh emulated (mma.h, wgmma.h), and the
// host runtime calls the kernel files make. The kernels' namespace is renamed (mma_sdpa ->
// mma_sdpa_emulated), and so are the device helpers of cuda_util.cuh, so that these objects link
// beside a CUDA build of the library without taking the place of its symbols.
#pragma once
#ifndef TG_CUDA_EMULATION
#error "the CUDA emulator's sources are compiled with TG_CUDA_EMULATION defined"
#endif

// Before CUDA's headers, which define these only where they are undefined.
#define __host__
#define __device__
#define __global__
#define __shared__
#define __grid_constant__
#define __launch_bounds__(...)
#define __noinline__

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include "backends/cuda/cuda_util.cuh"
#include "tests/cuda_emulator/runtime.h"

#define threadIdx (::tg::cuda_emulator::thread_idx())
#define blockIdx (::tg::cuda_emulator::block_idx())
#define blockDim (::tg::cuda_emulator::block_dim())
#define gridDim (::tg::cuda_emulator::grid_dim())

inline void __syncthreads() { ::tg::cuda_emulator::sync_block(); }
[[noreturn]] inline void __trap() { ::tg::fail("cuda emulator", "__trap() reached"); }

inline uint32_t __float_as_uint(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float __uint_as_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  static_assert(sizeof(T) <= ::tg::cuda_emulator::kSlot);
  if (mask != 0xffffffffu) ::tg::fail("cuda emulator", "__shfl_xor_sync with a partial mask");
  const unsigned char* all = ::tg::cuda_emulator::warp_exchange("shfl", &v, sizeof(T));
  T out;
  const unsigned lane = threadIdx.x % 32;
  std::memcpy(&out,
              all + ((lane ^ static_cast<unsigned>(lane_mask)) % 32) * ::tg::cuda_emulator::kSlot,
              sizeof(T));
  return out;
}

inline int __any_sync(unsigned mask, int predicate) {
  if (mask != 0xffffffffu) ::tg::fail("cuda emulator", "__any_sync with a partial mask");
  const unsigned char* all =
      ::tg::cuda_emulator::warp_exchange("vote.any", &predicate, sizeof predicate);
  int any = 0;
  for (unsigned l = 0; l < 32; ++l) {
    int p;
    std::memcpy(&p, all + l * ::tg::cuda_emulator::kSlot, sizeof p);
    any |= p != 0;
  }
  return any;
}

// Device code's integer min (CUDA's overloads).
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }

// The host runtime the kernel files call, on the emulator: no stream, scratch from the heap,
// nothing to check after a launch but its name to record.
namespace tg::cuda_emulator {
inline cudaStream_t enter(int) { return nullptr; }
// Records the kernel's name (launched()).
inline void check_launch(const char* name) { record_launch(name); }
struct Scratch {
  Scratch(size_t bytes, int) : data(new unsigned char[bytes]) {}
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(data.get());
  }
  std::unique_ptr<unsigned char[]> data;
};
}  // namespace tg::cuda_emulator
#define enter ::tg::cuda_emulator::enter
#define check_launch ::tg::cuda_emulator::check_launch
#define Scratch ::tg::cuda_emulator::Scratch
#define mma_sdpa mma_sdpa_emulated

#include "tests/cuda_emulator/mma.h"
#include "tests/cuda_emulator/wgmma.h"
