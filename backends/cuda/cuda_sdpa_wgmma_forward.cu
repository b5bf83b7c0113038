// The tensor-core SDPA's forward on sm_90's warpgroup products (wgmma, cuda_wgmma.cuh), for the
// most common call: 16-bit inputs, plain options without dropout and a positive scale
// (forward_plain_only), head dims up to 256, on compute capability 9.0 (an H100 or H200).
// Everything else runs the mma.sync kernels (cuda_sdpa_mma.cu has the overview), which this one
// follows: the same query blocks and key tiles, the same online softmax on the score fragments
// in registers (raw products, edge tiles hidden inline, a row's base moved only by more than
// 2^8), the same statistics.
//
// What differs: a block is two warpgroups of 64 query rows (128 rows, eight warps), and each
// group's products are two chains of warpgroup products: S = Q K^T (64 rows by 128 keys, 64
// above head dim 128; Q from registers at head dim 64, else both from shared memory:
// wg::RowOperand) and O += P V (P from the score registers rounded to 16 bits, as in
// FlashAttention-3; V from shared memory, transposed by the hardware). mma.sync's products read
// every K and V fragment once per warp through ldmatrix; a warpgroup product reads them once for
// four warps, without the registers. Q, K and V tiles are stored in the 128-byte swizzle mode
// (wgmma_layout.h), copied by cp.async as before, and the loop is pipelined (below). At head
// dims up to 128 a second kernel, warp-specialised, runs instead (further below): a producer
// warpgroup copies, two groups multiply in turn. On an H100 it took 0.57 ms where the first took
// 0.76 at S 8192 D 128 (480 TFLOP/s; docs/PERFORMANCE.md, session 40); the first stays for head
// dim 256, whose consumers would need 240 registers.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_sdpa_wgmma.cuh"

namespace tg::cuda::mma_sdpa {
namespace {

using wg::kBlockRows;
// Keys a tile at head width kD. A thread holds O, S and P: at D 128, 64 + 64 + 32 values with
// 128 keys; at D 256, 128 + 32 + 16 with 64 (where 128 keys would also exceed the shared
// memory: Q, two K and two V buffers, 320 KB).
template <int kD>
constexpr int kWgKeys = kD <= 128 ? 128 : 64;

// Shared memory of the kernel at head width kD: Q, two buffers of K and two of V, and room to
// start the tiles on a 1024-byte boundary (D 256: 193 KB).
template <class S, int kD>
constexpr size_t smem_wgmma = wgmma::kAtomBytes + (kBlockRows + 4 * kWgKeys<kD>)*kD * sizeof(S);

// A group's products of the forward from tile it's K and V (two buffers each): S = Q K^T and
// O += P V.
template <class S, int kD>
struct ForwardProducts {
  static constexpr int kN = kWgKeys<kD>;
  static constexpr uint32_t kTileBytes = kN * kD * sizeof(S);  // one K or V buffer
  wg::RowOperand<S, kBlockRows, kD> q;
  uint32_t k_at, v_at;
  // Once Q's copies are visible to the group.
  __device__ __forceinline__ ForwardProducts(S* Qs, S* Ks, S* Vs, int group, int warp)
      : q(Qs, group, warp), k_at(wgmma::shared_address(Ks)), v_at(wgmma::shared_address(Vs)) {}
  // S(it), committed.
  __device__ __forceinline__ void scores(float (&s)[kN / 8][4], int it) const {
    q.template times_transposed<kN>(s, k_at + static_cast<uint32_t>(it & 1) * kTileBytes);
    wgmma::commit();
  }
  // O += P(it) V(it), not committed.
  __device__ __forceinline__ void output(float (&o)[kD / 8][4], const AFragments<S, kN>& p,
                                         int it) const {
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk)
      wgmma::product_rs<S, kD>(
          o, p[kk], wgmma::mn_major(v_at + static_cast<uint32_t>(it & 1) * kTileBytes, kN, kk));
  }
};

// The online softmax of a warp's 16 rows (two a thread), on raw products; maxima and statistics
// in log2 units, as forward_kernel keeps them.
struct OnlineSoftmax {
  float scale_log2;
  float mr[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  bool huge = false;  // some row of the warp has a huge base (scale_huge_row)
  // The scores of one tile (keys j0 ..) into unnormalised probabilities, in place; alpha, each
  // row's rescaling of the output so far. True when some row of the warp moved its base.
  template <class S, int kN>
  __device__ __forceinline__ bool step(const Args<float, S>& a, const SdpaSequence& sq,
                                       int64_t row_w, int64_t hi, int64_t j0, float (&s)[kN / 8][4],
                                       float (&alpha)[2]) {
    if (!interior(a, sq, row_w, 16, hi, j0, kN)) hide_unseen<kN>(a, sq, row_w, hi, j0, s, kNegInf);
    bool moved = false;
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = kNegInf;
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      const float m_tile = quad_max(mx * scale_log2);
      const bool up = m_tile > mr[r] + kRescaleLog2;  // as forward_kernel: FlashAttention-4's
      alpha[r] = up ? mma::exp2_ftz(mr[r] - m_tile) : 1.0f;
      if (up) mr[r] = m_tile;
      moved |= up;
      base[r] = mr[r] == kNegInf ? 0.0f : mr[r];
      l[r] *= alpha[r];
    }
    const bool warp_moved = __any_sync(0xffffffffu, moved);
    if (warp_moved) huge = warp_has_huge_base(huge_base(base[0]) || huge_base(base[1]));
    float mul[2] = {scale_log2, scale_log2};
    scale_huge_rows<kN>(huge, s, base, scale_log2, false, mul);
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = mma::exp2_ftz(fmaf(s[nt][e], mul[e / 2], -base[e / 2]));
        l[e / 2] += s[nt][e];
      }
    }
    return warp_moved;
  }
  // O's rows scaled by alpha, where some row of the warp moved its base (step's result).
  template <int kD>
  static __device__ __forceinline__ void rescale(float (&o)[kD / 8][4], const float (&alpha)[2],
                                                 bool warp_moved) {
    if (warp_moved) {
#pragma unroll
      for (int dt = 0; dt < kD / 8; ++dt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[dt][e] *= alpha[e / 2];
      }
    }
  }
  // The warp's output rows, normalised, and their statistics.
  template <class S, int kD>
  __device__ __forceinline__ void finish(const Args<float, S>& a, const QueryBlock& qb,
                                         int64_t row_w, const float (&o)[kD / 8][4]) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] = quad_sum(l[r]);
      inv[r] = l[r] > 0 ? 1.0f / l[r] : 0.0f;
    }
    const SdpaSequence& sq = qb.sq;
    store_rows<S, kD>(a.out, a.outs, qb.b, qb.h, sq.q0, row_w, sq.rows_q, a.Dv, o, inv);
    if (threadIdx.x % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t i = row_w + frag_row(2 * r);
        if (i < sq.rows_q)
          a.stat(qb.b, qb.h, sq.q0 + i) = l[r] > 0 ? mr[r] * kLn2 + logf(l[r]) : kNegInf;
      }
    }
  }
};

