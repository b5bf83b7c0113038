// The 16-bit SDPA's tile products on AMX (amx_tiles.h), for cpu_sdpa_forward.cpp and
// cpu_sdpa_backward.cpp: the operands each product reads, converted to AMX's layouts once where
// they are reused (a head's keys and values, a query tile's rows) and per key block where they
// are made (P and dS). q, k, v and dO are exact in their terms (one for bfloat16, two for
// float16: data_terms), so their products are exact; P and dS are float32 and go in as two
// terms (16 significant bits), so that every result is within about 2^-16 of the float32
// kernel's, far inside the 16-bit type's rounding (FlashAttention-2 and the CUDA tensor-core
// kernels round P and dS to the 16-bit type itself). The score rules, the softmax and
// everything between the products stay in the kernels' files, on float32 tiles as with the FMA
// micro-kernel.
//
// q goes into the products times the softmax scale where that is a power of two (q_scale), else
// unscaled (scale q would not be exact in its terms), and then the scale is applied to the scores
// and to dK after the products.
//
// The backward keeps dK and dV transposed (dK^T += q^T dS, dV^T += dO^T P), so that every
// operand made per key block is read along its rows: P and dS as they come out of the score
// passes, never transposed. The transposes are of the query tile (once for all its key blocks)
// and of the accumulators at the end of a task.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/aligned_buffer.h"
#include "backends/cpu/amx_tiles.h"
#include "backends/cpu/cpu_sdpa_scores.h"
#include "backends/cpu_api.h"

namespace tg::cpu::sdpa_amx {

using amx::round16;

constexpr int kTile = 2;  // terms of P and dS (float32)

// The terms of q, k, v and dO that hold them exactly: one for bfloat16; two for float16, whose
// 11 significant bits are a bfloat16 and the rounding of the rest (its range is inside
// bfloat16's).
inline int data_terms(const SdpaParams& p) { return p.q.dtype == kBFloat16 ? 1 : 2; }

// Whether this call's products run on AMX: 16-bit inputs where cpu_sdpa_on_amx(len_q) holds (an
// AVX-512 build, whose tile strides are whole AMX tiles of 16 floats, and more query rows a head
// than one tile). The forward and the backward decide alike, so that the backward's scores are
// the forward's to the bit.
inline bool usable(const SdpaParams& p) {
  const bool half = p.q.dtype == kBFloat16 || p.q.dtype == kFloat16;
  return half && cpu_sdpa_on_amx(p.len_q());
}

// A row stride for a float accumulator n columns wide: whole tiles, and not a multiple of 1 KiB
// (see packed_stride in tile_gemm.h).
inline int64_t accumulator_stride(int64_t n) {
  const int64_t ld = round16(n);
  return ld % 256 == 0 ? ld + 16 : ld;
}

// What of the softmax scale multiplies q before the products: all of it where it is a power of
// two (1/8 at head dim 64, as at 4, 16 and 256) not far from 1, which leaves q exact (and
// normal) and spares the scores a pass (bfloat16 forward at (1, 8, 1024, 64): 3.3 ms with the
// pass, 3.0 without), else none.
inline float q_scale(float scale) {
  int e = 0;
  return std::frexp(scale, &e) == 0.5f && e > -32 && e < 32 ? scale : 1.0f;
}

// What of the softmax scale multiplies q before the products: all of it for the FMA kernel
// (amx false, or float64); on AMX, q_scale.
template <class T>
T q_scale_of(T scale, bool amx) {
  if constexpr (std::is_same_v<T, float>) {
    if (amx) return q_scale(scale);
  }
  return scale;
}

// s = scale q K^T over keys [j0, j0 + cols) of the packed K^T (rows x cols at row stride ld,
// whole tiles), where q took q_scale(scale) of the scale and the scores take the rest.
inline void scores(const amx::SplitA& q, const amx::SplitB& kt, int64_t rows, int64_t Dqk,
                   int64_t j0, int64_t cols, float scale, float* s, int64_t ld) {
  amx::gemm(round16(rows), round16(cols), Dqk, q, amx::columns_from(kt, j0), s, ld, false);
  if (scale == 1.0f) return;
  for (int64_t r = 0; r < round16(rows); ++r)
    for (int64_t c = 0; c < round16(cols); ++c) s[r * ld + c] *= scale;
}

// One thread's forward operands: a kv head's K^T and V, a query tile's rows.
struct Forward {
  explicit Forward(int data_terms) : data(data_terms) {}
  int data;  // data_terms
  Buffer<uint16_t> head_buf, tile_buf;
  Buffer<float> rows_buf;
  amx::SplitB kt{}, v{};
  amx::SplitA q{};
  uint16_t* p_out = nullptr;  // P's terms, after q's

