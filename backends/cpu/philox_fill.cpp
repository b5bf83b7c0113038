// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
// SC'11) over vectors of blocks: lane l of a batch runs the ten rounds for block block0 + l.
// Each 32-bit counter word sits in a 64-bit lane so that a round's two 32 x 32 -> 64 products
// are one unsigned even-lane multiply each (vpmuludq). Checked bit for bit against
// core/philox.h (Random123) by test_cpu_kernels.
#include "backends/cpu/philox_fill.h"

#include "backends/cpu/simd.h"
#include "core/philox.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace tg::cpu {
namespace {

using V = simd::Vec<uint64_t>;
constexpr int kLanes = simd::kLanes<uint64_t>;
constexpr int kVectors = 2;  // two independent chains per round for the multiplier's latency
constexpr int kBlocks = kLanes * kVectors;

// a * b for the low 32 bits of every lane (the high halves are zero here).
inline V mul32(V a, V b) {
#if defined(__AVX512F__)
  // The zero-masked form: _mm512_mul_epu32's undefined pass-through operand trips GCC 12's
  // -Wmaybe-uninitialized.
  return reinterpret_cast<V>(
      _mm512_maskz_mul_epu32(0xFF, reinterpret_cast<__m512i>(a), reinterpret_cast<__m512i>(b)));
#elif defined(__AVX2__)
  return reinterpret_cast<V>(
      _mm256_mul_epu32(reinterpret_cast<__m256i>(a), reinterpret_cast<__m256i>(b)));
#elif defined(__SSE2__) && !defined(__AVX__)
  return reinterpret_cast<V>(
      _mm_mul_epu32(reinterpret_cast<__m128i>(a), reinterpret_cast<__m128i>(b)));
#else  // AVX without AVX2, or not x86: the compiler's 64-bit product
  return a * b;
#endif
}

// The four words of blocks block0 .. block0 + kBlocks - 1: w[j][l] is word j of block0 + l.
void philox_blocks(uint64_t seed, uint64_t block0, uint32_t (&w)[4][kBlocks]) {
  const V lo32 = simd::splat<uint64_t>(0xFFFFFFFFu);
  const V m0 = simd::splat<uint64_t>(0xD2511F53u), m1 = simd::splat<uint64_t>(0xCD9E8D57u);
  V c0[kVectors], c1[kVectors], c2[kVectors], c3[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    V b;
    for (int l = 0; l < kLanes; ++l) b[l] = block0 + v * kLanes + l;
    c0[v] = b & lo32;
    c1[v] = b >> 32;
    c2[v] = V{};
    c3[v] = V{};
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const V key0 = simd::splat<uint64_t>(k0), key1 = simd::splat<uint64_t>(k1);
#pragma GCC unroll 2
    for (int v = 0; v < kVectors; ++v) {
      const V p0 = mul32(c0[v], m0), p1 = mul32(c2[v], m1);
      c0[v] = (p1 >> 32) ^ c1[v] ^ key0;
      c2[v] = (p0 >> 32) ^ c3[v] ^ key1;
      c1[v] = p1 & lo32;
      c3[v] = p0 & lo32;
    }
    k0 += 0x9E3779B9u;  // the Weyl sequence that bumps the key between rounds
    k1 += 0xBB67AE85u;
  }
  for (int v = 0; v < kVectors; ++v)
    for (int l = 0; l < kLanes; ++l) {
      w[0][v * kLanes + l] = static_cast<uint32_t>(c0[v][l]);
      w[1][v * kLanes + l] = static_cast<uint32_t>(c1[v][l]);
      w[2][v * kLanes + l] = static_cast<uint32_t>(c2[v][l]);
      w[3][v * kLanes + l] = static_cast<uint32_t>(c3[v][l]);
    }
}

}  // namespace

void philox_uniforms(uint64_t seed, uint64_t pos, int64_t n, float* out) {
  int64_t i = 0;
  for (; i < n && (pos + i) % 4 != 0; ++i) out[i] = philox_uniform(seed, pos + i);
  uint32_t w[4][kBlocks];
  for (; i + 4 * kBlocks <= n; i += 4 * kBlocks) {
    philox_blocks(seed, (pos + i) / 4, w);
    for (int l = 0; l < kBlocks; ++l)
      for (int j = 0; j < 4; ++j) out[i + 4 * l + j] = philox_word_to_uniform(w[j][l]);
  }
  for (; i < n; ++i) out[i] = philox_uniform(seed, pos + i);
}

}  // namespace tg::cpu
