// Batched GEMM over our buffers: the library cpu_gemm() names (oneDNN or OpenBLAS, see
// cpu_gemm.cpp), else Eigen maps. Many small matrices: one thread each (all of them run
// single-threaded inside an OpenMP region); few large ones: the library's own threads, drawn
// from the same OpenMP pool. 16-bit products multiply in bfloat16 through oneDNN where the CPU
// can (a whole batch in one call), else in float32 on widened copies.
#include <Eigen/Core>
#include <algorithm>
#include <optional>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/half_as_float.h"
#include "backends/half_kernels.h"
#include "core/error.h"

namespace tg::cpu {
namespace {

using Eigen::Dynamic;
using Eigen::OuterStride;
template <class T, int Order>
using MatMap = Eigen::Map<const Eigen::Matrix<T, Dynamic, Dynamic, Order>, 0, OuterStride<>>;
template <class T>
using OutMap = Eigen::Map<Eigen::Matrix<T, Dynamic, Dynamic, Eigen::RowMajor>, 0, OuterStride<>>;

int64_t leading_dim(const View& v) {
  const size_t n = v.sizes.size();
  return gemm_row_major(v) ? v.strides[n - 2] : v.strides[n - 1];
}

template <class T, int OA, int OB>
void gemm(const T* a, const T* b, T* c, int64_t m, int64_t k, int64_t n, int64_t lda, int64_t ldb,
          int64_t ldc) {
  MatMap<T, OA> A(a, m, k, OuterStride<>(lda));
  MatMap<T, OB> B(b, k, n, OuterStride<>(ldb));
  OutMap<T> C(c, m, n, OuterStride<>(ldc));
  C.noalias() = A * B;
}

// The matrix dims and memory orders of a (batched) product C = A B, checked.
struct Product {
  int64_t m, n, k, lda, ldb, ldc, batch;
  bool ra, rb;  // A, B row-major (else column-major)
};

Product product_of(const View& a, const View& b, const View& c) {
  const size_t nd = c.sizes.size();
  Product p{};
  p.m = c.sizes[nd - 2], p.n = c.sizes[nd - 1], p.k = a.sizes[nd - 1];
  p.ra = gemm_row_major(a), p.rb = gemm_row_major(b);
  TG_CHECK((p.ra || gemm_col_major(a)) && (p.rb || gemm_col_major(b)), "matmul",
           "internal: operands must be row- or column-major matrices");
  TG_CHECK(gemm_row_major(c), "matmul", "internal: output must be row-major");
  p.lda = leading_dim(a), p.ldb = leading_dim(b), p.ldc = c.strides[nd - 2];
  p.batch = numel_of(Shape(c.sizes.begin(), c.sizes.end() - 2));
  return p;
}

// The element offsets of batch item bi's matrices in a, b and c.
struct Offsets {
  int64_t a = 0, b = 0, c = 0;
};
Offsets offsets_of(const View& a, const View& b, const View& c, int64_t bi) {
  Offsets o;
  for (size_t d = c.sizes.size() - 2; d-- > 0;) {
    const int64_t i = bi % c.sizes[d];
    bi /= c.sizes[d];
    o.a += i * a.strides[d];
    o.b += i * b.strides[d];
    o.c += i * c.strides[d];
  }
  return o;
}

template <class T>
void matmul_typed(const View& a, const View& b, const View& c) {
  const Product p = product_of(a, b, c);
  const T* ap = static_cast<const T*>(a.data);
  const T* bp = static_cast<const T*>(b.data);
  T* cp = static_cast<T*>(c.data);
  auto one = [&](int64_t bi) {
    const Offsets o = offsets_of(a, b, c, bi);
    const int64_t m = p.m, n = p.n, k = p.k, lda = p.lda, ldb = p.ldb, ldc = p.ldc;
    if (k == 0) {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) cp[o.c + i * ldc + j] = T(0);
      return;
    }
    // A row-major operand is NoTrans, a column-major one Trans.
    if (library_gemm(!p.ra, !p.rb, m, n, k, ap + o.a, lda, bp + o.b, ldb, cp + o.c, ldc)) return;
    if (p.ra && p.rb)
      gemm<T, Eigen::RowMajor, Eigen::RowMajor>(ap + o.a, bp + o.b, cp + o.c, m, k, n, lda, ldb,
                                                ldc);
    else if (p.ra)
      gemm<T, Eigen::RowMajor, Eigen::ColMajor>(ap + o.a, bp + o.b, cp + o.c, m, k, n, lda, ldb,
                                                ldc);
    else if (p.rb)
      gemm<T, Eigen::ColMajor, Eigen::RowMajor>(ap + o.a, bp + o.b, cp + o.c, m, k, n, lda, ldb,
                                                ldc);
    else
      gemm<T, Eigen::ColMajor, Eigen::ColMajor>(ap + o.a, bp + o.b, cp + o.c, m, k, n, lda, ldb,
                                                ldc);
  };
  if (p.batch > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t bi = 0; bi < p.batch; ++bi) one(bi);
  } else if (p.batch == 1) {
    one(0);
  }
}

