// One warpgroup's two kinds of product (backends/cuda/cuda_wgmma.cuh) on known operands, laid out
// as the SDPA kernels lay theirs out (wgmma_layout.h), so that an error in the layout, the
// descriptors or the fragments shows on its own: on a GPU of compute capability 9.0
// (wgmma_probe.cu) and on the CPU emulator (cuda_emulator/wgmma_probe.cpp), each against the
// same sums in double.
#pragma once
#include <cstdint>
#include <vector>

namespace tgtest::wgmma_probe {

constexpr int kM = 64, kK = 256;  // A: 64 x 256 values; B: 64 x 256 (four 64-column panels)
constexpr int kHalf = kK / 2;

// The products at every width the SDPA kernels use (m64: N 64 from shared memory, N 128 and
// 256 with A from registers).
struct Result {
  std::vector<float> ss;       // A B^T (64 x 64): both from shared memory, K-major, k = 256
  std::vector<float> rs;       // A[:, :64] B (64 x 256): A from registers, B MN-major, k = 64
  std::vector<float> rs_half;  // A[:, :64] B[:, :128] (64 x 128), likewise
  std::vector<float> rs_k;     // A[:, :64] B[:, :64]^T (64 x 64): A from registers, B K-major
};

// a and b: bfloat16 bits, row-major. Runs the kernel (false where it cannot: no device of
// compute capability 9.0).
bool run(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, Result& out);

// The TF32 products (float32 operands, K-major both, k = 8 a step): A 64 x 64, B 128 x 64.
constexpr int kTf32K = 64, kTf32N = 128;
struct Tf32Result {
  std::vector<float> ss;  // A B^T (64 x 128): both from shared memory
  std::vector<float> rs;  // A B[:64]^T (64 x 64): A from registers
};
// a (64 x 64) and b (128 x 64), row-major. As run. With `split`, each operand is stored as its
// TF32 halves (cuda_mma.cuh's split_tf32: hi and lo tiles, A's registers split likewise) and
// each product is 3xTF32's three (A_lo B_hi + A_hi B_lo + A_hi B_hi): float32's accuracy
// about, for operands TF32 cannot hold.
bool run_tf32(const std::vector<float>& a, const std::vector<float>& b, Tf32Result& out,
              bool split = false);

}  // namespace tgtest::wgmma_probe
