// The host side the tensor-core SDPA's two kernel files share (cuda_sdpa_mma.cu has the
// overview): which rows allow 16-byte copies, the shared memory a block may have, the launch,
// the slices per warp, and the per-dtype entry points each kernel file instantiates.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_sdpa_mma_rules.cuh"
#include "backends/cuda_api.h"

namespace tg::cuda::mma_sdpa {

// Whether rows of `width` values of view v allow 16-byte copies (Vectorized's rule).
inline bool vectorizable(const View& v, int64_t width) {
  const int64_t per_copy = 16 / static_cast<int64_t>(dtype_size(v.dtype));
  if (reinterpret_cast<uintptr_t>(v.data) % 16 != 0 || width % per_copy != 0) return false;
  if (v.sizes[3] > 1 && v.strides[3] != 1) return false;
  for (int d = 0; d < 3; ++d)
    if (v.sizes[d] > 1 && v.strides[d] % per_copy != 0) return false;
  return true;
}
// Which of q, k, v and dout (absent in the forward: View{}) allow 16-byte copies.
inline Vectorized vectorized(const SdpaParams& p, const View& dout) {
  Vectorized vec;
  vec.q = vectorizable(p.q, p.dim_qk());
  vec.k = vectorizable(p.k, p.dim_qk());
  vec.v = vectorizable(p.v, p.dim_v());
  vec.dout = dout.data && vectorizable(dout, p.dim_v());
  return vec;
}
// The shared memory a block may have on the device; 0 before compute capability 8.0, where
// mma.sync on 16-bit inputs does not run.
int shared_optin(int device);
// How many blocks of `smem` bytes of dynamic shared memory a multiprocessor of the device holds.
int blocks_fit(int device, size_t smem);
// The device's multiprocessors.
int multiprocessors(int device);
// Whether the device runs the sm_90a kernels (warpgroup products): compute capability 9.0.
bool wgmma_device(int device);

// kernel<<<blocks, kThreads, smem, s>>>(args...), allowed `smem` bytes of dynamic shared
// memory; on the CPU emulator of tests/cuda_emulator under TG_CUDA_EMULATION.
template <int kThreads = kBlockThreads, class K, class... A>
void launch(K kernel, int64_t blocks, size_t smem, cudaStream_t s, const char* name,
            const A&... args) {
#ifdef TG_CUDA_EMULATION
  (void)s;
  cuda_emulator::launch(static_cast<unsigned>(blocks), kThreads, smem, [&] { kernel(args...); });
#else
  if (smem)
    TG_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(smem)));
  // clang-format takes a .cuh for C++, where >>> is not one token.
  // clang-format off
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, s>>>(args...);
  // clang-format on
#endif
  check_launch(name);
}

// A forward's or dQ pass's blocks with kM slices of 16 query rows per warp.
template <int kM, class S>
int64_t query_blocks(const Args<float, S>& a) {
  return a.B * a.Hq * ((a.Sq + kM * kRows - 1) / (kM * kRows));
}

// Calls f(std::integral_constant<int, kM>) with the forward's and the dQ pass's 16-row slices
// per warp: two when the head dims allow (up to 128) and cuda_sdpa_warp_rows() is 32, or 0
// (automatic) and the H100 ran two faster: 16-bit inputs without a causal mask, float up to
// head dim 64 (docs/PERFORMANCE.md), and only while two-slice blocks fill every multiprocessor
// at least twice over (at 16 x 128 tokens, half as many blocks of twice the rows left
// multiprocessors idle: the reference model's SDPA took 1.09 ms a step with two, 0.83 with
// one); else one.
template <class S, int kD, class F>
void with_slices(const Args<float, S>& a, int device, F&& f) {
  if constexpr (kD <= 128) {
    const int rows = cuda_sdpa_warp_rows();
    const bool faster_two = kTf32<S> ? kD <= 64 : !a.causal;
    const auto filled = [&] {
      return query_blocks<2>(a) >= 2 * int64_t{kBlocksPerSM<kD, 2>} * multiprocessors(device);
    };
    if (rows == 32 || (rows == 0 && faster_two && filled()))
      return f(std::integral_constant<int, 2>{});
  }
  f(std::integral_constant<int, 1>{});
}

// Whether a call may run the kernels' kPlainOnly kind, which hold the plain path alone (no
// per-element rule but the edge tiles' visibility): plain() options without dropout, and in the
// forward a positive scale (the largest raw product is then the largest score). In the kernels
// with every path, the rules' code kept registers live across the plain path (ptxas, sm_90: the
// backward's dK/dV pass at head dim 128 spilled 360 bytes a thread, 36 with the plain path
// alone; the dQ pass at 256, 180 bytes, none alone).
template <class S>
bool plain_only(const Args<float, S>& a) {
  return a.plain() && !(a.dropout_p > 0);
}
template <class S>
bool forward_plain_only(const Args<float, S>& a) {
  return a.scale > 0 && plain_only(a);
}
// Calls f(std::bool_constant<kPlainOnly>), the kernels' kind for a call (`plain`: it may run
// the plain-only kernels). Only 16-bit inputs have plain-only kernels: float's plain path alone
// spilled more, not less.
template <class S, class F>
void with_kind(bool plain, F&& f) {
  if constexpr (!kTf32<S>) {
    if (plain) return f(std::true_type{});
  }
  f(std::false_type{});
}

// The forward on warpgroup products (cuda_sdpa_wgmma_forward.cu) where it applies: 16-bit
// forward_plain_only() calls at head dims up to 256 on a wgmma_device(), where
// tg::cuda_sdpa_wgmma() gives them the call (wg::runs_wgmma). False where it does not (nothing
// was run).
template <class S>
bool wgmma_forward(int device, const Args<float, S>& a, const Vectorized& vec);
// The backward's dQ pass and dK/dV pass on warpgroup products (cuda_sdpa_wgmma_backward.cu)
// where they apply: as wgmma_forward, for plain_only() calls (delta already in a.delta, dQ in a
// pass of its own). False where they do not (nothing was run).
template <class S>
bool wgmma_backward_dq(int device, const Args<float, S>& a, const Vectorized& vec, cudaStream_t s);
template <class S>
bool wgmma_backward_dkv(int device, const Args<float, S>& a, const Vectorized& vec, cudaStream_t s);

// The forward and the backward of S's kernels (bfloat16, float16, float for 3xTF32): false when
// the head dims or the shared memory rule them out (nothing was run).
template <class S>
bool forward_typed(int device, const SdpaParams& p);
template <class S>
bool backward_typed(int device, const SdpaParams& p, const View& dout, const SdpaGradViews& g);

}  // namespace tg::cuda::mma_sdpa
