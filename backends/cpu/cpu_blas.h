// GEMM through OpenBLAS for the CPU kernels, when the build found it (TAPEGRAD_BLAS defines
// TAPEGRAD_OPENBLAS for the files that use it).
#pragma once
#ifdef TAPEGRAD_OPENBLAS
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace tg::cpu {

// C (m x n, row stride ldc) = [C +] op(A) op(B), op transposing when asked; every operand
// row-major with the given row strides.
template <class T>
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
               const T* b, int64_t ldb, bool accumulate, T* c, int64_t ldc) {
  const auto trans = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  // BLAS insists on leading dimensions >= 1 even where a dimension is 0.
  const auto ld = [](int64_t v) { return static_cast<blasint>(std::max<int64_t>(v, 1)); };
  const auto i = [](int64_t v) { return static_cast<blasint>(v); };
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, trans(ta), trans(tb), i(m), i(n), i(k), 1.0f, a, ld(lda), b, ld(ldb),
                accumulate ? 1.0f : 0.0f, c, ld(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, trans(ta), trans(tb), i(m), i(n), i(k), 1.0, a, ld(lda), b, ld(ldb),
                accumulate ? 1.0 : 0.0, c, ld(ldc));
  }
}

}  // namespace tg::cpu
#endif
