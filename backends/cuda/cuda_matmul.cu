// Batched GEMM through cuBLAS. cuBLAS is column-major: a row-major C (m x n) is a
// column-major C^T (n x m), so C = A B is computed as C^T = B^T A^T, and an operand that is
// row-major in our terms needs no transpose there. Batch dims are merged where their strides
// allow; one strided-batched call covers the innermost batch dim, a host loop the rest.
#include <type_traits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/dispatch.h"
#include "backends/float32_precision.h"

namespace tg::cuda {
namespace {

// One strided-batched GEMM in T through cuBLAS. bfloat16 and float16 accumulate in float32
// (cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F) and round C once.
template <class T>
void gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                  const T* a, int lda, int64_t sa, const T* b, int ldb, int64_t sb, T* c, int ldc,
                  int64_t sc, int batch) {
  if constexpr (is_half_v<T>) {
    const float one = 1, zero = 0;
    const cudaDataType_t t = std::is_same_v<T, bfloat16> ? CUDA_R_16BF : CUDA_R_16F;
    check_cublas(
        cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &one, a, t, lda, sa, b, t, ldb, sb, &zero, c,
                                   t, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
  } else if constexpr (std::is_same_v<T, float>) {
    const float one = 1, zero = 0;
    if (float32_tf32_allowed()) {  // set_float32_matmul_precision("high") (cuda_api.h)
      check_cublas(
          cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &one, a, CUDA_R_32F, lda, sa, b,
                                     CUDA_R_32F, ldb, sb, &zero, c, CUDA_R_32F, ldc, sc, batch,
                                     CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx");
      return;
    }
    check_cublas(cublasSgemmStridedBatched(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &zero,
                                           c, ldc, sc, batch),
                 "cublasSgemmStridedBatched");
  } else {
    const double one = 1, zero = 0;
    check_cublas(cublasDgemmStridedBatched(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &zero,
                                           c, ldc, sc, batch),
                 "cublasDgemmStridedBatched");
  }
}

int to_int(int64_t v, const char* what) {
  TG_CHECK(v <= 0x7fffffff, "matmul", what, " of ", v, " exceeds cuBLAS's 32-bit int range");
  return static_cast<int>(v);
}

template <class T>
void matmul_typed(int device, const View& a, const View& b, const View& c) {
  const size_t nd = c.sizes.size();
  const int64_t m = c.sizes[nd - 2], n = c.sizes[nd - 1], k = a.sizes[nd - 1];
  const bool ra = gemm_row_major(a), rb = gemm_row_major(b);
  TG_CHECK((ra || gemm_col_major(a)) && (rb || gemm_col_major(b)) && gemm_row_major(c), "matmul",
           "internal: operands must be row- or column-major matrices, the output row-major");
  const int64_t lda = ra ? a.strides[nd - 2] : a.strides[nd - 1];
  const int64_t ldb = rb ? b.strides[nd - 2] : b.strides[nd - 1];
  const int64_t ldc = c.strides[nd - 2];
  // The batch dims of c, a and b, merged where all three allow it.
  Shape batch(c.sizes.begin(), c.sizes.end() - 2);
  Shape sa(a.strides.begin(), a.strides.end() - 2), sb(b.strides.begin(), b.strides.end() - 2),
      sc(c.strides.begin(), c.strides.end() - 2);
  Loop<3> l = coalesce<3>(batch, {&sc, &sa, &sb});
  const int64_t inner = l.sizes.back(), outer = numel_of(l.sizes) / (inner ? inner : 1);
  if (numel_of(l.sizes) == 0) return;
  cudaStream_t s = enter(device);
  cublasHandle_t h = cublas_handle(device);
  const T* ap = static_cast<const T*>(a.data);
  const T* bp = static_cast<const T*>(b.data);
  T* cp = static_cast<T*>(c.data);
  const int nl = static_cast<int>(l.sizes.size());
  for (int64_t o = 0; o < outer; ++o) {
    int64_t offs[3] = {0, 0, 0}, r = o;
    for (int d = nl - 2; d >= 0; --d) {
      const int64_t i = r % l.sizes[d];
      r /= l.sizes[d];
      for (int q = 0; q < 3; ++q) offs[q] += i * l.strides[q][d];
    }
    if (k == 0) {  // an empty sum: zeros (cuBLAS leaves C alone when k == 0 only with beta 0)
      for (int64_t bi = 0; bi < inner; ++bi)
        TG_CUDA(cudaMemset2DAsync(cp + offs[0] + bi * l.strides[0][nl - 1], ldc * sizeof(T), 0,
                                  n * sizeof(T), m, s));
      continue;
    }
    // C^T (n x m) = op(B^T) (n x k) op(A^T) (k x m).
    gemm_batched(h, rb ? CUBLAS_OP_N : CUBLAS_OP_T, ra ? CUBLAS_OP_N : CUBLAS_OP_T, to_int(n, "n"),
                 to_int(m, "m"), to_int(k, "k"), bp + offs[2],
                 to_int(std::max<int64_t>(ldb, 1), "ldb"), l.strides[2][nl - 1], ap + offs[1],
                 to_int(std::max<int64_t>(lda, 1), "lda"), l.strides[1][nl - 1], cp + offs[0],
                 to_int(std::max<int64_t>(ldc, 1), "ldc"), l.strides[0][nl - 1],
                 to_int(inner, "batch"));
  }
}

}  // namespace

void CudaBackend::matmul(const View& a, const View& b, const View& c) {
  dispatch_floating(c.dtype, [&](auto t) { matmul_typed<decltype(t)>(device, a, b, c); });
}

}  // namespace tg::cuda
