// The shared-memory layout the sm_90 warpgroup products (wgmma, cuda_wgmma.cuh) read, and their
// matrix descriptors: plain host/device arithmetic, so that the CPU emulator's wgmma
// (tests/cuda_emulator/wgmma.h), which decodes descriptors by the PTX ISA's rules on its own,
// checks it without a GPU.
//
// A tile of 16-bit rows (query, key or value rows of up to 128 values) is stored in the 128-byte
// swizzle mode ("Shared Memory Matrix Layout", PTX ISA; CUTLASS's Layout_K_SW128_Atom): panels
// of 64 columns (128 bytes a row), panel p at p x rows x 128 bytes; in a panel, row r at r x 128;
// in a row, 16-byte chunk c at ((c ^ (r % 8)) x 16). The XOR is the hardware's, on address bits
// 4-6 against bits 7-9, so a tile starts on a 1024-byte boundary. The same bytes serve both
// ways a product reads them: K-major (rows are the product's M or N, columns its K: Q and K in
// S = Q K^T) and MN-major (rows are K: V in O = P V).
#pragma once
#include <cstdint>

#include "core/philox.h"  // TG_HD

namespace tg::cuda::wgmma {

constexpr int kPanel = 64;        // 16-bit columns of a panel
constexpr int kAtomBytes = 1024;  // 8 rows of 128 bytes: the swizzle's period
constexpr int kRowBytes = 128;

// Byte offset of 16-byte chunk c (columns 8 c .. 8 c + 7) of row r in a tile of `rows` rows.
TG_HD constexpr uint32_t chunk_offset(int r, int c, int rows) {
  return static_cast<uint32_t>((c / 8) * rows * kRowBytes + r * kRowBytes +
                               (((c % 8) ^ (r % 8)) * 16));
}

// A matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading and stride
// byte offsets, each in 16-byte units in 14 bits; base offset 0 (tiles are 1024-byte aligned);
// layout type 1, the 128-byte swizzle, in bits 62-63.
TG_HD constexpr uint64_t descriptor(uint32_t address, uint32_t leading, uint32_t stride) {
  return (uint64_t{(address >> 4) & 0x3fffu}) | (uint64_t{(leading >> 4) & 0x3fffu} << 16) |
         (uint64_t{(stride >> 4) & 0x3fffu} << 32) | (uint64_t{1} << 62);
}

// K-major operand (Q or K rows, K = the head dim) at shared address `tile` (a tile of `rows`
// rows), its rows from `row0` (a multiple of 8), k-step kk (columns 16 kk .. 16 kk + 15): 8-row
// groups 1024 bytes apart (stride); the leading offset is unused in this mode (1 by convention).
TG_HD constexpr uint64_t k_major(uint32_t tile, int rows, int row0, int kk) {
  return descriptor(
      tile + static_cast<uint32_t>((kk / 4) * rows * kRowBytes + row0 * kRowBytes + (kk % 4) * 32),
      16, kAtomBytes);
}

// MN-major operand (V rows: K = the keys, N = the head dim) at shared address `tile` (`rows`
// rows), k-step kk (rows 16 kk .. 16 kk + 15): 64-column panels `rows` x 128 bytes apart
// (leading), 8-row groups 1024 bytes apart (stride).
TG_HD constexpr uint64_t mn_major(uint32_t tile, int rows, int kk) {
  return descriptor(tile + static_cast<uint32_t>(kk * 16 * kRowBytes),
                    static_cast<uint32_t>(rows * kRowBytes), kAtomBytes);
}

}  // namespace tg::cuda::wgmma
