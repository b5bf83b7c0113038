// The warpgroup products of backends/cuda/cuda_wgmma.cuh, emulated (cuda_shim.h includes this;
// that file leaves them out under TG_CUDA_EMULATION). Shared-memory operands are read through
// their descriptors as the PTX ISA defines them ("Matrix Descriptor Format", "Shared Memory
// Matrix Layout"), decoded here on their own terms rather than with wgmma_layout.h's encoder,
// so that a kernel's stores and its descriptors must agree: the no-swizzle mode (core matrices
// of 8 rows of 16 bytes) and the 128-byte swizzle (address bits 4-6 XOR bits 7-9); the other
// modes and a nonzero base offset are faults. Each warp computes its own 16 rows of the group's
// 64 (A's rows 16 w .. 16 w + 15 for warp w of its group), exactly in double and rounded once,
// as mma.h does. They run asynchronously, as on the hardware: queued at issue, run at the
// wait_group that completes them, their accumulators NaN in between (runtime.h's defer), so a
// kernel that touches them, or changes the shared memory or registers they read, before that
// wait gets a wrong result. Each product is counted for its warp (note_warpgroup_product): the
// four warps of a group must issue the same number.
#pragma once
#include <cstdint>
#include <cstring>

#include "tests/cuda_emulator/mma.h"
#include "tests/cuda_emulator/runtime.h"

