// AMX tile products of operands in bfloat16 terms (see amx_tiles.h). Compiled
// with AVX-512BW and AMX enabled whatever the build targets, and called only after available().
#include "backends/cpu/amx_tiles.h"

#include <cstdlib>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BW__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tg::cpu::amx {
namespace {

bool cpu_has_amx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx512 = (b >> 16 & 1) && (b >> 30 & 1);  // AVX-512F, AVX-512BW
  const bool tiles = (d >> 24 & 1) && (d >> 22 & 1);   // AMX-TILE, AMX-BF16
  if (!avx512 || !tiles) return false;
  // The OS saves the AVX-512 state (XCR0 bits 5-7) ...
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) return false;  // OSXSAVE
  if ((_xgetbv(0) & 0xe0) != 0xe0) return false;
  // ... and lets this process use the tile data (Linux asks for it per process).
  constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// x rounded to bfloat16 (to nearest, ties away from zero: two instructions where ties to even
// takes five, and the split's terms only need each to be within half an ulp), as float32 bits
// whose low 16 are zero.
inline __m512i round_bf16(__m512 x) {
  const __m512i r = _mm512_add_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(0x8000));
  return _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
}

// The words 1, 3, ..., 63 of two vectors: the high halves of their 32 lanes, in order.
inline __m512i odd_words() {
  alignas(64) int16_t idx[32];
  for (int i = 0; i < 32; ++i) idx[i] = static_cast<int16_t>(2 * i + 1);
  return _mm512_load_si512(idx);
}

// The first `terms` bfloat16 terms of 32 floats (lo's 16, then hi's), to out[0], out[split]
// and out[2 * split]: in order (`pair` false: 32 bfloat16 of one row), or as the pairs (lo[j],
// hi[j]) of two rows (`pair` true).
template <bool kPairs>
[[gnu::always_inline]] inline void store_terms(__m512 lo, __m512 hi, __m512i odd, uint16_t* out,
                                               int64_t split, int terms) {
  for (int t = 0; t < terms; ++t) {
    const __m512i a = round_bf16(lo), b = round_bf16(hi);
    const __m512i w = kPairs ? _mm512_or_si512(_mm512_srli_epi32(a, 16), b)
                             : _mm512_permutex2var_epi16(a, odd, b);
    _mm512_storeu_si512(out + t * split, w);
    lo = _mm512_sub_ps(lo, _mm512_castsi512_ps(a));
    hi = _mm512_sub_ps(hi, _mm512_castsi512_ps(b));
  }
}

inline __mmask16 first(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}
inline __m512 load16(const float* p, int64_t n) {
  return n <= 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(first(n), p);
}

// C (16 MR x 16 NR) [+]= A B. B's terms are loaded once a k step and A's up to twice (h up to
// three times): the callers' A is a tile's own operand in L1, B often a head's keys or values
// in L2.
template <int MR, int NR>
void block(int64_t k, SplitA a, SplitB b, float* c, int64_t ldc, bool accumulate) {
  // Tiles: C 0-3 (row i, column j at 2 i + j), A 4-5, B 6-7.
  const int64_t cs = ldc * 4;
  if (accumulate) {
    _tile_loadd(0, c, cs);
    if constexpr (NR == 2) _tile_loadd(1, c + 16, cs);
    if constexpr (MR == 2) _tile_loadd(2, c + 16 * ldc, cs);
    if constexpr (MR == 2 && NR == 2) _tile_loadd(3, c + 16 * ldc + 16, cs);
  } else {
    _tile_zero(0);
    if constexpr (NR == 2) _tile_zero(1);
    if constexpr (MR == 2) _tile_zero(2);
    if constexpr (MR == 2 && NR == 2) _tile_zero(3);
  }
  const int64_t as = a.ld * 2, bs = b.ld * 2;
  for (int64_t x = 0; x < k; x += 32) {
    const uint16_t* ap = a.p + x;
    const uint16_t* bp = b.p + x / 2 * b.ld;
    const auto load_a = [&](int s) {
      _tile_loadd(4, ap + s * a.split, as);
      if constexpr (MR == 2) _tile_loadd(5, ap + s * a.split + 16 * a.ld, as);
    };
    const auto load_b = [&](int s) {
      _tile_loadd(6, bp + s * b.split, bs);
      if constexpr (NR == 2) _tile_loadd(7, bp + s * b.split + 32, bs);
    };
    const auto products = [] {
      _tile_dpbf16ps(0, 4, 6);
      if constexpr (NR == 2) _tile_dpbf16ps(1, 4, 7);
      if constexpr (MR == 2) _tile_dpbf16ps(2, 5, 6);
      if constexpr (MR == 2 && NR == 2) _tile_dpbf16ps(3, 5, 7);
    };
    // hh, mh, lh; hm, mm; hl: term i of A with term j of B where i + j <= 2 (A's one term
    // loaded once).
    if (a.terms == 1) {
      load_a(0);
      for (int j = 0; j < b.terms; ++j) {
        load_b(j);
        products();
      }
      continue;
    }
    for (int j = 0; j < b.terms; ++j) {
      load_b(j);
      for (int i = 0; i < a.terms && i + j <= 2; ++i) {
        load_a(i);
        products();
      }
    }
  }
  _tile_stored(0, c, cs);
  if constexpr (NR == 2) _tile_stored(1, c + 16, cs);
  if constexpr (MR == 2) _tile_stored(2, c + 16 * ldc, cs);
  if constexpr (MR == 2 && NR == 2) _tile_stored(3, c + 16 * ldc + 16, cs);
}