// The one stride that steps through all of v's batch dims (those before the last two) in
// c's row-major order of them, 0 where v is the same matrix for every item; nullopt where no
// single stride does (a view broadcast along some batch dims and not others, or gathered).
std::optional<int64_t> batch_stride(const View& v, const View& c) {
  std::optional<int64_t> stride;
  int64_t inner = 1;  // items spanned by the dims after d
  for (size_t d = c.sizes.size() - 2; d-- > 0;) {
    if (c.sizes[d] == 1) continue;
    if (!stride) {
      stride = v.strides[d];
    } else if (v.strides[d] != *stride * inner) {
      return std::nullopt;
    }
    inner *= c.sizes[d];
  }
  return stride.value_or(0);
}

// A whole batch of float32 or bfloat16 products in one library call where cpu_gemm.h's
// library_gemm_batch can (oneDNN: float32, and bfloat16 multiplied in bfloat16 with float32
// sums where the CPU has the instructions): one call instead of one per item, which for small
// matrices is most of the cost. False, nothing written, where it can't or the batch dims do not
// collapse into one stride; the caller then multiplies item by item, widening bfloat16 first.
bool matmul_one_call(const View& a, const View& b, const View& c) {
  if (a.dtype != c.dtype || b.dtype != c.dtype || (c.dtype != kFloat32 && c.dtype != kBFloat16))
    return false;
  const Product p = product_of(a, b, c);
  if (p.m == 0 || p.n == 0 || p.k == 0 || p.batch == 0) return false;  // nothing to multiply
  // One float32 product is library_gemm's, which asks oneDNN the same question: asked here too,
  // a layout oneDNN declines would be offered to it twice.
  if (c.dtype == kFloat32 && p.batch == 1) return false;
  const std::optional<int64_t> sa = batch_stride(a, c), sb = batch_stride(b, c),
                               sc = batch_stride(c, c);
  if (!sa || !sb || !sc || (p.batch > 1 && *sc == 0)) return false;
  // A row-major operand is read as is, a column-major one as the transpose of a row-major one.
  return library_gemm_batch(c.dtype, p.batch, p.m, p.n, p.k, {a.data, p.lda, *sa, !p.ra},
                            {b.data, p.ldb, *sb, !p.rb}, c.data, p.ldc, *sc);
}

// The rows [r0, r0 + rows) of a 2-D view.
View row_block(const View& v, int64_t r0, int64_t rows) {
  View blk = v;
  blk.data =
      static_cast<char*>(v.data) + r0 * v.strides[0] * static_cast<int64_t>(dtype_size(v.dtype));
  blk.sizes[0] = rows;
  return blk;
}

// A 2-D product with 16-bit operands: b widened to float32 once, a and c a block of rows at a
// time (about 4 MB of float32 each), so the float32 stand-ins stay small beside the 16-bit
// tensors instead of doubling the largest of them (a SwiGLU projection's output, its gradient).
bool matmul_half_2d(Backend& be, const View& a, const View& b, const View& c) {
  if (!any_half({&a, &b, &c}) || c.sizes.size() != 2) return false;
  constexpr int64_t kBlockElems = int64_t{1} << 20;
  const int64_t m = c.sizes[0], width = std::max<int64_t>({a.sizes[1], c.sizes[1], 1});
  const int64_t block = std::max<int64_t>(1, kBlockElems / width);
  HalfAsFloat wide_b(be, kCPU);
  const View b32 = wide_b.in(b);
  for (int64_t r0 = 0; r0 < m; r0 += block) {
    const int64_t rows = std::min(block, m - r0);
    with_float32(be, kCPU, [&](HalfAsFloat& f) {
      be.matmul(f.in(row_block(a, r0, rows)), b32, f.out(row_block(c, r0, rows)));
    });
  }
  return true;
}

}  // namespace

void CpuBackend::matmul(const View& a, const View& b, const View& c) {
  if (matmul_one_call(a, b, c)) return;
  if (matmul_half_2d(*this, a, b, c)) return;
  if (half_kernels::matmul(*this, kCPU, a, b, c)) return;  // batched: whole stand-ins
  if (c.dtype == kFloat64) {
    matmul_typed<double>(a, b, c);
  } else {
    matmul_typed<float>(a, b, c);
  }
}

}  // namespace tg::cpu