// The loop overlaps each group's softmax with its products (FlashAttention-3's intra-warpgroup
// pipelining): while the tensor cores multiply P(j) V(j), the group computes the softmax of
// S(j + 1), issued with it. Per tile j, with S(j) in registers:
//   1. the softmax of S(j), in place;
//   2. wait for P(j - 1) V(j - 1); P(j) into its registers; rescale O;
//   3. the copies of K(j + 1) and V(j) done, block barrier; start copying K(j + 2) into K(j)'s
//      buffer and V(j + 1) into V(j - 1)'s (every group is done with both);
//   4. issue S(j + 1) = Q K(j + 1)^T, then O += P(j) V(j); wait for S(j + 1) alone.
template <class S, int kD>
__global__ void __launch_bounds__(wg::kThreads, 1)
    wgmma_forward_kernel(const __grid_constant__ Args<float, S> a, Vectorized vec) {
  constexpr int kN = kWgKeys<kD>;
  extern __shared__ __align__(1024) unsigned char smem[];
  S* Qs = reinterpret_cast<S*>(wg::aligned_tiles(smem));
  S* Ks = Qs + kBlockRows * kD;  // two buffers of kN rows
  S* Vs = Ks + 2 * kN * kD;      // two buffers
  const int group = wg::group(), warp = wg::warp_in_group();
  const QueryBlock qb = query_block(a, kBlockRows);
  const int64_t i0 = qb.i0, h = qb.h, b = qb.b;
  const SdpaSequence& sq = qb.sq;
  if (i0 >= sq.rows_q) return;  // past a ragged sequence's rows (the whole block)
  const int64_t row_g = i0 + wg::kGroupRows * group;  // this group's first row
  const int64_t row_w = row_g + 16 * warp;            // this warp's
  // Every group multiplies every tile of the block (a tile a group's rows do not see gives P 0:
  // skipping it would branch around the products, which ptxas then serializes).
  const KeyTiles<kN> keys = key_tiles<kN>(a, sq, i0, kBlockRows, row_g, wg::kGroupRows);
  const int64_t hi = keys.hi;
  const int n_tiles = keys.n;
  const auto load_k = [&](int it) {  // K(it) into its buffer
    load_kv_rows<false, S, kD, kN, wg::kThreads, Swizzled<S, kN>>(
        a, qb, Ks + (it & 1) * kN * kD, keys.first_key(it), a.kv_rows, vec);
  };
  const auto load_v = [&](int it) {  // V(it)
    load_kv_rows<true, S, kD, kN, wg::kThreads, Swizzled<S, kN>>(
        a, qb, Vs + (it & 1) * kN * kD, keys.first_key(it), a.kv_rows, vec);
  };
  wg::load_block_rows<S, kD>(Qs, slice(a.q, a.qs, b, h), a.qs, qb, a.Dqk, vec.q);
  if (n_tiles > 0) {
    load_k(0);
    load_v(0);
  }
  if (n_tiles > 1) load_k(1);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  wgmma::fence_async_shared();
  __syncthreads();
  const ForwardProducts<S, kD> products(Qs, Ks, Vs, group, warp);
  float s[kN / 8][4];
  if (n_tiles > 0) {
    wgmma::fence();
    products.scores(s, 0);
    wgmma::wait<0>();
    wgmma::fence_operand(s);
  }

  float o[kD / 8][4] = {};
  wgmma::fence_operand(o);  // its zeros set here, as the dQ pass's
  OnlineSoftmax sm{a.scale * kLog2e};
  AFragments<S, kN> p;
  // Tile `it`, with S(it) in s.
  const auto step = [&](int it) {
    float alpha[2];
    // 1. the softmax of S(it)
    const bool moved = sm.step<S, kN>(a, sq, row_w, hi, keys.first_key(it), s, alpha);
    // 2. P(it - 1) V(it - 1) done (nothing pending at the first tile): its registers take
    // P(it) (written while it ran, they made ptxas serialize every product).
    wgmma::wait<0>();
    wgmma::fence_operand(o);
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) to_a_fragment<S, kN>(p, nt, s[nt]);
    OnlineSoftmax::rescale<kD>(o, alpha, moved);
    // 3. K(it + 1) and V(it) in shared memory for every group; every group done with K(it) and
    // V(it - 1), whose buffers take K(it + 2) and V(it + 1).
    mma::cp_async_wait<0>();
    wgmma::fence_async_shared();
    __syncthreads();
    if (it + 2 < n_tiles) load_k(it + 2);
    if (it + 1 < n_tiles) load_v(it + 1);
    mma::cp_async_commit();
    // 4. S(it + 1), then P(it) V(it); S(it + 1) waited for. The last tile multiplies its own
    // K again, unused: products under a branch made ptxas serialize every product.
    wgmma::fence_operand(o);
    wgmma::fence();
    products.scores(s, it + 1 < n_tiles ? it + 1 : it);
    wgmma::fence();
    products.output(o, p, it);
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::fence_operand(s);
  };
  for (int it = 0; it < n_tiles; ++it) step(it);
  wgmma::wait<0>();
  wgmma::fence_operand(o);
  mma::cp_async_wait<0>();  // the last, empty group of copies

  sm.finish<S, kD>(a, qb, row_w, o);
}