// A column block of C, 16 NR wide, all m rows: B's block is then read from L2 once and from L1
// for the rest of the rows.
template <int NR>
void column_block(int64_t m, int64_t k, SplitA a, SplitB b, float* c, int64_t ldc,
                  bool accumulate) {
  int64_t i = 0;
  for (; i + 32 <= m; i += 32) block<2, NR>(k, rows_from(a, i), b, c + i * ldc, ldc, accumulate);
  if (i < m) block<1, NR>(k, rows_from(a, i), b, c + i * ldc, ldc, accumulate);
}

}  // namespace

bool available() {
  static const bool ok = cpu_has_amx();
  return ok;
}

ThreadTiles::ThreadTiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // g++ 12's _tile_loadconfig tells the compiler it reads 8 bytes of the configuration, so the
  // stores above would be dropped as dead without this barrier.
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}
ThreadTiles::~ThreadTiles() { _tile_release(); }

SplitA split_rows(int64_t m, int64_t k, const float* src, int64_t ld, int terms, uint16_t* out) {
  const int64_t ldo = round32(k), m16 = round16(m), split = m16 * ldo;
  const __m512i odd = odd_words();
  for (int64_t i = 0; i < m16; ++i) {
    const float* row = src + i * ld;
    uint16_t* o = out + i * ldo;
    if (i >= m) {
      for (int64_t x = 0; x < ldo; x += 32)
        store_terms<false>(_mm512_setzero_ps(), _mm512_setzero_ps(), odd, o + x, split, terms);
      continue;
    }
    int64_t x = 0;
    for (; x + 32 <= k; x += 32)
      store_terms<false>(_mm512_loadu_ps(row + x), _mm512_loadu_ps(row + x + 16), odd, o + x, split,
                         terms);
    for (; x < ldo; x += 32)
      store_terms<false>(load16(row + x, k - x), load16(row + x + 16, k - x - 16), odd, o + x,
                         split, terms);
  }
  return {out, split, ldo, terms};
}

SplitA split_columns(int64_t m, int64_t k, const float* src, int64_t ld, int terms, uint16_t* out) {
  // Transposed a 16 x 16 block at a time through a float scratch block, then split by rows.
  const int64_t ldo = round32(k), m16 = round16(m), split = m16 * ldo;
  alignas(64) float t[16 * 32];
  const __m512i odd = odd_words();
  for (int64_t i0 = 0; i0 < m16; i0 += 16) {
    for (int64_t x0 = 0; x0 < ldo; x0 += 32) {
      for (int64_t x = 0; x < 32; ++x) {
        for (int64_t i = 0; i < 16; ++i) {
          const bool in = i0 + i < m && x0 + x < k;
          t[i * 32 + x] = in ? src[(x0 + x) * ld + i0 + i] : 0.0f;
        }
      }
      for (int64_t i = 0; i < 16; ++i)
        store_terms<false>(_mm512_load_ps(t + i * 32), _mm512_load_ps(t + i * 32 + 16), odd,
                           out + (i0 + i) * ldo + x0, split, terms);
    }
  }
  return {out, split, ldo, terms};
}

