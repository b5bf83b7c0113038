// Matrix products through the GEMM library chosen by cpu_api.h's cpu_gemm(), for the CPU
// kernels (cpu_matmul.cpp). Eigen is the caller's own fallback.
#pragma once
#include <cstdint>

#include "core/half.h"

namespace tg::cpu {

// C (m x n, row stride ldc) = op(A) op(B), op transposing when asked, every operand row-major
// with the given row strides. Returns false, touching nothing, when the chosen engine is
// Eigen (or, for float64, when no library here has a dgemm).
bool library_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float* c, int64_t ldc);
bool library_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                  const double* b, int64_t ldb, double* c, int64_t ldc);

// An operand's bfloat16 matrices, `stride` elements apart (0: the same matrix for every item
// of the batch), each row-major with row stride ld, read transposed when t.
struct Bf16Matrices {
  const bfloat16* data = nullptr;
  int64_t ld = 0;
  int64_t stride = 0;
  bool t = false;
};
// C_i = op(A_i) op(B_i) for i < batch, each C_i row-major with row stride ldc and stride_c
// elements after the one before, in one call: multiplied in bfloat16 with float32 sums and
// rounded once, by oneDNN's matmul where the chosen engine is oneDNN and the CPU has bfloat16
// instructions (cpu_gemm_bf16_native()). Returns false, touching nothing, elsewhere or when
// oneDNN refuses the layout; the caller then converts to float32.
bool library_gemm_bf16(int64_t batch, int64_t m, int64_t n, int64_t k, const Bf16Matrices& a,
                       const Bf16Matrices& b, bfloat16* c, int64_t ldc, int64_t stride_c);

}  // namespace tg::cpu
