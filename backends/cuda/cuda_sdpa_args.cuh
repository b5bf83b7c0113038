// What the CUDA SDPA kernels (the simple ones of cuda_sdpa.cu and the tiled ones of
// cuda_sdpa_flash.cu) share: their argument block, a plain struct passed by value with the
// per-element masking rules of sdpa_params.h, and small warp helpers.
#pragma once
#include <limits>

#include "backends/cuda/cuda_util.cuh"
#include "backends/sdpa_params.h"

namespace tg::cuda {

// The row views are (B, H, S, D) at any strides; in the ragged layout (SdpaParams) their batch
// stride is 0, S is the longest sequence, and sequence b's rows start at seq(b).q0 / kv0.
template <class T>
struct Args {
  const T *q, *k, *v, *o, *dout;
  int64_t qs[4], ks[4], vs[4], os[4], dos[4];
  T *out, *stats, *delta, *dq, *dk, *dv, *dscores;
  int64_t outs[4], sts[4], dqs[4], dks[4], dvs[4];
  const void* mask;
  bool mask_bool;
  int64_t ms[4];
  SdpaLengths lens;        // each sequence's place, lengths and alignment
  const int64_t* kv_rows;  // forward, ragged: key row kv0 + j is row kv_rows[kv0 + j]
  int64_t B, Hq, Hk, Sq, Skv, Dqk, Dv;
  T scale, softcap, keep_scale;
  bool causal, alibi;
  int64_t window;
  float dropout_p;
  uint64_t seed, offset;

  __device__ SdpaSequence seq(int64_t b) const { return lens.of(b); }
  // Where sequence s's key j lies in the k and v row views.
  __device__ int64_t key_row(const SdpaSequence& s, int64_t j) const {
    return kv_rows ? kv_rows[s.kv0 + j] : s.kv0 + j;
  }
  // The logsumexp of query row `row` (of the row views) of head h.
  __device__ T& stat(int64_t b, int64_t h, int64_t row) const {
    return stats[b * sts[0] + h * sts[1] + row * sts[2]];
  }
  // Dropout's draw for sequence b's row i and key j: their place in the padded (B, Hq, Sq, Skv)
  // layout in either layout (DESIGN §4).
  __device__ bool keep(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const uint64_t linear = ((static_cast<uint64_t>(b) * Hq + h) * Sq + i) * Skv + j;
    return sdpa_keep(seed, offset, linear, dropout_p);
  }
  // The final score of sequence b's row i and key j of head h (indices within the sequence)
  // from its scaled dot product: -inf where causal, window, padding or a boolean mask hide the
  // key; else softcap, ALiBi and the float mask, in the CPU's order. *t receives
  // tanh(dot / softcap) for the backward's chain rule.
  __device__ T score(int64_t b, int64_t h, int64_t i, int64_t j, T dot, T slope,
                     const SdpaSequence& s, T* t) const {
    const T ninf = -std::numeric_limits<T>::infinity();
    const int64_t ia = i + s.shift;
    if (i >= s.len_q || j >= s.len_kv || !sdpa_visible(causal, window, ia, j)) return ninf;
    T v = dot;
    if (softcap > T(0)) v = sdpa_softcap(v, softcap, *t);
    if (alibi) v = sdpa_alibi(v, slope, ia, j);
    if (mask) {
      const int64_t off = b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3];
      if (mask_bool) {
        if (!static_cast<const bool*>(mask)[off]) return ninf;
      } else {
        v += static_cast<const T*>(mask)[off];
      }
    }
    return v;
  }
  __device__ T slope_of(int64_t h) const {
    return alibi ? static_cast<T>(alibi_slope(h, Hq)) : T(0);
  }
};

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = 16; o > 0; o /= 2) {
    const T u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  return v;
}

__device__ __forceinline__ int64_t at4(const int64_t* st, int64_t a, int64_t b, int64_t c,
                                       int64_t d) {
  return a * st[0] + b * st[1] + c * st[2] + d * st[3];
}

template <class T>
Args<T> make_args(const SdpaParams& p);
// The backward's extra pointers (dout, the gradients, the score gradient).
template <class T>
void set_grad_args(Args<T>& a, const View& dout, const SdpaGradViews& g);

// The tiled kernels (float32, head dims up to 128); false when they do not apply and the
// simple kernels should run. `delta` holds rowsum(dO * O) per query row for the backward,
// indexed as the padded (B, Hq, Sq) rows in either layout.
bool sdpa_flash_forward(int device, const Args<float>& a);
bool sdpa_flash_backward(int device, const Args<float>& a);

}  // namespace tg::cuda
