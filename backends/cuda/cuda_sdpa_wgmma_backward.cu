// The tensor-core SDPA's backward passes on sm_90's warpgroup products (wgmma), for the calls
// the forward of cuda_sdpa_wgmma_forward.cu takes (16-bit, plain options without dropout, head
// dims up to 128, compute capability 9.0) with dQ in its own pass (cuda_sdpa_deterministic()):
// the same two passes as cuda_sdpa_mma_backward.cu's kernels, and the same arithmetic (P
// recomputed with exp2_ftz from the statistics, dS = P (dP - D), P and dS rounded to 16 bits for
// the second products), on blocks of two warpgroups.
// - dQ pass: a group takes 64 query rows; per walked tile of keys (128 at head dim 64, else 64:
//   kDqKeys), S = Q K^T and dP = dO V^T (Q and dO from registers at head dim 64, else from
//   shared memory: wg::RowOperand), then dQ += dS K (dS from registers, K transposed by the
//   hardware).
// - dK/dV pass: a group takes 64 keys; per walked tile of 64 query rows, S^T = K Q^T and
//   dP^T = V dO^T (K and V as Q and dO above), then dV += P^T dO and dK += dS^T Q from
//   registers.
// Tiles in the 128-byte swizzle mode (wgmma_layout.h), copied by cp.async; both loops pipelined
// as the forward's (each kernel says how). Timed on an H100 in session 40 (docs/PERFORMANCE.md):
// 490-510 TFLOP/s of products at head dim 128. A warp-specialised dQ pass (a producer warpgroup
// and two consumers taking turns, as the forward's) ran no faster there (8% slower at head dim
// 64, within 2% at 128 but for one GQA shape) and was dropped; it is in git at b797801.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_sdpa_wgmma.cuh"

namespace tg::cuda::mma_sdpa {
namespace {

using wg::kBlockRows;
constexpr int kWalk64 = 64;  // rows of a walked tile: query rows (dK/dV pass)
// Keys of a dQ pass's walked tile: 128 at head dim 64, where the products are short and a
// tile's waits and barrier weigh the more (S, dP: 64 + 64 registers, dS 32, dQ 32), else 64.
template <int kD>
constexpr int kDqKeys = kD == 64 ? 128 : 64;

// Shared memory of the two passes at head width kD, with room to start the tiles on a
// 1024-byte boundary: the dQ pass's Q and dO, three buffers of K and two of V; the dK/dV
// pass's K and V, three buffers of Q, dO and their statistics.
template <class S, int kD>
constexpr size_t smem_wg_dq = wgmma::kAtomBytes + (2 * kBlockRows + 5 * kDqKeys<kD>)*kD * sizeof(S);
template <class S, int kD>
constexpr size_t smem_wg_dkv = wgmma::kAtomBytes + (2 * kBlockRows + 6 * kWalk64) * kD * sizeof(S) +
                               6 * kWalk64 * sizeof(float);

// A warp's 16 query rows in a dQ pass (two a thread): their statistics and D = rowsum(dO O).
struct DqRows {
  int64_t row_w;
  float scale_log2, dl[2], lse_log2[2];
  bool huge;  // some row of the warp has a huge statistic (scale_huge_row)
  template <class S>
  __device__ __forceinline__ DqRows(const Args<float, S>& a, const QueryBlock& qb, int64_t row)
      : row_w(row), scale_log2(a.scale * kLog2e) {
    const SdpaSequence& sq = qb.sq;
    const int64_t row_base = (qb.b * a.Hq + qb.h) * a.Sq;  // delta's rows
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = row_w + frag_row(2 * r);
      lse_log2[r] = i < sq.rows_q ? a.stat(qb.b, qb.h, sq.q0 + i) * kLog2e : kNegInf;
      dl[r] = i < sq.rows_q ? a.delta[row_base + i] : 0.0f;
    }
    huge = warp_has_huge_base(huge_base(lse_log2[0]) || huge_base(lse_log2[1]));
  }
  // S (raw products of keys j0 ..) into dS = P (dP - D) in place; 0 where a row sees no key.
  template <int kN, class S>
  __device__ __forceinline__ void scores_to_ds(const Args<float, S>& a, const SdpaSequence& sq,
                                               int64_t hi, int64_t j0, float (&s)[kN / 8][4],
                                               const float (&dp)[kN / 8][4]) const {
    float mul[2] = {scale_log2, scale_log2};
    scale_huge_rows<kN>(huge, s, lse_log2, scale_log2, true, mul);
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = mma::exp2_ftz(fmaf(s[nt][e], mul[e / 2], -lse_log2[e / 2]));
        s[nt][e] = p * (dp[nt][e] - dl[e / 2]);
      }
    }
    if (!interior(a, sq, row_w, 16, hi, j0, kN)) hide_unseen<kN>(a, sq, row_w, hi, j0, s, 0.0f);
  }
  // dQ's rows, scaled.
  template <int kD, class S>
  __device__ __forceinline__ void store(const Args<float, S>& a, const QueryBlock& qb,
                                        const float (&dq)[kD / 8][4]) const {
    const float scale[2] = {a.scale, a.scale};
    store_rows<S, kD>(a.dq, a.dqs, qb.b, qb.h, qb.sq.q0, row_w, qb.sq.rows_q, a.Dqk, dq, scale);
  }
};

