// The PTX wrappers of backends/cuda/cuda_mma.cuh, emulated (cuda_shim.h includes this; that
// file leaves them out under TG_CUDA_EMULATION): ldmatrix and mma.sync as the PTX ISA defines
// their fragments ("Matrix fragments for mma.m16n8k16" and "... mma.m16n8k8" with .tf32,
// "ldmatrix"), the lanes' registers gathered by one warp exchange each. Sums run in double and
// are rounded once; TF32 operands keep only their top 19 bits, as the tensor cores read them.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tests/cuda_emulator/runtime.h"

namespace tg::cuda::mma {

namespace emulated {
inline unsigned lane() { return ::tg::cuda_emulator::thread_idx().x % 32; }
inline const unsigned char* slot(const unsigned char* all, unsigned lane) {
  return all + lane * ::tg::cuda_emulator::kSlot;
}
inline uint16_t half_of(uint32_t r, int h) {
  return static_cast<uint16_t>(h ? r >> 16 : r & 0xffffu);
}
template <class S>
double widen(uint16_t bits) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  } else {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  }
}
inline double tf32_value(uint32_t r) {
  const uint32_t u = r & 0xffffe000u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// ldmatrix.x4: lanes 8 m .. 8 m + 7 point at the rows of 8 x 8 tile m; lane L receives row L / 4,
// values 2 (L % 4), 2 (L % 4) + 1 of each (of its transpose with `trans`).
inline void ldmatrix(uint32_t (&r)[4], const void* row, bool trans) {
  const unsigned char* all = ::tg::cuda_emulator::warp_exchange("ldmatrix", &row, sizeof row);
  const unsigned L = lane(), g = L / 4, t = L % 4;
  const auto row_of = [&](unsigned l) {
    const uint16_t* p;
    std::memcpy(&p, slot(all, l), sizeof p);
    return p;
  };
  for (unsigned m = 0; m < 4; ++m) {
    uint16_t v[2];
    for (unsigned h = 0; h < 2; ++h)
      v[h] = trans ? row_of(8 * m + 2 * t + h)[g] : row_of(8 * m + g)[2 * t + h];
    r[m] = static_cast<uint32_t>(v[0]) | static_cast<uint32_t>(v[1]) << 16;
  }
}
struct MmaIn {
  uint32_t a[4], b[2];
};
inline const unsigned char* exchange(const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const MmaIn in{{a[0], a[1], a[2], a[3]}, {b0, b1}};
  return ::tg::cuda_emulator::warp_exchange("mma", &in, sizeof in);
}
inline const MmaIn& in_of(const unsigned char* all, unsigned l) {
  return *reinterpret_cast<const MmaIn*>(slot(all, l));
}
// d += A B for this lane's C elements (row g, columns 2t, 2t + 1; then row g + 8), a(r, c) and
// b(k, n) reading the warp's gathered operands: each sum exact in double, rounded once.
template <unsigned kK, class A, class B>
void accumulate(float (&d)[4], const A& a, const B& b) {
  const unsigned g = lane() / 4, t = lane() % 4;
  for (unsigned e = 0; e < 4; ++e) {
    const unsigned row = g + 8 * (e / 2), col = 2 * t + e % 2;
    double sum = d[e];
    for (unsigned k = 0; k < kK; ++k) sum += a(row, k) * b(k, col);
    d[e] = static_cast<float>(sum);
  }
}
}  // namespace emulated

inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) { emulated::ldmatrix(r, row, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  emulated::ldmatrix(r, row, true);
}

// m16n8k16: A (16 x 16) a0 row g, columns 2t, 2t + 1; a1 row g + 8; a2, a3 the same rows at
// columns 2t + 8, 2t + 9. B (16 x 8) b0 rows 2t, 2t + 1 of column g; b1 rows 2t + 8, 2t + 9.
template <class S>
void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  using namespace emulated;
  const unsigned char* all = exchange(a, b0, b1);
  const auto A = [&](unsigned r, unsigned c) {
    const MmaIn& x = in_of(all, (r % 8) * 4 + (c % 8) / 2);
    return widen<S>(half_of(x.a[(r >= 8 ? 1 : 0) + (c >= 8 ? 2 : 0)], static_cast<int>(c % 2)));
  };
  const auto B = [&](unsigned k, unsigned n) {
    const MmaIn& x = in_of(all, n * 4 + (k % 8) / 2);
    return widen<S>(half_of(x.b[k >= 8 ? 1 : 0], static_cast<int>(k % 2)));
  };
  accumulate<16>(d, A, B);
}

// m16n8k8 .tf32: A (16 x 8) a0 row g, column t; a1 row g + 8; a2, a3 the same rows at column
// t + 4. B (8 x 8) b0 row t of column g, b1 row t + 4.
inline void mma_1688_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  using namespace emulated;
  const unsigned char* all = exchange(a, b0, b1);
  const auto A = [&](unsigned r, unsigned c) {
    return tf32_value(in_of(all, (r % 8) * 4 + c % 4).a[(r >= 8 ? 1 : 0) + (c >= 4 ? 2 : 0)]);
  };
  const auto B = [&](unsigned k, unsigned n) {
    return tf32_value(in_of(all, n * 4 + k % 4).b[k >= 4 ? 1 : 0]);
  };
  accumulate<8>(d, A, B);
}

inline void cp_async_16(void* dst, const void* src, bool valid) {
  ::tg::cuda_emulator::async_copy(dst, src, valid, 16);
}
inline void cp_async_4(void* dst, const void* src, bool valid) {
  ::tg::cuda_emulator::async_copy(dst, src, valid, 4);
}
inline void cp_async_commit() { ::tg::cuda_emulator::async_commit(); }
template <int kPending>
void cp_async_wait() {
  ::tg::cuda_emulator::async_wait(kPending);
}

// Global atomic adds: the emulator runs one thread at a time, so a plain add is atomic.
inline void atomic_add2(float* p, float x, float y) {
  p[0] += x;
  p[1] += y;
}
inline void atomic_add(float* p, float x) { *p += x; }
inline void atomic_add_u64(unsigned long long* p, unsigned long long x) { *p += x; }

// min.NaN.f32: NaN where either is.
inline float min_nan(float x, float y) { return x != x || y != y ? NAN : x > y ? y : x; }

// ex2.approx.ftz.f32: results below the smallest normal float are 0.
inline float exp2_ftz(float x) {
  const float y = std::exp2(x);
  return y < FLT_MIN ? 0.0f : y;
}

}  // namespace tg::cuda::mma
