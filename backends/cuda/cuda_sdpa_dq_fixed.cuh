// dQ summed in fixed point by the tensor-core backward's dK/dV pass (cuda_sdpa_deterministic_dq()
// "fixed"): deterministic, without the dQ pass and its two recomputed products.
//
// Each dK/dV block adds its keys' share of a query row's dQ, sum_j dS_ij K_j over its keys, to
// the row's sums. Float adds in the order the blocks happen to run change the sums' last bits
// from run to run; 64-bit integer adds give the same bits in any order. So each share is added
// as an integer count of a unit of the row's own: a power of two, 2^-60 to 2^-61 of a bound on
// every partial sum of the row's terms, so that no sum nears 2^63, and a share's conversion is
// exact but for its bits below the unit (a multiplication by a power of two, then rounding to
// an integer). The sums' one rounding to float comes at the end (dq_store_kernel).
//
// The bound. dS_ij = P_ij (f dP_ij - D_i), with f dropout's 1 / (1 - p) for a kept key (else
// dP's term is 0) and softcap's derivative (at most 1) as a factor, and the probabilities
// summing to 1 (the forward's statistics), so for any set of keys and column d
//   |sum_j dS_ij K_jd| <= max|K| sum_j P_ij (f |dO_i| |V_j| + |D_i|)
//                      <= max|K| (f |dO_i| max_j |V_j| + |D_i|),
// max|K| the largest |element| and max_j |V_j| the largest row norm over the sequence's keys of
// the head (kv_bounds_kernel, per chunk of keys), |dO_i| and D_i the row's (fixed_row_start, in
// the delta pass). A bound that is not finite (K, V or dO not finite) or a share that is not (a
// score not finite) marks the row: its unit becomes NaN, and its dQ NaN throughout, as a float
// sum of such terms would be in practice (a non-finite score reaches every column of the row).
#pragma once
#include <cfloat>
#include <cstdint>

#include "backends/cuda/cuda_mma.cuh"
#include "backends/cuda/cuda_sdpa_args.cuh"

namespace tg::cuda::mma_sdpa {

constexpr int kBoundKeys = 256;  // keys a chunk of kv_bounds_kernel, one warp each
__host__ __device__ inline int64_t bound_chunks(int64_t keys) {
  return (keys + kBoundKeys - 1) / kBoundKeys;
}

// The bounds of chunk c of head hk of sequence b (block (b hk) chunks + c, one warp): max_j |V_j|
// and max |K_jd| over its keys within the sequence, into kv_bounds[2 block] and [2 block + 1]
// (0 for a chunk past the sequence's keys).
template <class S>
__global__ void kv_bounds_kernel(Args<float, S> a) {
  const int64_t chunks = bound_chunks(a.Skv), blk = blockIdx.x;
  const int64_t c = blk % chunks, hk = (blk / chunks) % a.Hk, b = blk / (chunks * a.Hk);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const SdpaSequence sq = a.seq(b);
  float v_max = 0, k_max = 0;
  const int64_t end = min(c * kBoundKeys + kBoundKeys, sq.rows_kv);
  for (int64_t j = c * kBoundKeys; j < end; ++j) {
    float v2 = 0;
    for (int64_t d = lane; d < a.Dv; d += 32) {
      const float x = static_cast<float>(a.v[at4(a.vs, b, hk, sq.kv0 + j, d)]);
      v2 += x * x;
    }
    for (int64_t d = lane; d < a.Dqk; d += 32)
      k_max = fmaxf(k_max, fabsf(static_cast<float>(a.k[at4(a.ks, b, hk, sq.kv0 + j, d)])));
    v_max = fmaxf(v_max, warp_sum(v2));
  }
  k_max = warp_max(k_max);
  if (lane == 0) {
    a.kv_bounds[2 * blk] = sqrtf(v_max);
    a.kv_bounds[2 * blk + 1] = k_max;
  }
}

// The unit of a row whose dQ sums are bounded by `bound`: 2^(e - 61) for bound in [2^(e - 1),
// 2^e), kept within float's normal range with an inverse that is normal too; 1 for a bound of 0
// (every share is 0); NaN for a bound that is not finite.
__device__ __forceinline__ float fixed_unit(double bound) {
  if (!(bound <= DBL_MAX)) return __uint_as_float(0x7fc00000u);
  if (bound == 0) return 1.0f;
  int e = 0;
  frexp(bound, &e);
  e -= 61;
  return ldexpf(1.0f, e < -126 ? -126 : e > 126 ? 126 : e);
}

// The delta pass's part for padded query row `row` (one warp; D_i its delta, dout_sq |dO_i|^2,
// both from delta_row): zeroes its sums and sets its unit.
template <class S>
__device__ __forceinline__ void fixed_row_start(const Args<float, S>& a, int64_t row, int lane,
                                                float delta, float dout_sq) {
  if (row >= a.B * a.Hq * a.Sq) return;
  const int64_t i = row % a.Sq, h = (row / a.Sq) % a.Hq, b = row / (a.Sq * a.Hq);
  const SdpaSequence sq = a.seq(b);
  if (i >= sq.rows_q) return;
  for (int64_t d = lane; d < a.Dqk; d += 32) a.dq_fixed[row * a.Dqk + d] = 0;
  const float dout_norm = sqrtf(dout_sq);
  const int64_t chunks = bound_chunks(a.Skv);
  const float* bounds = a.kv_bounds + 2 * (b * a.Hk + h / (a.Hq / a.Hk)) * chunks;
  float v_max = 0, k_max = 0;
  for (int64_t c = lane; c < chunks; c += 32) {
    v_max = fmaxf(v_max, bounds[2 * c]);
    k_max = fmaxf(k_max, bounds[2 * c + 1]);
  }
  v_max = warp_max(v_max);
  k_max = warp_max(k_max);
  const double bound = static_cast<double>(k_max) *
                       (static_cast<double>(a.keep_scale) * dout_norm * v_max + fabsf(delta));
  if (lane == 0) a.dq_unit[row] = fixed_unit(bound);
}

// 1 / the unit of a row (`unit` its dq_unit entry), or 0 for a marked row, whose adds are then 0.
__device__ __forceinline__ float fixed_inverse(const float* unit) {
  const float u = *unit;
  return u > 0 ? 1.0f / u : 0.0f;
}

// Adds share v of a row's dQ sum at `sum`, as a count of the row's unit (`inverse` from
// fixed_inverse); a share that is not finite marks the row instead (every block that marks it
// stores the same NaN).
__device__ __forceinline__ void add_fixed(unsigned long long* sum, float v, float inverse,
                                          float* unit) {
  if (!(fabsf(v) <= FLT_MAX)) {
    *unit = __uint_as_float(0x7fc00000u);
    return;
  }
  mma::atomic_add_u64(sum, static_cast<unsigned long long>(llrintf(v * inverse)));
}

// A row's dQ value from its sum and unit (NaN for a marked row), before the scale.
__device__ __forceinline__ float fixed_value(unsigned long long sum, float unit) {
  return static_cast<float>(static_cast<long long>(sum)) * unit;
}

}  // namespace tg::cuda::mma_sdpa