// A group's products of a dQ pass from tile it's K and V (three K buffers, two V: K(j) serves
// two steps' products, V(j) one): S = Q K^T and dP = dO V^T, and dQ += dS K.
template <class S, int kD>
struct DqProducts {
  static constexpr int kN = kDqKeys<kD>;
  static constexpr uint32_t kTileBytes = kN * kD * sizeof(S);  // one walked buffer
  wg::RowOperand<S, kBlockRows, kD> q, d_out;
  uint32_t k_at, v_at;
  // Once Q's and dO's copies are visible to the group.
  __device__ __forceinline__ DqProducts(S* Qs, S* dOs, S* Ks, S* Vs, int group, int warp)
      : q(Qs, group, warp),
        d_out(dOs, group, warp),
        k_at(wgmma::shared_address(Ks)),
        v_at(wgmma::shared_address(Vs)) {}
  __device__ __forceinline__ uint32_t k_tile(int it) const {
    return k_at + static_cast<uint32_t>(it % 3) * kTileBytes;
  }
  // S(it) and dP(it), committed.
  __device__ __forceinline__ void scores(float (&s)[kN / 8][4], float (&dp)[kN / 8][4],
                                         int it) const {
    q.template times_transposed<kN>(s, k_tile(it));
    d_out.template times_transposed<kN>(dp, v_at + static_cast<uint32_t>(it & 1) * kTileBytes);
    wgmma::commit();
  }
  // dQ += dS(it) K(it), not committed.
  __device__ __forceinline__ void dq(float (&d)[kD / 8][4], const AFragments<S, kN>& ds,
                                     int it) const {
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk)
      wgmma::product_rs<S, kD>(d, ds[kk], wgmma::mn_major(k_tile(it), kN, kk));
  }
};

