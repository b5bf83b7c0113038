// The tensor-core SDPA kernels' fragment bookkeeping (backends/cuda/mma_layout.h) checked on the
// CPU: ldmatrix.x4 (plain and .trans) and mma.m16n8k16 emulated as the PTX ISA defines them
// ("Matrix fragments for mma.m16n8k16 with floating point type", "ldmatrix"), driven by the
// kernels' own address formulas, must multiply: S = A M^T as warp_abt does, then S V with S's
// accumulators reused as A fragments as warp_pv does; and the same for float32 split into TF32
// (mma.m16n8k8 .tf32, float rows through ldmatrix, P reused in a permuted k order). Integer
// values, so the products are exact.
#include <array>
#include <random>
#include <vector>

#include "backends/cuda/mma_layout.h"
#include "test_util.h"

using namespace tg::cuda::mma;

namespace {

using Matrix = std::vector<std::vector<double>>;
using Pair = std::array<double, 2>;                // one 32-bit register: two 16-bit values
using Regs = std::array<std::array<Pair, 4>, 32>;  // four registers per lane

Matrix random_matrix(int rows, int cols, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-4, 4);
  Matrix m(rows, std::vector<double>(cols));
  for (auto& row : m)
    for (double& x : row) x = d(rng);
  return m;
}

// ldmatrix.x4: lanes 8 m .. 8 m + 7 give the rows of 8 x 8 tile m (each 8 consecutive values
// from the address); lane L receives row L / 4, values 2 (L % 4) and 2 (L % 4) + 1 of tile m,
// of its transpose with .trans.
template <class Address>
Regs ldmatrix_x4(const Matrix& smem, Address address, bool trans) {
  Regs r{};
  for (int m = 0; m < 4; ++m) {
    double tile[8][8];
    for (int row = 0; row < 8; ++row) {
      const RowCol at = address(8 * m + row);
      for (int c = 0; c < 8; ++c) {
        if (trans) {
          tile[c][row] = smem[at.row][at.col + c];
        } else {
          tile[row][c] = smem[at.row][at.col + c];
        }
      }
    }
    for (int lane = 0; lane < 32; ++lane)
      r[lane][m] = {tile[lane / 4][2 * (lane % 4)], tile[lane / 4][2 * (lane % 4) + 1]};
  }
  return r;
}

// mma.m16n8k16: d += A B with A's fragments a0..a3 (rows g, g + 8 at columns 2t, 2t + 1; then
// the same at 2t + 8, 2t + 9), B's b0, b1 (rows 2t, 2t + 1, then 2t + 8, 2t + 9, of column g),
// and d's four values (row g, columns 2t, 2t + 1, then row g + 8).
void mma(std::array<std::array<double, 4>, 32>& d, const std::array<std::array<Pair, 4>, 32>& a,
         const std::array<Pair, 32>& b0, const std::array<Pair, 32>& b1) {
  double A[16][16] = {}, B[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int h = 0; h < 2; ++h) {
      A[g][2 * t + h] = a[lane][0][h];
      A[g + 8][2 * t + h] = a[lane][1][h];
      A[g][2 * t + 8 + h] = a[lane][2][h];
      A[g + 8][2 * t + 8 + h] = a[lane][3][h];
      B[2 * t + h][g] = b0[lane][h];
      B[2 * t + 8 + h][g] = b1[lane][h];
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
      for (int k = 0; k < 16; ++k) d[lane][e] += A[row][k] * B[k][col];
    }
  }
}

// A warp's accumulator: per column tile, each lane's four values.
using Acc = std::vector<std::array<std::array<double, 4>, 32>>;

// Register i of every lane (a Pair of 16-bit values, or one float).
template <class R>
std::array<R, 32> reg(const std::array<std::array<R, 4>, 32>& r, int i) {
  std::array<R, 32> out{};
  for (int lane = 0; lane < 32; ++lane) out[lane] = r[lane][i];
  return out;
}