// The same loop, warp-specialised as FlashAttention-3's forward: a third warpgroup (the
// producer) copies the K and V tiles into two buffers each, and the two groups that multiply
// (the consumers) take turns issuing their products (ping-pong), so that one group's softmax
// runs while the other's products do, instead of both waiting at a block barrier each tile.
// Named barriers (bar.sync / bar.arrive) hand the buffers over:
//   full K / full V (a buffer each): the producer arrives once its copies of a tile have landed,
//     the consumers wait on it before the products that read the tile;
//   empty K / empty V: the consumers arrive once those products are done (K(j) after S(j), V(j)
//     after P(j) V(j)), the producer waits on it before copying tile j + 2 into the buffer;
//   turn (a group each): a group waits for its turn before issuing a tile's products and hands
//     the turn to the other after.
// The two groups that multiply are threads 0-255, the producer 256-383. setmaxnreg gives the
// consumers 224 registers and the producer 56 (with 40 its copies spilled): 2 x 128 x 224 +
// 128 x 56 = 64,512, the 384 threads' launch share of 168 each.
namespace ws {
constexpr int kThreads = 384, kConsumers = kThreads - wg::kGroupThreads;
constexpr int kConsumerRegisters = 224, kProducerRegisters = 56;
constexpr int kFullK = 1, kFullV = 3, kEmptyK = 5, kEmptyV = 7;  // + buffer (0 or 1)
constexpr int kTurn = 9;                                         // + group
constexpr int kQ = 11;  // the consumers' copies of Q landed
}  // namespace ws