// The dQ pass, pipelined as the forward (cuda_sdpa_wgmma_forward.cu): dS of tile j is computed
// while dQ += dS(j - 1) K(j - 1) runs, and the products of tile j + 1 are issued with dS(j) K(j).
// K(j) serves two steps' products (S(j), then dS(j) K(j)), so it has three buffers. Per tile j,
// with S(j) and dP(j) in registers:
//   1. dS(j) in place;
//   2. wait for dQ += dS(j - 1) K(j - 1); dS(j) into its registers;
//   3. the copies of K(j + 1) and V(j + 1) done, block barrier; start copying K(j + 2) into
//      K(j - 1)'s buffer and V(j + 2) into V(j)'s;
//   4. issue S(j + 1) and dP(j + 1), then dQ += dS(j) K(j); wait for the first two.
template <class S, int kD>
__global__ void __launch_bounds__(wg::kThreads, 1)
    wgmma_dq_kernel(const __grid_constant__ Args<float, S> a, Vectorized vec) {
  constexpr int kN = kDqKeys<kD>;
  extern __shared__ __align__(1024) unsigned char smem[];
  S* Qs = reinterpret_cast<S*>(wg::aligned_tiles(smem));
  S* dOs = Qs + kBlockRows * kD;
  S* Ks = dOs + kBlockRows * kD;  // three buffers of kN rows
  S* Vs = Ks + 3 * kN * kD;       // two buffers
  const int group = wg::group(), warp = wg::warp_in_group();
  const QueryBlock qb = query_block(a, kBlockRows);
  const int64_t i0 = qb.i0, h = qb.h, b = qb.b;
  const SdpaSequence& sq = qb.sq;
  if (i0 >= sq.rows_q) return;
  wg::load_block_rows<S, kD>(Qs, slice(a.q, a.qs, b, h), a.qs, qb, a.Dqk, vec.q);
  wg::load_block_rows<S, kD>(dOs, slice(a.dout, a.dos, b, h), a.dos, qb, a.Dv, vec.dout);
  const int64_t row_g = i0 + wg::kGroupRows * group, row_w = row_g + 16 * warp;
  // Every group multiplies every tile (dS is 0 where its rows see no key), as the forward.
  const KeyTiles<kN> keys = key_tiles<kN>(a, sq, i0, kBlockRows, row_g, wg::kGroupRows);
  const int64_t hi = keys.hi;
  const int n_tiles = keys.n;
  const auto load_kv = [&](int it) {  // K(it) and V(it) into their buffers
    load_kv_tile<S, kD, kN, wg::kThreads, Swizzled<S, kN>>(
        a, qb, Ks + (it % 3) * kN * kD, Vs + (it & 1) * kN * kD, keys.first_key(it), nullptr, vec);
  };
  for (int it = 0; it < 2 && it < n_tiles; ++it) load_kv(it);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  wgmma::fence_async_shared();
  __syncthreads();
  const DqProducts<S, kD> products(Qs, dOs, Ks, Vs, group, warp);
  float s[kN / 8][4], dp[kN / 8][4];
  if (n_tiles > 0) {
    wgmma::fence();
    products.scores(s, dp, 0);
    wgmma::wait<0>();
    wgmma::fence_operand(s);
    wgmma::fence_operand(dp);
  }

  const DqRows rows(a, qb, row_w);
  float dq[kD / 8][4] = {};
  AFragments<S, kN> df;
  wgmma::fence_operand(dq);  // its zeros set here: set later, they made ptxas serialize
  for (int it = 0; it < n_tiles; ++it) {
    // 1. dS = P (dP - D), as backward_dq_kernel's plain path; 0 for the keys a row does not see.
    rows.scores_to_ds<kN>(a, sq, hi, keys.first_key(it), s, dp);
    // 2.
    wgmma::wait<0>();
    wgmma::fence_operand(dq);
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) to_a_fragment<S, kN>(df, nt, s[nt]);
    // 3.
    mma::cp_async_wait<0>();
    wgmma::fence_async_shared();
    __syncthreads();
    if (it + 2 < n_tiles) load_kv(it + 2);
    mma::cp_async_commit();
    // 4. (The last tile multiplies its own K and V again, unused: products under a branch made
    // ptxas serialize every product.)
    wgmma::fence_operand(dq);
    wgmma::fence();
    products.scores(s, dp, it + 1 < n_tiles ? it + 1 : it);
    wgmma::fence();
    products.dq(dq, df, it);
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::fence_operand(s);
    wgmma::fence_operand(dp);
  }
  wgmma::wait<0>();
  wgmma::fence_operand(dq);
  mma::cp_async_wait<0>();  // the last, empty group of copies
  rows.store<kD>(a, qb, dq);
}

