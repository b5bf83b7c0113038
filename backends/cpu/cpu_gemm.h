// Matrix products through the GEMM library chosen by cpu_api.h's cpu_gemm(), for the CPU
// kernels (cpu_matmul.cpp). Eigen is the caller's own fallback.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace tg::cpu {

// C (m x n, row stride ldc) = op(A) op(B), op transposing when asked, every operand row-major
// with the given row strides. Returns false, touching nothing, when the chosen engine is
// Eigen, when it is oneDNN and oneDNN has no brgemm kernel for the layout (cpu_gemm.cpp says
// why only those), or, for float64, when no library here has a dgemm.
bool library_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float* c, int64_t ldc);
bool library_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                  const double* b, int64_t ldb, double* c, int64_t ldc);

// An operand's matrices, `stride` elements apart (0: the same matrix for every item of the
// batch), each row-major with row stride ld, read transposed when t.
struct Matrices {
  const void* data = nullptr;
  int64_t ld = 0;
  int64_t stride = 0;
  bool t = false;
};
// C_i = op(A_i) op(B_i) for i < batch, all of dtype dt, each C_i row-major with row stride ldc
// and stride_c elements after the one before, in one call to oneDNN's matmul: float32 where the
// chosen engine is oneDNN, bfloat16 where also the CPU has bfloat16 instructions
// (cpu_gemm_bf16_native(); multiplied in bfloat16 with float32 sums, rounded once). Returns
// false, touching nothing, elsewhere or when oneDNN has no brgemm kernel for the layout.
bool library_gemm_batch(DType dt, int64_t batch, int64_t m, int64_t n, int64_t k, const Matrices& a,
                        const Matrices& b, void* c, int64_t ldc, int64_t stride_c);

}  // namespace tg::cpu
