// Tile products on Intel's AMX tile units (Sapphire Rapids and later), for the SDPA's tiled
// kernels. AMX multiplies bfloat16 pairs into float32 sums, and a product of two bfloat16 is
// exact in float32. An operand is given as one, two or three bfloat16 terms, x = h + m + l,
// each the rounding of what the terms before it left: one term is exact for bfloat16 data, two
// carry 16 significant bits (a relative error of at most 2^-17), three all of float32's 24.
// A product takes the partial products of the terms whose size is above float32's rounding:
// term i of A with term j of B where i + j <= 2 (with three terms each: hh, hm, mh, hl, lh, mm,
// the bf16x6 scheme of Henry, Tang and Heinecke, "Leveraging the bfloat16 artificial
// intelligence datatype for higher-precision computations", ARITH 2019). The SDPA multiplies
// bfloat16 q, k, v and dO as one term, float16 ones as two (both exact), and its float32 P and
// dS as two (cpu_sdpa_amx.h).
//
// What differs from float32 FMAs: the tile unit flushes subnormal inputs and results to zero,
// and a non-finite input turns into NaN in the terms after h.
//
// This file and amx_tiles.cpp are the only ones compiled for AMX (CMakeLists.txt): they share
// no inline code with the rest of the library, so nothing AMX or AVX-512 reaches a CPU that
// lacks it; callers ask available() first.
#pragma once
#include <cstdint>

namespace tg::cpu::amx {

// AMX-BF16 is on this CPU and the kernel lets this process use the tile registers (asked once).
bool available();

// Loads the tile configuration for the calling thread (every tile 16 rows x 64 bytes) and
// releases the tiles when it ends. Every product runs inside one.
class ThreadTiles {
 public:
  ThreadTiles();
  ~ThreadTiles();
  ThreadTiles(const ThreadTiles&) = delete;
  ThreadTiles& operator=(const ThreadTiles&) = delete;
};

constexpr int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }
constexpr int64_t round32(int64_t n) { return (n + 31) / 32 * 32; }

// An A operand (m x k): `terms` bfloat16 matrices (h, m, l), `split` elements apart, each row
// `ld` elements long (k and ld multiples of 32; rows in whole tiles of 16).
struct SplitA {
  const uint16_t* p;
  int64_t split, ld;
  int terms;
};
// A B operand (k x n) in AMX's pair layout: element (x, j) of each of the `terms` matrices at
// p[(x / 2) * ld + 2 * j + x % 2] (ld = 2 n' for n' >= n columns, a multiple of 16).
struct SplitB {
  const uint16_t* p;
  int64_t split, ld;
  int terms;
};

// Elements a split A of m x k in `terms` terms takes with rows of round32(k).
constexpr int64_t split_a_size(int64_t m, int64_t k, int terms) {
  return terms * round16(m) * round32(k);
}
// Elements a split B of k x n in `terms` terms takes.
constexpr int64_t split_b_size(int64_t k, int64_t n, int terms) {
  return terms * round32(k) * round16(n);
}

// The operands from floats, in `terms` terms (1 to 3; one term rounds each float to bfloat16,
// which is exact for bfloat16 data).
// A (m x k) from rows of floats, row i at src + i * ld; out holds split_a_size(m, k, terms):
// rows of ldo = round32(k), rows m .. round16(m) and columns k .. ldo zero.
SplitA split_rows(int64_t m, int64_t k, const float* src, int64_t ld, int terms, uint16_t* out);
// A (m x k) = the transpose of rows of floats: A(i, x) = src[x * ld + i].
SplitA split_columns(int64_t m, int64_t k, const float* src, int64_t ld, int terms, uint16_t* out);
// B (k x n) from rows of floats: B(x, j) = src[x * ld + j]; rows k .. round32(k + extra) and
// columns n .. round16(n) zero (`extra` zero rows let a product start at any even row of B and
// read whole 32-row steps: split_b_size(k + extra, n, terms) elements).
SplitB pair_rows(int64_t k, int64_t n, const float* src, int64_t ld, int terms, uint16_t* out,
                 int64_t extra = 0);
// B (k x n) = the transpose of rows of floats: B(x, j) = src[j * ld + x] (K^T from K's rows).
SplitB pair_columns(int64_t k, int64_t n, const float* src, int64_t ld, int terms, uint16_t* out);

// The operand that starts `rows` rows (A) or `cols` columns (B) further in.
inline SplitA rows_from(SplitA a, int64_t rows) {
  return {a.p + rows * a.ld, a.split, a.ld, a.terms};
}
inline SplitB rows_from(SplitB b, int64_t rows) {
  return {b.p + rows / 2 * b.ld, b.split, b.ld, b.terms};
}
inline SplitB columns_from(SplitB b, int64_t cols) {
  return {b.p + 2 * cols, b.split, b.ld, b.terms};
}

// C (m x n, row stride ldc) [+]= A B over k, where m and n are multiples of 16 and k of 32
// (A's columns and B's rows past the product's k read as zeros). Runs inside a ThreadTiles.
void gemm(int64_t m, int64_t n, int64_t k, SplitA a, SplitB b, float* c, int64_t ldc,
          bool accumulate);

}  // namespace tg::cpu::amx