// warp_abt: acc (16 x n) = A M^T, A 16 x k, M n x k.
Acc abt(const Matrix& A, const Matrix& M, int k, int n) {
  Acc acc(n / 8);
  for (int kk = 0; kk < k / 16; ++kk) {
    const Regs af = ldmatrix_x4(
        A, [kk](int lane) { return a_address(lane, kk); }, false);
    for (int np = 0; np < n / 16; ++np) {
      const Regs bf = ldmatrix_x4(
          M, [np, kk](int lane) { return bt_address(lane, np, kk); }, false);
      mma(acc[2 * np], af, reg(bf, 0), reg(bf, 1));
      mma(acc[2 * np + 1], af, reg(bf, 2), reg(bf, 3));
    }
  }
  return acc;
}

// to_a_fragment then warp_pv: acc (16 x d) = P V, P the accumulator of a 16 x n product.
Acc pv(const Acc& p, const Matrix& V, int n, int d) {
  std::vector<Regs> frag(n / 16);
  for (int nt = 0; nt < n / 8; ++nt)
    for (int lane = 0; lane < 32; ++lane) {
      frag[nt / 2][lane][a_slot(nt, 0)] = {p[nt][lane][0], p[nt][lane][1]};
      frag[nt / 2][lane][a_slot(nt, 1)] = {p[nt][lane][2], p[nt][lane][3]};
    }
  Acc acc(d / 8);
  for (int kk = 0; kk < n / 16; ++kk)
    for (int dp = 0; dp < d / 16; ++dp) {
      const Regs bf = ldmatrix_x4(
          V, [kk, dp](int lane) { return b_address(lane, kk, dp); }, true);
      mma(acc[2 * dp], frag[kk], reg(bf, 0), reg(bf, 1));
      mma(acc[2 * dp + 1], frag[kk], reg(bf, 2), reg(bf, 3));
    }
  return acc;
}

// The accumulator as a 16 x cols matrix, each element placed by c_row / c_col.
Matrix dense(const Acc& acc) {
  Matrix m(16, std::vector<double>(acc.size() * 8, 0.0));
  for (size_t nt = 0; nt < acc.size(); ++nt)
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < 4; ++e)
        m[c_row(lane, e)][c_col(lane, static_cast<int>(nt), e)] = acc[nt][lane][e];
  return m;
}

Matrix product(const Matrix& a, const Matrix& b, bool transpose_b) {
  const size_t n = transpose_b ? b.size() : b[0].size(), k = a[0].size();
  Matrix c(a.size(), std::vector<double>(n, 0.0));
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < n; ++j)
      for (size_t x = 0; x < k; ++x) c[i][j] += a[i][x] * (transpose_b ? b[j][x] : b[x][j]);
  return c;
}

// S = Q K^T through `abt`, then S V with S's accumulators reused as A fragments through `pv`,
// at the (head dim, walked tile) shapes the kernels use: 32-128 with 64 keys, 256 with 32.
template <class Abt, class Pv>
void check_products(Abt abt_of, Pv pv_of, unsigned seed) {
  std::mt19937 rng(seed);
  for (const std::pair<int, int>& shape : {std::pair{32, 64}, {64, 64}, {128, 64}, {256, 32}}) {
    const int k = shape.first, n = shape.second;
    CAPTURE(k);
    CAPTURE(n);
    const Matrix q = random_matrix(16, k, rng), keys = random_matrix(n, k, rng);
    const Matrix v = random_matrix(n, k, rng);
    const Acc s = abt_of(q, keys, k, n);
    const Matrix s_dense = dense(s);
    CHECK(s_dense == product(q, keys, true));
    CHECK(dense(pv_of(s, v, n, k)) == product(s_dense, v, false));
  }
}

}  // namespace

TEST_CASE("tensor-core fragments: the kernels' ldmatrix addresses and mma layouts multiply") {
  check_products(abt, pv, 12);
}