// The dK/dV pass, pipelined as the dQ pass: P^T and dS^T of tile j are computed while
// dV += P^T(j - 1) dO(j - 1) and dK += dS^T(j - 1) Q(j - 1) run, and the products of tile j + 1
// are issued with those of tile j. Q and dO serve two steps' products each: three buffers.
template <class S, int kD>
__global__ void __launch_bounds__(wg::kThreads, 1)
    wgmma_dkv_kernel(const __grid_constant__ Args<float, S> a, Vectorized vec) {
  constexpr int kN = kWalk64, kKeys = kBlockRows;
  constexpr uint32_t kTileBytes = kN * kD * sizeof(S);
  extern __shared__ __align__(1024) unsigned char smem[];
  S* Ks = reinterpret_cast<S*>(wg::aligned_tiles(smem));
  S* Vs = Ks + kKeys * kD;
  S* Qs = Vs + kKeys * kD;  // three buffers of kN rows
  S* dOs = Qs + 3 * kN * kD;
  float* lse_s = reinterpret_cast<float*>(dOs + 3 * kN * kD);  // three buffers (log2 units)
  float* dl_s = lse_s + 3 * kN;
  const int group = wg::group(), warp = wg::warp_in_group();
  const int64_t tiles = (a.Skv + kKeys - 1) / kKeys, blk = blockIdx.x;
  const int64_t j0 = (blk % tiles) * kKeys, hk = (blk / tiles) % a.Hk, b = blk / (tiles * a.Hk);
  const SdpaSequence sq = a.seq(b);
  if (j0 >= sq.rows_kv) return;  // past a ragged sequence's keys (the whole block)
  const int64_t G = a.Hq / a.Hk, q_end = sq.q0 + sq.rows_q, kv_end = sq.kv0 + sq.rows_kv;
  using Rows = Swizzled<S, kKeys>;
  load_rows<S, kD, kKeys, wg::kThreads, Rows>(Ks, slice(a.k, a.ks, b, hk), a.ks, sq.kv0 + j0,
                                              kv_end, a.Dqk, nullptr, vec.k);
  load_rows<S, kD, kKeys, wg::kThreads, Rows>(Vs, slice(a.v, a.vs, b, hk), a.vs, sq.kv0 + j0,
                                              kv_end, a.Dv, nullptr, vec.v);
  // The query tiles that can see some key of the block. Every group multiplies every tile (P
  // and dS are 0 where its keys are not seen), as the dQ pass.
  const QueryWalk<kN> walk = query_walk<kN>(a, sq, j0, kKeys, G);
  const int64_t i_hi = walk.hi, n_tiles = walk.n;
  const int64_t key_w = j0 + wg::kGroupRows * group + 16 * warp;  // this warp's first key
  const auto load_q = [&](QueryTile t, int buf) {
    const int64_t h = t.h, i0 = t.i0;
    load_rows<S, kD, kN, wg::kThreads, Swizzled<S, kN>>(
        Qs + buf * kN * kD, slice(a.q, a.qs, b, h), a.qs, sq.q0 + i0, q_end, a.Dqk, nullptr, vec.q);
    load_rows<S, kD, kN, wg::kThreads, Swizzled<S, kN>>(dOs + buf * kN * kD,
                                                        slice(a.dout, a.dos, b, h), a.dos,
                                                        sq.q0 + i0, q_end, a.Dv, nullptr, vec.dout);
    copy_row_stats<kN>(a, sq, b, t, lse_s + buf * kN, dl_s + buf * kN);
  };
  // Tile `it` is in buffer `buf` (it % 3, kept as a counter); `ahead`, tile it + 2, is copied
  // into buffer (it + 2) % 3 during step it.
  QueryTile ahead{hk * G, walk.lo};
  int64_t i0 = walk.lo;  // tile it's first row (its head is not needed)
  for (int t = 0; t < 2 && t < n_tiles; ++t) {
    load_q(ahead, t);
    ahead = walk.after(ahead);
  }
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  finish_row_stats<kN>(lse_s);  // tile 0's; tile 1's at step 0
  wgmma::fence_async_shared();
  __syncthreads();
  const uint32_t q_at = wgmma::shared_address(Qs), do_at = wgmma::shared_address(dOs);
  const wg::RowOperand<S, kKeys, kD> k_op(Ks, group, warp), v_op(Vs, group, warp);
  float st[kN / 8][4], dpt[kN / 8][4];   // S^T and dP^T: keys x queries
  const auto issue_sdp = [&](int buf) {  // S^T = K Q^T, dP^T = V dO^T of the tile in buf
    k_op.template times_transposed<kN>(st, q_at + buf * kTileBytes);
    v_op.template times_transposed<kN>(dpt, do_at + buf * kTileBytes);
    wgmma::commit();
  };
  if (n_tiles > 0) {
    wgmma::fence();
    issue_sdp(0);
    wgmma::wait<0>();
    wgmma::fence_operand(st);
    wgmma::fence_operand(dpt);
  }

  const float scale_log2 = a.scale * kLog2e;
  float dk[kD / 8][4] = {}, dv[kD / 8][4] = {};
  wgmma::fence_operand(dk);  // their zeros set here, as the dQ pass's
  wgmma::fence_operand(dv);
  AFragments<S, kN> pf, df;
  int buf = 0;
  for (int64_t it = 0; it < n_tiles; ++it) {
    // 1. P^T and dS^T in place, as backward_dkv_kernel's plain path.
    plain_grads_t<kN>(a, sq, interior(a, sq, i0, kN, sq.len_kv, key_w, 16), key_w, i_hi, i0,
                      lse_s + buf * kN, dl_s + buf * kN, scale_log2, st, dpt);
    // 2. the previous tile's products done: their registers take this tile's P^T and dS^T.
    wgmma::wait<0>();
    wgmma::fence_operand(dv);
    wgmma::fence_operand(dk);
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) {
      to_a_fragment<S, kN>(pf, nt, st[nt]);
      to_a_fragment<S, kN>(df, nt, dpt[nt]);
    }
    // 3. tile it + 1 copied (its statistics finished); every group done with tile it - 1, whose
    // buffer takes tile it + 2.
    const int next_buf = buf == 2 ? 0 : buf + 1, ahead_buf = next_buf == 2 ? 0 : next_buf + 1;
    mma::cp_async_wait<0>();
    if (it + 1 < n_tiles) finish_row_stats<kN>(lse_s + next_buf * kN);
    wgmma::fence_async_shared();
    __syncthreads();
    if (it + 2 < n_tiles) {
      load_q(ahead, ahead_buf);
      ahead = walk.after(ahead);
    }
    mma::cp_async_commit();
    // 4. the products of tile it + 1 (of tile it again at the last: no product under a branch),
    // then dV += P^T dO and dK += dS^T Q (scaled at the end); wait for the first.
    wgmma::fence_operand(dv);
    wgmma::fence_operand(dk);
    wgmma::fence();
    issue_sdp(it + 1 < n_tiles ? next_buf : buf);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      wgmma::product_rs<S, kD>(dv, pf[kk], wgmma::mn_major(do_at + buf * kTileBytes, kN, kk));
      wgmma::product_rs<S, kD>(dk, df[kk], wgmma::mn_major(q_at + buf * kTileBytes, kN, kk));
    }
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::fence_operand(st);
    wgmma::fence_operand(dpt);
    i0 = i0 + kN < walk.end ? i0 + kN : walk.lo;
    buf = next_buf;
  }
  wgmma::wait<0>();
  wgmma::fence_operand(dv);
  wgmma::fence_operand(dk);
  mma::cp_async_wait<0>();  // the last, empty group of copies
  const float one[2] = {1.0f, 1.0f}, scale[2] = {a.scale, a.scale};
  store_rows<S, kD>(a.dk, a.dks, b, hk, sq.kv0, key_w, sq.rows_kv, a.Dqk, dk, scale);
  store_rows<S, kD>(a.dv, a.dvs, b, hk, sq.kv0, key_w, sq.rows_kv, a.Dv, dv, one);
}