namespace tg::cuda::wgmma {

namespace emulated {
struct Descriptor {
  uint32_t start, leading, stride;
  unsigned base_offset, layout;
};
inline Descriptor decode(uint64_t d) {
  Descriptor x;
  x.start = static_cast<uint32_t>(d & 0x3fffu) << 4;
  x.leading = static_cast<uint32_t>((d >> 16) & 0x3fffu) << 4;
  x.stride = static_cast<uint32_t>((d >> 32) & 0x3fffu) << 4;
  x.base_offset = static_cast<unsigned>((d >> 49) & 7u);
  x.layout = static_cast<unsigned>(d >> 62);
  if (x.base_offset != 0 || x.layout > 1)
    ::tg::fail("cuda emulator", "wgmma descriptor: base offset ", x.base_offset, ", layout ",
               x.layout, " (emulated: base offset 0, layout 0 or 1)");
  return x;
}
inline uint32_t swizzle128(uint32_t a) { return a ^ (((a >> 7) & 7u) << 4); }
// The byte address of element (mn, k) of a K-major operand of kBytes-byte elements (2, or 4 for
// TF32): K contiguous in 16-byte chunks of kPer = 16 / kBytes. No swizzle: core matrix
// (mn / 8, k / kPer) at (mn / 8) stride + (k / kPer) leading, its rows 16 bytes apart. 128-byte
// swizzle: rows of 128 bytes, 8-row groups `stride` apart.
template <unsigned kBytes = 2>
uint32_t k_major_at(const Descriptor& d, unsigned mn, unsigned k) {
  constexpr unsigned kPer = 16 / kBytes;
  if (d.layout == 0)
    return d.start + (mn % 8) * 16 + (mn / 8) * d.stride + (k / kPer) * d.leading +
           (k % kPer) * kBytes;
  return swizzle128(d.start + (mn % 8) * 128 + (mn / 8) * d.stride + (k / kPer) * 16 +
                    (k % kPer) * kBytes);
}
// ... of an MN-major operand: MN contiguous. No swizzle: core matrix (k / 8, mn / 8) at
// (mn / 8) stride + (k / 8) leading, its rows (k) 16 bytes apart. 128-byte swizzle: rows (k) of
// 64 values, 128 bytes apart; 8-row groups `stride` apart, 64-value panels `leading` apart.
inline uint32_t mn_major_at(const Descriptor& d, unsigned k, unsigned mn) {
  if (d.layout == 0)
    return d.start + (mn % 8) * 2 + (mn / 8) * d.stride + (k % 8) * 16 + (k / 8) * d.leading;
  return swizzle128(d.start + (mn % 64) * 2 + (mn / 64) * d.leading + (k % 8) * 128 +
                    (k / 8) * d.stride);
}
template <class S>
double value_at(uint32_t address) {
  uint16_t bits;
  std::memcpy(&bits, ::tg::cuda_emulator::shared_at(address, 2), 2);
  return mma::emulated::widen<S>(bits);
}
// A float32 element read as TF32 (its low 13 mantissa bits ignored, as the hardware does).
inline double tf32_at(uint32_t address) {
  uint32_t bits;
  std::memcpy(&bits, ::tg::cuda_emulator::shared_at(address, 4), 4);
  return mma::emulated::tf32_value(bits);
}
struct In {
  uint32_t a[4];
  uint64_t da, db;
  uint32_t accumulate;
};
// This lane's accumulators of the warp's 16 rows of the group's product over kK values of k,
// a(row, k) and b(k, col) as the caller reads them (row: 0-63 in the group).
template <int kN, unsigned kK = 16, class A, class B>
void multiply(float (&d)[kN / 8][4], bool accumulate, const A& a, const B& b) {
  const unsigned lane = ::tg::cuda_emulator::thread_idx().x % 32, g = lane / 4, t = lane % 4;
  const unsigned w = (::tg::cuda_emulator::thread_idx().x / 32) % 4;
  if (::tg::cuda_emulator::block_dim().x % 128 != 0)
    ::tg::fail("cuda emulator", "wgmma in a block of ", ::tg::cuda_emulator::block_dim().x,
               " threads, not whole warpgroups");
  for (int i = 0; i < kN / 8; ++i) {
    for (unsigned e = 0; e < 4; ++e) {
      const unsigned row = 16 * w + g + 8 * (e / 2), col = 8 * i + 2 * t + e % 2;
      double sum = accumulate ? d[i][e] : 0.0;
      for (unsigned k = 0; k < kK; ++k) sum += a(row, k) * b(k, col);
      d[i][e] = static_cast<float>(sum);
    }
  }
}
// The warp's inputs, checked to be the same in every lane (descriptors, the accumulate flag).
inline const unsigned char* gather(const In& in) {
  const unsigned char* all = ::tg::cuda_emulator::warp_exchange("wgmma", &in, sizeof in);
  for (unsigned l = 1; l < 32; ++l) {
    const In& x = *reinterpret_cast<const In*>(all + l * ::tg::cuda_emulator::kSlot);
    const In& y = *reinterpret_cast<const In*>(all);
    if (x.da != y.da || x.db != y.db || x.accumulate != y.accumulate)
      ::tg::fail("cuda emulator", "wgmma: lanes of a warp with different descriptors");
  }
  return all;
}
}  // namespace emulated

inline void fence() {}
inline void commit() { ::tg::cuda_emulator::commit_deferred(); }
template <int kPending>
void wait() {
  ::tg::cuda_emulator::wait_deferred(kPending);
}
inline void fence_async_shared() { ::tg::cuda_emulator::fence_proxy_async(); }
inline void named_sync(int id, int count) {
  ::tg::cuda_emulator::named_sync(static_cast<unsigned>(id), static_cast<unsigned>(count));
}
inline void named_arrive(int id, int count) {
  ::tg::cuda_emulator::named_arrive(static_cast<unsigned>(id), static_cast<unsigned>(count));
}
template <int kRegisters>
void raise_registers() {}
template <int kRegisters>
void lower_registers() {}
template <int kTiles>
void fence_operand(float (&)[kTiles][4]) {}
inline uint32_t shared_address(const void* p) { return ::tg::cuda_emulator::shared_offset(p); }

// Each product runs at the wait that completes it (runtime.h's defer): shared memory and A's
// registers are read then, and d reads NaN until then.
template <class S, int kN>
void product_ss(float (&d)[kN / 8][4], uint64_t a, uint64_t b, bool accumulate) {
  using namespace emulated;
  ::tg::cuda_emulator::note_warpgroup_product();
  float(*dp)[4] = d;
  ::tg::cuda_emulator::defer(&d[0][0], kN / 2, [dp, a, b, accumulate] {
    const In& in = *reinterpret_cast<const In*>(gather(In{{}, a, b, accumulate ? 1u : 0u}));
    const Descriptor da = decode(in.da), db = decode(in.db);
    multiply<kN>(
        *reinterpret_cast<float(*)[kN / 8][4]>(dp), accumulate,
        [&](unsigned r, unsigned k) { return value_at<S>(k_major_at(da, r, k)); },
        [&](unsigned k, unsigned n) { return value_at<S>(k_major_at(db, n, k)); });
  });
}

template <class S, int kN, bool kMnMajorB>
void product_rs_any(float (&d)[kN / 8][4], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  using namespace emulated;
  ::tg::cuda_emulator::note_warpgroup_product();
  float(*dp)[4] = d;
  const uint32_t* ap = a;
  ::tg::cuda_emulator::defer(&d[0][0], kN / 2, [dp, ap, b, accumulate] {
    const unsigned char* all = gather(In{{ap[0], ap[1], ap[2], ap[3]}, 0, b, accumulate ? 1u : 0u});
    const Descriptor db = decode(reinterpret_cast<const In*>(all)->db);
    // A's registers: mma.m16n8k16's layout for the warp's 16 rows (mma.h's mma_16816).
    const auto A = [&](unsigned r, unsigned c) {
      const In& x = *reinterpret_cast<const In*>(all + ((r % 8) * 4 + (c % 8) / 2) *
                                                           ::tg::cuda_emulator::kSlot);
      return mma::emulated::widen<S>(mma::emulated::half_of(
          x.a[((r % 16) >= 8 ? 1 : 0) + (c >= 8 ? 2 : 0)], static_cast<int>(c % 2)));
    };
    multiply<kN>(*reinterpret_cast<float(*)[kN / 8][4]>(dp), accumulate, A,
                 [&](unsigned k, unsigned n) {
                   return value_at<S>(kMnMajorB ? mn_major_at(db, k, n) : k_major_at(db, n, k));
                 });
  });
}
template <class S, int kN>
void product_rs(float (&d)[kN / 8][4], const uint32_t (&a)[4], uint64_t b) {
  product_rs_any<S, kN, true>(d, a, b, true);
}
template <class S, int kN>
void product_rs_kmajor(float (&d)[kN / 8][4], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  product_rs_any<S, kN, false>(d, a, b, accumulate);
}

// TF32 (cuda_wgmma.cuh): k = 8 a step, A and B K-major, float32 elements read as TF32.
template <int kN>
void product_ss_tf32(float (&d)[kN / 8][4], uint64_t a, uint64_t b, bool accumulate) {
  using namespace emulated;
  ::tg::cuda_emulator::note_warpgroup_product();
  float(*dp)[4] = d;
  ::tg::cuda_emulator::defer(&d[0][0], kN / 2, [dp, a, b, accumulate] {
    const In& in = *reinterpret_cast<const In*>(gather(In{{}, a, b, accumulate ? 1u : 0u}));
    const Descriptor da = decode(in.da), db = decode(in.db);
    multiply<kN, 8>(
        *reinterpret_cast<float(*)[kN / 8][4]>(dp), accumulate,
        [&](unsigned r, unsigned k) { return tf32_at(k_major_at<4>(da, r, k)); },
        [&](unsigned k, unsigned n) { return tf32_at(k_major_at<4>(db, n, k)); });
  });
}
template <int kN>
void product_rs_tf32(float (&d)[kN / 8][4], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  using namespace emulated;
  ::tg::cuda_emulator::note_warpgroup_product();
  float(*dp)[4] = d;
  const uint32_t* ap = a;
  ::tg::cuda_emulator::defer(&d[0][0], kN / 2, [dp, ap, b, accumulate] {
    const unsigned char* all = gather(In{{ap[0], ap[1], ap[2], ap[3]}, 0, b, accumulate ? 1u : 0u});
    const Descriptor db = decode(reinterpret_cast<const In*>(all)->db);
    // A's registers: mma.m16n8k8's TF32 layout for the warp's 16 rows (mma.h's mma_1688_tf32).
    const auto A = [&](unsigned r, unsigned c) {
      const In& x =
          *reinterpret_cast<const In*>(all + ((r % 8) * 4 + c % 4) * ::tg::cuda_emulator::kSlot);
      return mma::emulated::tf32_value(x.a[((r % 16) >= 8 ? 1 : 0) + (c >= 4 ? 2 : 0)]);
    };
    multiply<kN, 8>(*reinterpret_cast<float(*)[kN / 8][4]>(dp), accumulate, A,
                    [&](unsigned k, unsigned n) { return tf32_at(k_major_at<4>(db, n, k)); });
  });
}

}  // namespace tg::cuda::wgmma
