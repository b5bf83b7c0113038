// SDPA on the tensor cores for bfloat16 and float16, in the manner of FlashAttention-2 (Dao,
// 2023): 16-bit products with float32 sums (mma.sync m16n8k16, cuda_mma.cuh), float32
// statistics, the option rules of DESIGN §4 applied to the score fragments in registers
// through Args::score, the same per-element code as the CPU and the float32 kernels. float32
// runs the same kernels: shared tiles of float, and each product split into three TF32 ones
// (m16n8k8, "3xTF32": it passes the float32 kernels' 300-configuration suite at their
// tolerances), as PyTorch's float32 memory-efficient kernel multiplies (CUTLASS's
// OpMultiplyAddFastF32).
//
// A block is four warps (some dK/dV blocks eight). Forward and the backward's dQ pass: the block
// takes 64 query rows, each warp 16 of them (or 128 and 32 under cuda_sdpa_warp_rows() == 32:
// two slices of 16 per warp sharing each K/V fragment), and walks the visible key tiles; no
// softmax reduction crosses warps.
// The dK/dV pass: the block takes 64 key rows, each warp 16 (128 and eight warps for 16-bit rows
// above head dim 128, or above 64 with dQ summed by the pass), and walks the query tiles of
// every query head of its group in order, so dK and dV are summed without atomics and the
// backward is deterministic (dQ has its own pass: S and dP are recomputed there; above head
// dim 128 dV and dK have a pass each). Head dims up to 256, walked tiles of 32 rows above 128.
// The next tile of the walked side is copied into shared memory with cp.async while this one
// is multiplied; shared rows are padded by 16 bytes, so the eight rows an ldmatrix reads fall
// in distinct banks. Rows whose strides do not allow 16-byte copies are loaded element by
// element into the same layout. Tiles whose keys are all real and visible under options
// without per-element rules (interior()) skip Args::score; the rules run out of line.
// Each 16-bit kernel also comes as kPlainOnly, the path of plain options without dropout alone
// (plain_only(), the most common call): fewer live registers, which some spend on bigger tiles
// or on more blocks a multiprocessor (kForwardKeys, kForwardBlocks, kDqBlocks, kDkvBlocks).
//
// P (and dS) are rounded to the 16-bit type for the second product of each pair, as
// FlashAttention-2 does; the row sums use the float32 values. In float32 they are split like
// any other operand.
//
// This file: the host's checks and the entry points by dtype, and the switch. The kernels:
// cuda_sdpa_mma_forward.cu and cuda_sdpa_mma_backward.cu, built from the warp-level pieces of
// cuda_sdpa_mma_tiles.cuh and the score rules of cuda_sdpa_mma_rules.cuh; the host side they
// share: cuda_sdpa_mma_launch.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/cuda_sdpa_mma_launch.cuh"
#include "backends/cuda_api.h"

namespace tg::cuda {
namespace mma_sdpa {
int shared_optin(int device) {
  int major = 0, optin = 0;
  TG_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) return 0;
  TG_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return optin;
}

int blocks_fit(int device, size_t smem) {
  int per_sm = 0, reserved = 0;
  TG_CUDA(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  TG_CUDA(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device));
  return static_cast<int>(static_cast<size_t>(per_sm) / (smem + static_cast<size_t>(reserved)));
}

bool wgmma_device(int device) {
  int major = 0, minor = 0;
  TG_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TG_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

int multiprocessors(int device) {
  int count = 0;
  TG_CUDA(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

}  // namespace mma_sdpa

using mma_sdpa::backward_typed;
using mma_sdpa::forward_typed;

bool sdpa_mma_forward(int device, const SdpaParams& p) {
  if (!cuda_sdpa_tensor_cores()) return false;
  if (p.q.dtype == kBFloat16) return forward_typed<__nv_bfloat16>(device, p);
  if (p.q.dtype == kFloat16) return forward_typed<__half>(device, p);
  if (p.q.dtype == kFloat32) return forward_typed<float>(device, p);
  return false;
}

bool sdpa_mma_backward(int device, const SdpaParams& p, const View& dout, const SdpaGradViews& g) {
  if (!cuda_sdpa_tensor_cores()) return false;
  if (p.q.dtype == kBFloat16) return backward_typed<__nv_bfloat16>(device, p, dout, g);
  if (p.q.dtype == kFloat16) return backward_typed<__half>(device, p, dout, g);
  if (p.q.dtype == kFloat32) return backward_typed<float>(device, p, dout, g);
  return false;
}

}  // namespace tg::cuda

namespace tg {
namespace {
// -1: not yet read from TAPEGRAD_CUDA_SDPA_TENSOR_CORES.
std::atomic<int> tensor_cores{-1};
}  // namespace

bool cuda_sdpa_tensor_cores() {
  int on = tensor_cores.load();
  if (on < 0) {
    const char* env = std::getenv("TAPEGRAD_CUDA_SDPA_TENSOR_CORES");
    on = env && std::strcmp(env, "0") == 0 ? 0 : 1;
    int expected = -1;
    tensor_cores.compare_exchange_strong(expected, on);
    on = tensor_cores.load();
  }
  return on == 1;
}

void set_cuda_sdpa_tensor_cores(bool on) { tensor_cores.store(on ? 1 : 0); }

}  // namespace tg