// Calls f(std::integral_constant<int, kD>) for the head width of a call the warpgroup kernels
// take (plain_only() 16-bit calls at head dims up to 128 on a wgmma_device(), wg::runs_wgmma,
// the passes' shared memory within the device's); false (f not called) for any other.
template <class S, class F>
bool with_wgmma_width(int device, const Args<float, S>& a, F&& f) {
  if constexpr (kTf32<S>) {
    return false;
  } else {
    const int64_t width = std::max(a.Dqk, a.Dv);
    if (width > 128 || !wg::runs_wgmma(width) || !plain_only(a) || !wgmma_device(device))
      return false;
    const auto run = [&](auto dim) {
      constexpr int kD = decltype(dim)::value;
      const size_t smem = std::max(smem_wg_dq<S, kD>, smem_wg_dkv<S, kD>);
      if (static_cast<size_t>(shared_optin(device)) < smem) return false;
      f(dim);
      return true;
    };
    return width <= 64 ? run(std::integral_constant<int, 64>{})
                       : run(std::integral_constant<int, 128>{});
  }
}

}  // namespace

template <class S>
bool wgmma_backward_dq(int device, const Args<float, S>& a, const Vectorized& vec, cudaStream_t s) {
  return with_wgmma_width(device, a, [&](auto dim) {
    constexpr int kD = decltype(dim)::value;
    const int64_t blocks = a.B * a.Hq * ((a.Sq + kBlockRows - 1) / kBlockRows);
    if (blocks == 0) return;
    launch<wg::kThreads>(wgmma_dq_kernel<S, kD>, blocks, smem_wg_dq<S, kD>, s,
                         "sdpa wgmma backward dq kernel", a, vec);
  });
}

template <class S>
bool wgmma_backward_dkv(int device, const Args<float, S>& a, const Vectorized& vec,
                        cudaStream_t s) {
  return with_wgmma_width(device, a, [&](auto dim) {
    constexpr int kD = decltype(dim)::value;
    const int64_t blocks = a.B * a.Hk * ((a.Skv + kBlockRows - 1) / kBlockRows);
    if (blocks)
      launch<wg::kThreads>(wgmma_dkv_kernel<S, kD>, blocks, smem_wg_dkv<S, kD>, s,
                           "sdpa wgmma backward dk/dv kernel", a, vec);
  });
}

#define TG_WGMMA_BACKWARD(S)                                                                       \
  template bool wgmma_backward_dq<S>(int, const Args<float, S>&, const Vectorized&, cudaStream_t); \
  template bool wgmma_backward_dkv<S>(int, const Args<float, S>&, const Vectorized&, cudaStream_t);
TG_WGMMA_BACKWARD(__nv_bfloat16)
TG_WGMMA_BACKWARD(__half)
TG_WGMMA_BACKWARD(float)
#undef TG_WGMMA_BACKWARD

}  // namespace tg::cuda::mma_sdpa