template <class S, int kD>
__global__ void __launch_bounds__(ws::kThreads, 1)
    wgmma_forward_ws_kernel(const __grid_constant__ Args<float, S> a, Vectorized vec) {
  constexpr int kN = kWgKeys<kD>;
  extern __shared__ __align__(1024) unsigned char smem[];
  S* Qs = reinterpret_cast<S*>(wg::aligned_tiles(smem));
  S* Ks = Qs + kBlockRows * kD;  // two buffers of kN rows
  S* Vs = Ks + 2 * kN * kD;      // two buffers
  const QueryBlock qb = query_block(a, kBlockRows);
  const int64_t i0 = qb.i0, b = qb.b;
  const SdpaSequence& sq = qb.sq;
  if (i0 >= sq.rows_q) return;  // past a ragged sequence's rows (the whole block)
  const int group = wg::group(), warp = wg::warp_in_group();
  const int64_t row_g = i0 + wg::kGroupRows * group, row_w = row_g + 16 * warp;
  // The block's key tiles (the producer's row_g lies past the block: its own range is unused).
  const KeyTiles<kN> keys = key_tiles<kN>(a, sq, i0, kBlockRows, row_g, wg::kGroupRows);
  const int n_tiles = keys.n;
  constexpr int kAll = ws::kThreads;

  if (group == 2) {  // the producer
    wgmma::lower_registers<ws::kProducerRegisters>();
    const unsigned thread = threadIdx.x - ws::kConsumers;
    // One copy group a tile's K or V, in the order K(0), K(1), V(0), K(2), V(1), ...: the order
    // the consumers need them in. A group is announced (its full barrier arrived at) once the
    // next is issued and all but one have landed, so that one copy is in flight while the
    // producer waits for a buffer. The group in flight then is never one the consumers need
    // before they free that buffer: V(j)'s buffer frees at their tile j + 1, after K(j + 2) and
    // V(j + 1) were announced; K(j + 2)'s at the end of their tile j + 1, with V(j + 2) pending,
    // needed at tile j + 2.
    int pending = -1;  // the group issued and not yet announced: 2 t for K(t), 2 t + 1 for V(t)
    const auto announce = [&](int g) {
      wgmma::fence_async_shared();
      wgmma::named_arrive((g % 2 ? ws::kFullV : ws::kFullK) + (g / 2) % 2, kAll);
    };
    const auto copy = [&](bool is_v, int t) {
      if (t >= 2) wgmma::named_sync((is_v ? ws::kEmptyV : ws::kEmptyK) + t % 2, kAll);
      S* dst = (is_v ? Vs : Ks) + (t % 2) * kN * kD;
      if (is_v) {
        load_kv_rows<true, S, kD, kN, wg::kGroupThreads, Swizzled<S, kN>>(
            a, qb, dst, keys.first_key(t), a.kv_rows, vec, thread);
      } else {
        load_kv_rows<false, S, kD, kN, wg::kGroupThreads, Swizzled<S, kN>>(
            a, qb, dst, keys.first_key(t), a.kv_rows, vec, thread);
      }
      mma::cp_async_commit();
      if (pending >= 0) {
        mma::cp_async_wait<1>();
        announce(pending);
      }
      pending = 2 * t + (is_v ? 1 : 0);
    };
    if (n_tiles > 0) copy(false, 0);
    for (int t = 0; t < n_tiles; ++t) {
      if (t + 1 < n_tiles) copy(false, t + 1);
      copy(true, t);
    }
    mma::cp_async_wait<0>();
    if (pending >= 0) announce(pending);
    // The consumers' arrivals for the last two tiles' buffers, which no copy waited for.
    for (int t = n_tiles > 2 ? n_tiles - 2 : 0; t < n_tiles; ++t) {
      wgmma::named_sync(ws::kEmptyK + t % 2, kAll);
      wgmma::named_sync(ws::kEmptyV + t % 2, kAll);
    }
    return;
  }

  wgmma::raise_registers<ws::kConsumerRegisters>();
  wg::load_block_rows<S, kD>(Qs, slice(a.q, a.qs, b, qb.h), a.qs, qb, a.Dqk, vec.q);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  wgmma::fence_async_shared();
  wgmma::named_sync(ws::kQ, ws::kConsumers);
  // The first turn is group 0's.
  if (group == 1) wgmma::named_arrive(ws::kTurn, 2 * wg::kGroupThreads);
  const int64_t hi = keys.hi;
  const ForwardProducts<S, kD> products(Qs, Ks, Vs, group, warp);
  float s[kN / 8][4];
  if (n_tiles > 0) {
    wgmma::named_sync(ws::kFullK, kAll);
    wgmma::fence();
    products.scores(s, 0);
    wgmma::wait<0>();
    wgmma::fence_operand(s);
    wgmma::named_arrive(ws::kEmptyK, kAll);
  }
  float o[kD / 8][4] = {};
  wgmma::fence_operand(o);
  OnlineSoftmax sm{a.scale * kLog2e};
  AFragments<S, kN> p;
  for (int it = 0; it < n_tiles; ++it) {
    float alpha[2];
    // 1. the softmax of S(it)
    const bool moved = sm.step<S, kN>(a, sq, row_w, hi, keys.first_key(it), s, alpha);
    // 2. P(it - 1) V(it - 1) done, and with it V(it - 1)'s buffer; P(it) into its registers
    wgmma::wait<0>();
    wgmma::fence_operand(o);
    if (it > 0) wgmma::named_arrive(ws::kEmptyV + (it - 1) % 2, kAll);
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) to_a_fragment<S, kN>(p, nt, s[nt]);
    OnlineSoftmax::rescale<kD>(o, alpha, moved);
    // 3. K(it + 1) and V(it) copied
    const bool more = it + 1 < n_tiles;
    if (more) wgmma::named_sync(ws::kFullK + (it + 1) % 2, kAll);
    wgmma::named_sync(ws::kFullV + it % 2, kAll);
    // 4. in this group's turn: S(it + 1) (S(it) again at the last tile: no product under a
    // branch), then P(it) V(it); the turn to the other group; wait for S(it + 1), whose K
    // buffer is then free.
    wgmma::named_sync(ws::kTurn + group, 2 * wg::kGroupThreads);
    wgmma::fence_operand(o);
    wgmma::fence();
    products.scores(s, more ? it + 1 : it);
    wgmma::fence();
    products.output(o, p, it);
    wgmma::commit();
    wgmma::named_arrive(ws::kTurn + 1 - group, 2 * wg::kGroupThreads);
    wgmma::wait<1>();
    wgmma::fence_operand(s);
    if (more) wgmma::named_arrive(ws::kEmptyK + (it + 1) % 2, kAll);
  }
  wgmma::wait<0>();
  wgmma::fence_operand(o);
  if (n_tiles > 0) wgmma::named_arrive(ws::kEmptyV + (n_tiles - 1) % 2, kAll);
  // Group 1's last hand-over (its first, at the start, had no turn before it) is group 0's.
  if (group == 0) wgmma::named_sync(ws::kTurn, 2 * wg::kGroupThreads);
  sm.finish<S, kD>(a, qb, row_w, o);
}

}  // namespace