  void pack_head(const SdpaParams& p, int64_t b, int64_t hk, int64_t kv0, int64_t keys,
                 const int64_t* at) {
    const int64_t Dqk = p.dim_qk(), Dv = p.dim_v(), ld = std::max(Dqk, Dv);
    float* rows = rows_buf.get(keys * ld);
    const int64_t kt_n = amx::split_b_size(Dqk, keys, data);
    uint16_t* out = head_buf.get(kt_n + amx::split_b_size(keys + 32, Dv, data));
    sdpa_tiles::load_rows(p.k, b, hk, kv0, keys, rows, ld, at);
    kt = amx::pair_columns(Dqk, keys, rows, ld, data, out);
    sdpa_tiles::load_rows(p.v, b, hk, kv0, keys, rows, ld, at);
    v = amx::pair_rows(keys, Dv, rows, ld, data, out + kt_n, 32);
  }
  // The tile's query rows (times q_scale), R x Dqk at row stride ld; room for P's terms too.
  void load_queries(int64_t R, int64_t Dqk, const float* qt, int64_t ld) {
    const int64_t nq = amx::split_a_size(R, Dqk, data);
    uint16_t* out = tile_buf.get(nq + amx::split_a_size(32, sdpa_tiles::kBc, kTile));
    q = amx::split_rows(R, Dqk, qt, ld, data, out);
    p_out = out + nq;
  }
  // s = scale q K^T over keys [j0, j0 + cols) (sdpa_amx::scores).
  void scores(int64_t R, int64_t Dqk, int64_t j0, int64_t cols, float scale, float* s,
              int64_t lds) const {
    sdpa_amx::scores(q, kt, R, Dqk, j0, cols, scale, s, lds);
  }
  // acc = alpha acc + P V over keys [j0, j0 + cols), 32 rows at a time: a strip's P terms are
  // read back from L1.
  void values(int64_t R, int64_t Dv, int64_t j0, int64_t cols, const float* P, int64_t ldp,
              const float* alpha, float* acc, int64_t lda) {
    for (int64_t r0 = 0; r0 < R; r0 += 32) {
      const int64_t rows = std::min<int64_t>(32, R - r0);
      for (int64_t r = r0; r < r0 + rows; ++r) {
        if (alpha[r] == 1.0f) continue;  // the row's max unchanged: most blocks after the first
        for (int64_t c = 0; c < Dv; ++c) acc[r * lda + c] *= alpha[r];
      }
      const amx::SplitA pa = amx::split_rows(rows, cols, P + r0 * ldp, ldp, kTile, p_out);
      amx::gemm(round16(rows), round16(Dv), cols, pa, amx::rows_from(v, j0), acc + r0 * lda, lda,
                true);
    }
  }
};

// One thread's backward operands: a task's keys (K^T for S, K for dQ, V^T for dP) and its dK^T
// and dV^T; a query tile's rows (q for S, dO for dP) and their transposes (for dK^T and dV^T);
// and the terms of P and dS made per key block.
struct Backward {
  explicit Backward(int data_terms) : data(data_terms) {}
  int data;  // data_terms
  Buffer<uint16_t> head_buf, tile_buf, block_buf;
  Buffer<float> rows_buf, acc_buf;
  amx::SplitB kt{}, k{}, vt{};
  amx::SplitA q{}, dout{}, qt{}, doutt{};
  float *dkt = nullptr, *dvt = nullptr;  // round16(D) x ld_t each
  int64_t ld_t = 0;

