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
// The same with bfloat16 operands and result, multiplied in bfloat16 with float32 sums and
// rounded once: oneDNN's matmul where the chosen engine is oneDNN and the CPU has bfloat16
// instructions (bf16_gemm_is_native()). Returns false, touching nothing, elsewhere or when
// oneDNN refuses the layout; the caller then converts to float32.
bool library_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda,
                  const bfloat16* b, int64_t ldb, bfloat16* c, int64_t ldc);

}  // namespace tg::cpu