template <class S>
bool wgmma_forward(int device, const Args<float, S>& a, const Vectorized& vec) {
  if constexpr (kTf32<S>) {
    return false;
  } else {
    const int64_t width = std::max(a.Dqk, a.Dv);
    if (width > 256 || !wg::runs_wgmma(width) || !forward_plain_only(a) || !wgmma_device(device))
      return false;
    const auto run = [&](auto dim) {
      constexpr int kD = decltype(dim)::value;
      constexpr size_t smem = smem_wgmma<S, kD>;
      if (smem > static_cast<size_t>(shared_optin(device))) return false;
      cudaStream_t s = enter(device);
      const int64_t blocks = a.B * a.Hq * ((a.Sq + kBlockRows - 1) / kBlockRows);
      if (blocks == 0) return true;
      // Warp-specialised where the consumers' registers allow (D 256 takes 240).
      if constexpr (kD <= 128) {
        launch<ws::kThreads>(wgmma_forward_ws_kernel<S, kD>, blocks, smem, s,
                             "sdpa wgmma forward kernel with a producer", a, vec);
      } else {
        launch<wg::kThreads>(wgmma_forward_kernel<S, kD>, blocks, smem, s,
                             "sdpa wgmma forward kernel", a, vec);
      }
      return true;
    };
    if (width <= 64) return run(std::integral_constant<int, 64>{});
    if (width <= 128) return run(std::integral_constant<int, 128>{});
    return run(std::integral_constant<int, 256>{});
  }
}

template bool wgmma_forward<__nv_bfloat16>(int, const Args<float, __nv_bfloat16>&,
                                           const Vectorized&);
template bool wgmma_forward<__half>(int, const Args<float, __half>&, const Vectorized&);
template bool wgmma_forward<float>(int, const Args<float, float>&, const Vectorized&);

}  // namespace tg::cuda::mma_sdpa