SplitB pair_rows(int64_t k, int64_t n, const float* src, int64_t ld, int terms, uint16_t* out,
                 int64_t extra) {
  const int64_t n16 = round16(n), ldo = 2 * n16, k32 = round32(k + extra), split = k32 / 2 * ldo;
  for (int64_t x = 0; x < k32; x += 2) {
    for (int64_t j = 0; j < n16; j += 16) {
      const __m512 lo = x < k ? load16(src + x * ld + j, n - j) : _mm512_setzero_ps();
      const __m512 hi = x + 1 < k ? load16(src + (x + 1) * ld + j, n - j) : _mm512_setzero_ps();
      store_terms<true>(lo, hi, _mm512_setzero_si512(), out + x / 2 * ldo + 2 * j, split, terms);
    }
  }
  return {out, split, ldo, terms};
}

// Element x of 16 rows of floats, row j at col + j * ld (rows outside `in` read as 0): two gathers
// of 8 with 64-bit offsets (off0 and off1 hold j * ld for rows 0-7 and 8-15), so that no row
// stride is too long for them.
inline __m512 gather_column(const float* col, __m512i off0, __m512i off1, __mmask16 in) {
  const __m256 lo =
      _mm512_mask_i64gather_ps(_mm256_setzero_ps(), static_cast<__mmask8>(in), off0, col, 4);
  const __m256 hi =
      _mm512_mask_i64gather_ps(_mm256_setzero_ps(), static_cast<__mmask8>(in >> 8), off1, col, 4);
  // (insertf64x4: insertf32x8 would need AVX-512DQ, which this file is not compiled for.)
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

SplitB pair_columns(int64_t k, int64_t n, const float* src, int64_t ld, int terms, uint16_t* out) {
  // Column j of B is row j of src: 16 columns' elements x and x + 1 are gathered and then paired
  // as pair_rows pairs two rows. (A transpose of 16 x 16 blocks through scratch memory, with
  // a scalar store per element, took 3.0% of a bfloat16 forward+backward at (1, 8, 1024, 64) on
  // an Intel AVX-512 core; the gathers 1.1%.)
  const int64_t n16 = round16(n), ldo = 2 * n16, k32 = round32(k), split = k32 / 2 * ldo;
  const __m512i off0 = _mm512_setr_epi64(0, ld, 2 * ld, 3 * ld, 4 * ld, 5 * ld, 6 * ld, 7 * ld);
  const __m512i off1 = _mm512_add_epi64(off0, _mm512_set1_epi64(8 * ld));
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t j0 = 0; j0 < n16; j0 += 16) {
    const __mmask16 in = first(n - j0);
    const float* col = src + j0 * ld;
    for (int64_t x = 0; x < k32; x += 2) {
      const __m512 lo = x < k ? gather_column(col + x, off0, off1, in) : zero;
      const __m512 hi = x + 1 < k ? gather_column(col + x + 1, off0, off1, in) : zero;
      store_terms<true>(lo, hi, _mm512_setzero_si512(), out + x / 2 * ldo + 2 * j0, split, terms);
    }
  }
  return {out, split, ldo, terms};
}

void gemm(int64_t m, int64_t n, int64_t k, SplitA a, SplitB b, float* c, int64_t ldc,
          bool accumulate) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) column_block<2>(m, k, a, columns_from(b, j), c + j, ldc, accumulate);
  if (j < n) column_block<1>(m, k, a, columns_from(b, j), c + j, ldc, accumulate);
}

}  // namespace tg::cpu::amx

#else  // a compiler without AMX: available() is false and nothing else is called

#include <cstdio>

namespace tg::cpu::amx {
namespace {
[[noreturn]] void unreachable() {
  std::fputs("tapegrad: AMX product called in a build without AMX\n", stderr);
  std::abort();
}
}  // namespace
bool available() { return false; }
ThreadTiles::ThreadTiles() { unreachable(); }
ThreadTiles::~ThreadTiles() { unreachable(); }
SplitA split_rows(int64_t, int64_t, const float*, int64_t, int, uint16_t*) { unreachable(); }
SplitA split_columns(int64_t, int64_t, const float*, int64_t, int, uint16_t*) { unreachable(); }
SplitB pair_rows(int64_t, int64_t, const float*, int64_t, int, uint16_t*, int64_t) {
  unreachable();
}
SplitB pair_columns(int64_t, int64_t, const float*, int64_t, int, uint16_t*) { unreachable(); }
void gemm(int64_t, int64_t, int64_t, SplitA, SplitB, float*, int64_t, bool) { unreachable(); }
}  // namespace tg::cpu::amx

#endif
