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
namespace emulated {
// Queues d (+)= A B over kK values of k: at the wait, the warp's inputs (make_in(), built then)
// are gathered, and a_of(all, in) and b_of(B's descriptor) give the readers a(row, k), b(k, col).
template <int kN, unsigned kK, class MakeIn, class AOf, class BOf>
void queue(float (&d)[kN / 8][4], bool accumulate, MakeIn make_in, AOf a_of, BOf b_of) {
  ::tg::cuda_emulator::note_warpgroup_product();
  float(*dp)[4] = d;
  ::tg::cuda_emulator::defer(&d[0][0], kN / 2, [dp, accumulate, make_in, a_of, b_of] {
    const unsigned char* all = gather(make_in());
    const In& in = *reinterpret_cast<const In*>(all);
    multiply<kN, kK>(*reinterpret_cast<float(*)[kN / 8][4]>(dp), accumulate, a_of(all, in),
                     b_of(decode(in.db)));
  });
}
// A from shared memory, K-major, read by `read` (an element's value at a byte address).
template <unsigned kBytes, class Read>
auto shared_a(Read read) {
  return [read](const unsigned char*, const In& in) {
    const Descriptor da = decode(in.da);
    return [da, read](unsigned r, unsigned k) { return read(k_major_at<kBytes>(da, r, k)); };
  };
}
// B from shared memory, K-major or (kMnMajor, 16-bit only) MN-major.
template <unsigned kBytes, bool kMnMajor, class Read>
auto shared_b(Read read) {
  return [read](const Descriptor& db) {
    return [db, read](unsigned k, unsigned n) {
      return read(kMnMajor ? mn_major_at(db, k, n) : k_major_at<kBytes>(db, n, k));
    };
  };
}
// The lane of the warp holding A's register for (row r, column c) and which of its four, in
// mma.m16n8k16's 16-bit layout (kTf32 false) or mma.m16n8k8's TF32 one, and the value.
template <bool kTf32, class S>
auto register_a() {
  return [](const unsigned char* all, const In&) {
    return [all](unsigned r, unsigned c) {
      const unsigned lane = kTf32 ? (r % 8) * 4 + c % 4 : (r % 8) * 4 + (c % 8) / 2;
      const In& x = *reinterpret_cast<const In*>(all + lane * ::tg::cuda_emulator::kSlot);
      if constexpr (kTf32) {
        return mma::emulated::tf32_value(x.a[((r % 16) >= 8 ? 1 : 0) + (c >= 4 ? 2 : 0)]);
      } else {
        return mma::emulated::widen<S>(mma::emulated::half_of(
            x.a[((r % 16) >= 8 ? 1 : 0) + (c >= 8 ? 2 : 0)], static_cast<int>(c % 2)));
      }
    };
  };
}
}  // namespace emulated

template <class S, int kN>
void product_ss(float (&d)[kN / 8][4], uint64_t a, uint64_t b, bool accumulate) {
  using namespace emulated;
  const auto read = [](uint32_t at) { return value_at<S>(at); };
  queue<kN, 16>(
      d, accumulate,
      [a, b, accumulate] {
        return In{{}, a, b, accumulate ? 1u : 0u};
      },
      shared_a<2>(read), shared_b<2, false>(read));
}

template <class S, int kN, bool kMnMajorB>
void product_rs_any(float (&d)[kN / 8][4], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  using namespace emulated;
  const uint32_t* ap = a;
  queue<kN, 16>(
      d, accumulate,
      [ap, b, accumulate] {
        return In{{ap[0], ap[1], ap[2], ap[3]}, 0, b, accumulate ? 1u : 0u};
      },
      register_a<false, S>(), shared_b<2, kMnMajorB>([](uint32_t at) { return value_at<S>(at); }));
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
  const auto read = [](uint32_t at) { return tf32_at(at); };
  queue<kN, 8>(
      d, accumulate,
      [a, b, accumulate] {
        return In{{}, a, b, accumulate ? 1u : 0u};
      },
      shared_a<4>(read), shared_b<4, false>(read));
}
template <int kN>
void product_rs_tf32(float (&d)[kN / 8][4], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  using namespace emulated;
  const uint32_t* ap = a;
  queue<kN, 8>(
      d, accumulate,
      [ap, b, accumulate] {
        return In{{ap[0], ap[1], ap[2], ap[3]}, 0, b, accumulate ? 1u : 0u};
      },
      register_a<true, float>(), shared_b<4, false>([](uint32_t at) { return tf32_at(at); }));
}

}  // namespace tg::cuda::wgmma
