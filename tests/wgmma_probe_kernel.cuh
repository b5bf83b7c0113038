// The kernel of wgmma_probe.h: one warpgroup, A and B copied into shared memory in the 128-byte
// swizzle mode, then the two products, written out row by row from the accumulators.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backends/cuda/cuda_sdpa_mma_tiles.cuh"
#include "backends/cuda/cuda_wgmma.cuh"
#include "tests/wgmma_probe.h"

namespace tgtest::wgmma_probe {
namespace {  // beside the emulator's shared array (cuda_emulator/wgmma_probe.cpp)

using S = __nv_bfloat16;
namespace mma_sdpa = tg::cuda::mma_sdpa;
namespace wgmma = tg::cuda::wgmma;
namespace mma = tg::cuda::mma;

constexpr size_t kSmem = wgmma::kAtomBytes + 2 * kM * kK * sizeof(S);

// d (64 x kN, a warpgroup's accumulators) into out, row by row.
template <int kN>
__device__ void store_product(const float (&d)[kN / 8][4], float* out) {
  const int warp = threadIdx.x / 32;
  for (int nt = 0; nt < kN / 8; ++nt)
    for (int e = 0; e < 4; ++e)
      out[(16 * warp + mma_sdpa::frag_row(e)) * kN + mma_sdpa::frag_col(nt, e)] = d[nt][e];
}

// A[:, :64] B[:, :kN]: A from registers (af), B MN-major at b_at.
template <int kN>
__device__ void product_rs(const uint32_t (&af)[kM / 16][4], uint32_t b_at, float* out) {
  float o[kN / 8][4] = {};
  wgmma::fence_operand(o);
  wgmma::fence();
  for (int kk = 0; kk < kM / 16; ++kk)
    wgmma::product_rs<S, kN>(o, af[kk], wgmma::mn_major(b_at, kM, kk));
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operand(o);
  store_product<kN>(o, out);
}

__global__ void probe_kernel(const S* a, const S* b, float* ss, float* rs, float* rs_half,
                             float* rs_k) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t window = wgmma::shared_address(smem);
  S* As = reinterpret_cast<S*>(smem + (wgmma::kAtomBytes - window % wgmma::kAtomBytes) %
                                          wgmma::kAtomBytes);
  S* Bs = As + kM * kK;
  using Tile = mma_sdpa::Swizzled<S, kM>;
  for (int i = threadIdx.x; i < kM * kK / 8; i += 128) {  // 16-byte chunks
    const int r = i / (kK / 8), c = i % (kK / 8);
    for (int e = 0; e < 8; ++e) {
      Tile::at(As, r, c)[e] = a[r * kK + 8 * c + e];
      Tile::at(Bs, r, c)[e] = b[r * kK + 8 * c + e];
    }
  }
  wgmma::fence_async_shared();
  __syncthreads();
  const uint32_t a_at = wgmma::shared_address(As), b_at = wgmma::shared_address(Bs);
  const int warp = threadIdx.x / 32;
  float d[kM / 8][4];
  wgmma::fence();
  for (int kk = 0; kk < kK / 16; ++kk)
    wgmma::product_ss<S, kM>(d, wgmma::k_major(a_at, kM, 0, kk), wgmma::k_major(b_at, kM, 0, kk),
                             kk > 0);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operand(d);
  store_product<kM>(d, ss);