TEST_CASE("tensor-core fragments: A read transposed from A^T gives A's own fragments") {
  // The dK/dV pass stages dS^T (keys x queries) and reads dS's A fragments from it
  // (at_address, ldmatrix .trans), for dQ += dS K.
  std::mt19937 rng(5);
  const Matrix A = random_matrix(16, 64, rng);
  Matrix At(64, std::vector<double>(16));
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 64; ++c) At[c][r] = A[r][c];
  for (int kk = 0; kk < 4; ++kk) {
    const Regs direct = ldmatrix_x4(
        A, [kk](int lane) { return a_address(lane, kk); }, false);
    const Regs transposed = ldmatrix_x4(
        At, [kk](int lane) { return at_address(lane, kk); }, true);
    CHECK(direct == transposed);
  }
}

namespace {

// The TF32 path (float32 split into TF32 halves): one value per register.
using Regs32 = std::array<std::array<double, 4>, 32>;

// ldmatrix.x4 on float rows: each 8 x 8 tile of 16-bit values is 8 rows of four floats; lane
// L receives row L / 4, 16-bit values 2 (L % 4) and 2 (L % 4) + 1, i.e. float L % 4.
template <class Address>
Regs32 ldmatrix_x4_floats(const Matrix& smem, Address address) {
  Regs32 r{};
  for (int m = 0; m < 4; ++m)
    for (int lane = 0; lane < 32; ++lane) {
      const RowCol at = address(8 * m + lane / 4);  // the lane that gave row lane / 4's address
      r[lane][m] = smem[at.row][at.col + lane % 4];
    }
  return r;
}

// mma.m16n8k8 .tf32: A a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); B b0 (t, g),
// b1 (t + 4, g); d as for m16n8k16.
void mma_tf32(std::array<std::array<double, 4>, 32>& d, const Regs32& a,
              const std::array<double, 32>& b0, const std::array<double, 32>& b1) {
  double A[16][8] = {}, B[8][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    A[g][t] = a[lane][0];
    A[g + 8][t] = a[lane][1];
    A[g][t + 4] = a[lane][2];
    A[g + 8][t + 4] = a[lane][3];
    B[t][g] = b0[lane];
    B[t + 4][g] = b1[lane];
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
      for (int k = 0; k < 8; ++k) d[lane][e] += A[row][k] * B[k][col];
    }
  }
}

// warp_abt for float: acc (16 x n) = A M^T.
Acc abt_tf32(const Matrix& A, const Matrix& M, int k, int n) {
  Acc acc(n / 8);
  for (int kk = 0; kk < k / 8; ++kk) {
    const Regs32 af = ldmatrix_x4_floats(A, [kk](int lane) { return a_address_tf32(lane, kk); });
    for (int np = 0; np < n / 16; ++np) {
      const Regs32 bf =
          ldmatrix_x4_floats(M, [np, kk](int lane) { return bt_address_tf32(lane, np, kk); });
      mma_tf32(acc[2 * np], af, reg(bf, 0), reg(bf, 1));
      mma_tf32(acc[2 * np + 1], af, reg(bf, 2), reg(bf, 3));
    }
  }
  return acc;
}

// to_a_fragment then warp_pv for float: acc (16 x d) = P V, each C tile of P one k-step, B
// read element by element in the matching (permuted) order.
Acc pv_tf32(const Acc& p, const Matrix& V, int n, int d) {
  Acc acc(d / 8);
  for (int kk = 0; kk < n / 8; ++kk) {
    Regs32 a{};
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < 4; ++e) a[lane][a_slot_tf32(e)] = p[kk][lane][e];
    for (int dt = 0; dt < d / 8; ++dt) {
      std::array<double, 32> b0{}, b1{};
      for (int lane = 0; lane < 32; ++lane) {
        b0[lane] = V[pv_b_row_tf32(lane, kk, 0)][dt * 8 + lane / 4];
        b1[lane] = V[pv_b_row_tf32(lane, kk, 1)][dt * 8 + lane / 4];
      }
      mma_tf32(acc[dt], a, b0, b1);
    }
  }
  return acc;
}

}  // namespace

TEST_CASE("TF32 fragments: float rows through ldmatrix, and P reused without a shuffle") {
  check_products(abt_tf32, pv_tf32, 13);
}