  void pack_part(const SdpaParams& p, int64_t b, int64_t hk, int64_t kv0, int64_t keys) {
    const int64_t Dqk = p.dim_qk(), Dv = p.dim_v(), ld = std::max(Dqk, Dv);
    float* rows = rows_buf.get(keys * ld);
    const int64_t kt_n = amx::split_b_size(Dqk, keys, data);
    const int64_t k_n = amx::split_b_size(keys + 32, Dqk, data);
    uint16_t* out = head_buf.get(kt_n + k_n + amx::split_b_size(Dv, keys, data));
    sdpa_tiles::load_rows(p.k, b, hk, kv0, keys, rows, ld);
    kt = amx::pair_columns(Dqk, keys, rows, ld, data, out);
    k = amx::pair_rows(keys, Dqk, rows, ld, data, out + kt_n, 32);
    sdpa_tiles::load_rows(p.v, b, hk, kv0, keys, rows, ld);
    vt = amx::pair_columns(Dv, keys, rows, ld, data, out + kt_n + k_n);
    ld_t = accumulator_stride(keys);
    const int64_t n = (round16(Dqk) + round16(Dv)) * ld_t;
    dkt = acc_buf.get(n);
    dvt = dkt + round16(Dqk) * ld_t;
    std::fill(dkt, dkt + n, 0.0f);
  }
  // The query tile: q (times q_scale) and dO, rows x D at row strides ldq and ldo.
  void load_queries(int64_t rows, int64_t Dqk, int64_t Dv, const float* qs, int64_t ldq,
                    const float* dos, int64_t ldo) {
    const int64_t nq = amx::split_a_size(rows, Dqk, data);
    const int64_t nd = amx::split_a_size(rows, Dv, data);
    const int64_t nqt = amx::split_a_size(Dqk, rows, data);
    uint16_t* out = tile_buf.get(nq + nd + nqt + amx::split_a_size(Dv, rows, data));
    q = amx::split_rows(rows, Dqk, qs, ldq, data, out);
    dout = amx::split_rows(rows, Dv, dos, ldo, data, out + nq);
    qt = amx::split_columns(Dqk, rows, qs, ldq, data, out + nq + nd);
    doutt = amx::split_columns(Dv, rows, dos, ldo, data, out + nq + nd + nqt);
  }
  // s = scale q K^T (sdpa_amx::scores) and d = dO V^T over the part's keys [jk, jk + cols).
  void scores(int64_t rows, int64_t Dqk, int64_t jk, int64_t cols, float scale, float* s,
              int64_t lds) const {
    sdpa_amx::scores(q, kt, rows, Dqk, jk, cols, scale, s, lds);
  }
  void score_grads(int64_t rows, int64_t Dv, int64_t jk, int64_t cols, float* d,
                   int64_t ldd) const {
    amx::gemm(round16(rows), round16(cols), Dv, dout, amx::columns_from(vt, jk), d, ldd, false);
  }
  // dV^T += dO^T P.
  void values_grad(int64_t rows, int64_t Dv, int64_t jk, int64_t cols, const float* P,
                   int64_t ldp) {
    uint16_t* out = block_buf.get(block_size());
    const amx::SplitB pb = amx::pair_rows(rows, cols, P, ldp, kTile, out);
    amx::gemm(round16(Dv), round16(cols), rows, doutt, pb, dvt + jk, ld_t, true);
  }
  // dQ += dS K and dK^T += q^T dS (q as load_queries had it).
  void key_query_grads(int64_t rows, int64_t Dqk, int64_t jk, int64_t cols, const float* ds,
                       int64_t ldd, float* dq, int64_t ldq) {
    const int64_t na = amx::split_a_size(rows, cols, kTile);
    uint16_t* out = block_buf.get(block_size());
    const amx::SplitA da = amx::split_rows(rows, cols, ds, ldd, kTile, out);
    amx::gemm(round16(rows), round16(Dqk), cols, da, amx::rows_from(k, jk), dq, ldq, true);
    const amx::SplitB db = amx::pair_rows(rows, cols, ds, ldd, kTile, out + na);
    amx::gemm(round16(Dqk), round16(cols), rows, qt, db, dkt + jk, ld_t, true);
  }
  // Row j of dK (dV) from column j of dK^T (dV^T), keys x D at row stride ld.
  void transpose_out(int64_t keys, int64_t Dqk, int64_t Dv, float* dk, int64_t ldk, float* dv,
                     int64_t ldv) const {
    for (int64_t j = 0; j < keys; ++j) {
      for (int64_t d = 0; d < Dqk; ++d) dk[j * ldk + d] = dkt[d * ld_t + j];
      for (int64_t d = 0; d < Dv; ++d) dv[j * ldv + d] = dvt[d * ld_t + j];
    }
  }

 private:
  // A key block's terms: dS as A and as B (P's, as B, fit in the same room).
  static constexpr int64_t block_size() {
    return amx::split_a_size(sdpa_tiles::kBr, sdpa_tiles::kBc, kTile) +
           amx::split_b_size(sdpa_tiles::kBr, sdpa_tiles::kBc, kTile);
  }
};

}  // namespace tg::cpu::sdpa_amx
