// The tensor-core SDPA's forward kernel and its launch (overview in cuda_sdpa_mma.cu).
#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_sdpa_mma_launch.cuh"

namespace tg::cuda::mma_sdpa {
namespace {

// kPlainOnly: the kernel for forward_plain_only() calls (16-bit inputs), the raw products' path
// alone.
template <class S, int kD, int kM, bool kPlainOnly>
__global__ void __launch_bounds__(kBlockThreads, kForwardBlocks<kD, kM, kPlainOnly>)
    forward_kernel(const __grid_constant__ Args<float, S> a, Vectorized vec) {
  constexpr int kN = kForwardKeys<S, kD, kM, kPlainOnly>, kP = kPitch<S, kD>,
                kBlockRows = kM * kRows;
  extern __shared__ __align__(16) unsigned char smem[];
  S* Qs = reinterpret_cast<S*>(smem);
  S* Ks = Qs + kBlockRows * kP;  // two buffers of kN rows
  S* Vs = Ks + 2 * kN * kP;
  const int warp = threadIdx.x / 32;
  const QueryBlock qb = query_block(a, kBlockRows);
  const int64_t i0 = qb.i0, h = qb.h, b = qb.b;
  const SdpaSequence& sq = qb.sq;
  if (i0 >= sq.rows_q) return;  // past a ragged sequence's rows (the whole block)
  const float slope = a.slope_of(h);
  load_rows<S, kD, kBlockRows>(Qs, slice(a.q, a.qs, b, h), a.qs, sq.q0 + i0, sq.q0 + sq.rows_q,
                               a.Dqk, nullptr, vec.q);
  const int64_t row_w = i0 + 16 * kM * warp;  // this warp's first row; slice m from row_w + 16 m
  const KeyTiles<kN> keys = key_tiles<kN>(a, sq, i0, kBlockRows, row_w, 16 * kM);
  const int64_t hi = keys.hi;
  const int n_tiles = keys.n;
  const auto load_kv = [&](int it, int buf) {  // key tile `it`
    load_kv_tile<S, kD, kN>(a, qb, Ks + buf * kN * kP, Vs + buf * kN * kP, keys.first_key(it),
                            a.kv_rows, vec);
  };
  if (n_tiles > 0) load_kv(0, 0);
  mma::cp_async_commit();

  // Scores, maxima and statistics in log2 units (x log2 e), so that each probability is one
  // exp2_ftz of a difference; a row's maximum m is -inf until it sees a key.
  const float scale_log2 = a.scale * kLog2e;
  const bool raw = kPlainOnly || (a.scale > 0 && a.plain());
  float o[kM][kD / 8][4] = {};
  float mr[kM][2], l[kM][2];
#pragma unroll
  for (int sl = 0; sl < kM; ++sl) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mr[sl][r] = kNegInf;
      l[sl][r] = 0.0f;
    }
  }
  bool huge = false;  // some row of the warp has a huge base (scale_huge_row)
  for (int it = 0; it < n_tiles; ++it) {
    const int buf = it & 1;
    const int64_t j0 = keys.first_key(it);
    next_tile(it, n_tiles, load_kv);
    if (keys.warp_skips(j0)) {  // every probability 0: nothing to add
      __syncthreads();
      continue;
    }
    // Under plain() options with a positive scale the tile keeps the raw products (the keys a
    // row does not see at -inf where the tile is not interior): their largest is the largest
    // score, and each probability is one fused multiply-add and an exp2 from the product, the
    // same for a row's keys in every tile.
    const bool inner = raw && interior(a, sq, row_w, 16 * kM, hi, j0, kN);
    float s[kM][kN / 8][4] = {};
    warp_abt<S, kD, kN, kM>(Qs + 16 * kM * warp * kP, Ks + buf * kN * kP, s);
    float mx[kM][2];
#pragma unroll
    for (int sl = 0; sl < kM; ++sl) {
      mx[sl][0] = mx[sl][1] = kNegInf;
      if (raw) {
        // An edge tile's keys a row does not see: -inf (a branch of its own, so that interior
        // tiles, the most, run no test per element).
        if (!inner) hide_unseen<kN>(a, sq, row_w + 16 * sl, hi, j0, s[sl], kNegInf);
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) mx[sl][e / 2] = fmaxf(mx[sl][e / 2], s[sl][nt][e]);
        }
        mx[sl][0] *= scale_log2;
        mx[sl][1] *= scale_log2;
      } else if constexpr (!kPlainOnly) {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[sl][nt][e] =
                kLog2e * edge_score(a, b, h, row_w + 16 * sl + frag_row(e), j0 + frag_col(nt, e),
                                    s[sl][nt][e] * a.scale, slope, sq, hi);
            mx[sl][e / 2] = fmaxf(mx[sl][e / 2], s[sl][nt][e]);
          }
        }
      }
    }
    // A row's base m moves only when the tile's largest score exceeds it by more than 2^8
    // (kRescaleLog2, FlashAttention-4's conditional rescaling): its probabilities are then at
    // most 2^8, which float32 sums and 16-bit P hold as well as values up to 1, and out and the
    // statistics are the same ratios. Most tiles move no row's base, and then the warp skips
    // rescaling its accumulators. Each row decides alone, so its sums do not depend on the
    // other rows a warp holds.
    float alpha[kM][2], base[kM][2];
    bool moved = false;