  // A's first 64 columns as register fragments (mma.m16n8k16's A layout for the warp's rows).
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint32_t af[kM / 16][4];
  for (int kk = 0; kk < kM / 16; ++kk)
    for (int r = 0; r < 4; ++r) {
      const int row = 16 * warp + g + 8 * (r % 2), col = 16 * kk + 2 * t + 8 * (r / 2);
      af[kk][r] = mma::pack2<S>(__bfloat162float(a[row * kK + col]),
                                __bfloat162float(a[row * kK + col + 1]));
    }
  product_rs<kK>(af, b_at, rs);
  product_rs<kHalf>(af, b_at, rs_half);
  // S = Q K^T's kind with Q in registers (the SDPA kernels at head dim 64): B K-major, k = 64.
  float sk[kM / 8][4];
  wgmma::fence();
  for (int kk = 0; kk < kM / 16; ++kk)
    wgmma::product_rs_kmajor<S, kM>(sk, af[kk], wgmma::k_major(b_at, kM, 0, kk), kk > 0);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operand(sk);
  store_product<kM>(sk, rs_k);
}

// The TF32 products: A (64 x 64) and B (128 x 64) as float32 tiles in the 128-byte swizzle mode
// (32 values a panel row), A B^T from shared memory and, with A's rows as mma.m16n8k8's TF32
// fragments, A B[:64]^T; with kSplit, as 3xTF32 from hi and lo tiles and fragments.
constexpr size_t kTf32Smem = wgmma::kAtomBytes + 2 * (kM + kTf32N) * kTf32K * sizeof(float);

// The k-step products of both kinds over k < kTf32K, each once (TF32) or three times (3xTF32:
// the small ones first, as mma_1688_3xtf32).
template <bool kSplit>
__device__ void tf32_products(uint32_t a_hi, uint32_t a_lo, uint32_t b_hi, uint32_t b_lo,
                              const uint32_t (&af)[kTf32K / 8][4], float* ss, float* rs) {
  float d[kTf32N / 8][4];
  wgmma::fence();
  for (int kk = 0; kk < kTf32K / 8; ++kk) {
    const auto ka = [&](uint32_t at) { return wgmma::k_major(at, kM, 0, kk); };
    const auto kb = [&](uint32_t at) { return wgmma::k_major(at, kTf32N, 0, kk); };
    if constexpr (kSplit) {
      wgmma::product_ss_tf32<kTf32N>(d, ka(a_lo), kb(b_hi), kk > 0);
      wgmma::product_ss_tf32<kTf32N>(d, ka(a_hi), kb(b_lo), true);
    }
    wgmma::product_ss_tf32<kTf32N>(d, ka(a_hi), kb(b_hi), kSplit || kk > 0);
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operand(d);
  store_product<kTf32N>(d, ss);

  // A's halves stay in registers until the products that read them are done (wait<0>).
  mma::SplitFragment<4> f[kTf32K / 8];
  for (int kk = 0; kk < kTf32K / 8; ++kk) f[kk] = mma::split_fragment(af[kk]);
  float o[kM / 8][4];
  wgmma::fence();
  for (int kk = 0; kk < kTf32K / 8; ++kk) {
    const auto kb = [&](uint32_t at) { return wgmma::k_major(at, kTf32N, 0, kk); };
    if constexpr (kSplit) {
      wgmma::product_rs_tf32<kM>(o, f[kk].lo, kb(b_hi), kk > 0);
      wgmma::product_rs_tf32<kM>(o, f[kk].hi, kb(b_lo), true);
      wgmma::product_rs_tf32<kM>(o, f[kk].hi, kb(b_hi), true);
    } else {
      wgmma::product_rs_tf32<kM>(o, af[kk], kb(b_hi), kk > 0);
    }
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operand(o);
  store_product<kM>(o, rs);
}

template <bool kSplit>
__global__ void probe_tf32_kernel(const float* a, const float* b, float* ss, float* rs) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t window = wgmma::shared_address(smem);
  float* As = reinterpret_cast<float*>(smem + (wgmma::kAtomBytes - window % wgmma::kAtomBytes) %
                                                  wgmma::kAtomBytes);
  float* Bs = As + 2 * kM * kTf32K;    // A's hi and lo tiles, then B's
  constexpr int kChunks = kTf32K / 4;  // 16-byte chunks a row
  for (int i = threadIdx.x; i < (kM + kTf32N) * kChunks; i += 128) {
    const int r = i / kChunks, c = i % kChunks;
    for (int e = 0; e < 4; ++e) {
      const bool in_a = r < kM;
      const float x = in_a ? a[r * kTf32K + 4 * c + e] : b[(r - kM) * kTf32K + 4 * c + e];
      float hi = x, lo = 0.0f;
      if constexpr (kSplit) {
        const mma::SplitTf32 h = mma::split_tf32(x);
        hi = __uint_as_float(h.hi);
        lo = __uint_as_float(h.lo);
      }
      if (in_a) {
        mma_sdpa::Swizzled<float, kM>::at(As, r, c)[e] = hi;
        mma_sdpa::Swizzled<float, kM>::at(As + kM * kTf32K, r, c)[e] = lo;
      } else {
        mma_sdpa::Swizzled<float, kTf32N>::at(Bs, r - kM, c)[e] = hi;
        mma_sdpa::Swizzled<float, kTf32N>::at(Bs + kTf32N * kTf32K, r - kM, c)[e] = lo;
      }
    }
  }
  wgmma::fence_async_shared();
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint32_t af[kTf32K / 8][4];
  for (int kk = 0; kk < kTf32K / 8; ++kk)
    for (int r = 0; r < 4; ++r) {
      const int row = 16 * warp + g + 8 * (r % 2), col = 8 * kk + t + 4 * (r / 2);
      af[kk][r] = __float_as_uint(a[row * kTf32K + col]);
    }
  const uint32_t a_at = wgmma::shared_address(As), b_at = wgmma::shared_address(Bs);
  tf32_products<kSplit>(a_at, a_at + kM * kTf32K * sizeof(float), b_at,
                        b_at + kTf32N * kTf32K * sizeof(float), af, ss, rs);
}

}  // namespace
}  // namespace tgtest::wgmma_probe
