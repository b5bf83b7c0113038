// Matrix products through the GEMM library chosen by cpu_api.h's cpu_gemm(), for the CPU
// kernels (cpu_matmul.cpp). Eigen is the caller's own fallback.
#pragma once
#include <cstdint>

namespace tg::cpu {

// C (m x n, row stride ldc) = op(A) op(B), op transposing when asked, every operand row-major
// with the given row strides. Returns false, touching nothing, when the chosen engine is
// Eigen (or, for float64, when no library here has a dgemm).
bool library_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float* c, int64_t ldc);
bool library_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                  const double* b, int64_t ldb, double* c, int64_t ldc);

}  // namespace tg::cpu