#pragma unroll
    for (int sl = 0; sl < kM; ++sl) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_tile = quad_max(mx[sl][r]);
        // False while both are -inf; true at the first tile that shows the row a key.
        const bool up = m_tile > mr[sl][r] + kRescaleLog2;
        alpha[sl][r] = up ? mma::exp2_ftz(mr[sl][r] - m_tile) : 1.0f;  // 0 from m = -inf
        if (up) mr[sl][r] = m_tile;
        moved |= up;
        // 0 while m = -inf, so that a hidden key's exp2_ftz(-inf - base) is 0
        base[sl][r] = mr[sl][r] == kNegInf ? 0.0f : mr[sl][r];
        l[sl][r] *= alpha[sl][r];
      }
    }
    const bool warp_moved = __any_sync(0xffffffffu, moved);
    if (raw && warp_moved) {  // the bases changed: whether some row's is huge
      bool lane_huge = false;
#pragma unroll
      for (int sl = 0; sl < kM; ++sl) lane_huge |= huge_base(base[sl][0]) || huge_base(base[sl][1]);
      huge = warp_has_huge_base(lane_huge);
    }
#pragma unroll
    for (int sl = 0; sl < kM; ++sl) {
      // Raw products (plain options), or scores already (fmaf by 1 is the plain difference);
      // a row of huge raw products is scaled first.
      float mul[2] = {raw ? scale_log2 : 1.0f, raw ? scale_log2 : 1.0f};
      scale_huge_rows<kN>(huge, s[sl], base[sl], scale_log2, false, mul);
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[sl][nt][e] = mma::exp2_ftz(fmaf(s[sl][nt][e], mul[e / 2], -base[sl][e / 2]));
          l[sl][e / 2] += s[sl][nt][e];
        }
      }
    }
    if (!kPlainOnly && a.dropout_p > 0) {  // after the row sums: the statistics are dropout's input
#pragma unroll
      for (int sl = 0; sl < kM; ++sl) {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (s[sl][nt][e] == 0.0f) continue;
            const bool kept =
                dropout_keeps(a, b, h, row_w + 16 * sl + frag_row(e), j0 + frag_col(nt, e));
            s[sl][nt][e] = kept ? s[sl][nt][e] * a.keep_scale : 0.0f;
          }
        }
      }
    }
    AFragments<S, kN> pf[kM];
#pragma unroll
    for (int sl = 0; sl < kM; ++sl) {
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) to_a_fragment<S, kN>(pf[sl], nt, s[sl][nt]);
    }
    if (warp_moved) {  // alpha is 1 where a row's base stayed
#pragma unroll
      for (int sl = 0; sl < kM; ++sl) {
#pragma unroll
        for (int dt = 0; dt < kD / 8; ++dt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) o[sl][dt][e] *= alpha[sl][e / 2];
        }
      }
    }
    warp_pv<S, kD, kN, kM>(pf, Vs + buf * kN * kP, o);
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  mma::cp_async_wait<0>();  // nothing left in flight when no key tile was visited

#pragma unroll
  for (int sl = 0; sl < kM; ++sl) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[sl][r] = quad_sum(l[sl][r]);
      inv[r] = l[sl][r] > 0 ? 1.0f / l[sl][r] : 0.0f;
    }
    const int64_t row_s = row_w + 16 * sl;
    store_rows<S, kD>(a.out, a.outs, b, h, sq.q0, row_s, sq.rows_q, a.Dv, o[sl], inv);
    if (threadIdx.x % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t i = row_s + frag_row(2 * r);
        if (i < sq.rows_q)
          a.stat(b, h, sq.q0 + i) = l[sl][r] > 0 ? mr[sl][r] * kLn2 + logf(l[sl][r]) : kNegInf;
      }
    }
  }
}

// Shared memory of the forward kernel at tile width kD and kM slices per warp, in bytes.
template <class S, int kD, int kM, bool kPlainOnly>
constexpr size_t smem_forward = (kM * kRows +
                                 4 * kForwardKeys<S, kD, kM, kPlainOnly>)*kPitch<S, kD> *
                                sizeof(S);
}  // namespace

template <class S>
bool forward_typed(int device, const SdpaParams& p) {
  const Args<float, S> a = make_args<float, S>(p);
  const Vectorized vec = vectorized(p, View{});
  if (wgmma_forward<S>(device, a, vec)) return true;
  const int optin = shared_optin(device);
  bool fits = false;
  const bool any = with_head_width(std::max(a.Dqk, a.Dv), [&](auto width) {
    constexpr int kD = decltype(width)::value;
    with_slices<S, kD>(a, device, [&](auto slices) {
      constexpr int kM = decltype(slices)::value;
      // The plain-only kernel (16-bit only: float asks no device query) where a multiprocessor
      // holds two of its blocks: with two slices at head dim 128 its 64-key tiles take 104 KB of
      // shared memory a block, of which an A100's 164 KB hold one (the other kernel's 70 KB, two).
      const bool plain = !kTf32<S> && forward_plain_only(a) &&
                         blocks_fit(device, smem_forward<S, kD, kM, true>) >= 2;
      with_kind<S>(plain, [&](auto kind) {
        constexpr bool kPlainOnly = decltype(kind)::value;
        constexpr size_t smem = smem_forward<S, kD, kM, kPlainOnly>;
        if (smem > static_cast<size_t>(optin)) return;
        fits = true;
        cudaStream_t s = enter(device);
        const int64_t blocks = query_blocks<kM>(a);
        if (blocks)
          launch(forward_kernel<S, kD, kM, kPlainOnly>, blocks, smem, s, "sdpa mma forward kernel",
                 a, vec);
      });
    });
  });
  return any && fits;
}

template bool forward_typed<__nv_bfloat16>(int, const SdpaParams&);
template bool forward_typed<__half>(int, const SdpaParams&);
template bool forward_typed<float>(int, const SdpaParams&);

}  // namespace tg::cuda::mma_sdpa
