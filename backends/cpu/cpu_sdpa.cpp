// SDPA on the CPU in the manner of FlashAttention-2: query tiles against key tiles with an
// online softmax; the backward rebuilds P from the saved logsumexp tile by tile. Nothing of
// size Sq x Skv is ever allocated (except the score gradient, when a float mask asks for it).
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_blas.h"
#include "backends/scalar_ops.h"

namespace tg::cpu {
namespace {

constexpr int64_t kBr = 64;  // query rows per tile
constexpr int64_t kBc = 64;  // keys per tile

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Map = Eigen::Map<Mat<T>>;

// rows x width block of a (B, H, S, D) view at (b, h, row0) into a dense row-major buffer.
template <class T>
void load_rows(const View& v, int64_t b, int64_t h, int64_t row0, int64_t rows, T* dst) {
  const int64_t width = v.sizes[3], sr = v.strides[2], sd = v.strides[3];
  const T* src = static_cast<const T*>(v.data) + b * v.strides[0] + h * v.strides[1] + row0 * sr;
  for (int64_t r = 0; r < rows; ++r) {
    const T* s = src + r * sr;
    T* d = dst + r * width;
    if (sd == 1) {
      std::copy(s, s + width, d);
    } else {
      for (int64_t c = 0; c < width; ++c) d[c] = s[c * sd];
    }
  }
}

template <class T>
using ConstMap = Eigen::Map<const Mat<T>, 0, Eigen::OuterStride<>>;

// The same block, read-only: a map straight onto v's memory when its rows are contiguous
// (no copy), else copied into buf.
template <class T>
ConstMap<T> tile(const View& v, int64_t b, int64_t h, int64_t row0, int64_t rows, T* buf) {
  const int64_t width = v.sizes[3];
  if (v.strides[3] == 1 || width == 1) {
    const T* src =
        static_cast<const T*>(v.data) + b * v.strides[0] + h * v.strides[1] + row0 * v.strides[2];
    return ConstMap<T>(src, rows, width,
                       Eigen::OuterStride<>(std::max<int64_t>(v.strides[2], width)));
  }
  load_rows(v, b, h, row0, rows, buf);
  return ConstMap<T>(buf, rows, width, Eigen::OuterStride<>(width));
}

// C (m x n, row stride ldc) = [C +] op(A) op(B), op transposing when asked; every operand
// row-major with the given row strides. OpenBLAS when the build has it (its small-matrix
// kernels run two of the three tile products at 1.4-1.6x Eigen's speed here, see
// bench/bench_gemm_tiles.cpp), Eigen otherwise.
template <class T>
void tile_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
               const T* b, int64_t ldb, bool accumulate, T* c, int64_t ldc) {
#ifdef TAPEGRAD_OPENBLAS
  blas_gemm(ta, tb, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
#else
  using Stride = Eigen::OuterStride<>;
  ConstMap<T> A(a, ta ? k : m, ta ? m : k, Stride(lda)), B(b, tb ? n : k, tb ? k : n, Stride(ldb));
  Eigen::Map<Mat<T>, 0, Stride> C(c, m, n, Stride(ldc));
  auto product = [&](const auto& x, const auto& y) {
    if (accumulate) {
      C.noalias() += x * y;
    } else {
      C.noalias() = x * y;
    }
  };
  if (ta && tb) {
    product(A.transpose(), B.transpose());
  } else if (ta) {
    product(A.transpose(), B);
  } else if (tb) {
    product(A, B.transpose());
  } else {
    product(A, B);
  }
#endif
}

template <class T>
void store_rows(const View& v, int64_t b, int64_t h, int64_t row0, int64_t rows, const T* src,
                T factor) {
  const int64_t width = v.sizes[3], sr = v.strides[2], sd = v.strides[3];
  T* dst = static_cast<T*>(v.data) + b * v.strides[0] + h * v.strides[1] + row0 * sr;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) dst[r * sr + c * sd] = src[r * width + c] * factor;
}

int64_t seq_len(const View& lens, int64_t b, int64_t full) {
  if (!lens.data) return full;
  return static_cast<const int64_t*>(lens.data)[b * lens.strides[0]];
}

// The keys [lo, hi) that causal, window and padding leave visible to any row of a query tile.
struct KeyRange {
  int64_t lo = 0, hi = 0;
};
KeyRange key_range(const SdpaParams& p, int64_t i0, int64_t rows, int64_t len_kv) {
  const int64_t shift = p.align_shift();
  KeyRange r{0, len_kv};
  if (p.causal) r.hi = std::min(r.hi, i0 + rows - 1 + shift + 1);
  if (p.window > 0) r.lo = std::max<int64_t>(0, i0 + shift - p.window + 1);
  if (r.hi < r.lo) r.hi = r.lo;
  return r;
}

// Turns dot products S (rows x cols, leading dim ld; q already multiplied by the scale) into
// the final masked scores: softcap, ALiBi, float mask, then -inf wherever a mask hides the key.
// When `tanh_out` is given it receives tanh(s / softcap) for the backward's chain rule.
template <class T>
void finish_scores(const SdpaParams& p, T* S, int64_t ld, int64_t b, int64_t h, int64_t i0,
                   int64_t rows, int64_t j0, int64_t cols, int64_t len_q, int64_t len_kv,
                   T* tanh_out) {
  const T cap = static_cast<T>(p.softcap);
  const T slope = p.alibi ? static_cast<T>(alibi_slope(h, p.heads_q())) : T(0);
  const int64_t shift = p.align_shift();
  const T ninf = -std::numeric_limits<T>::infinity();
  const bool float_mask = p.mask.data && p.mask.dtype != kBool;
  const bool bool_mask = p.mask.data && p.mask.dtype == kBool;
  const int64_t* ms = p.mask.strides.data();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r, ia = i + shift;
    T* row = S + r * ld;
    // Keys [lo, hi) of this row that causal, window and padding leave visible.
    int64_t lo = 0, hi = i < len_q ? len_kv : 0;
    if (p.causal) hi = std::min(hi, ia + 1);
    if (p.window > 0) lo = std::max(lo, ia - p.window + 1);
    lo = std::clamp<int64_t>(lo - j0, 0, cols);
    hi = std::clamp<int64_t>(hi - j0, lo, cols);
    if (cap > T(0)) {
      for (int64_t c = lo; c < hi; ++c) {
        T t = std::tanh(row[c] / cap);
        if (tanh_out) tanh_out[r * ld + c] = t;
        row[c] = cap * t;
      }
    }
    if (p.alibi) {
      for (int64_t c = lo; c < hi; ++c) {
        const int64_t j = j0 + c;
        row[c] -= slope * static_cast<T>(ia > j ? ia - j : j - ia);
      }
    }
    if (p.mask.data) {
      const int64_t base = b * ms[0] + h * ms[1] + i * ms[2] + j0 * ms[3];
      if (float_mask) {
        const T* m = static_cast<const T*>(p.mask.data) + base;
        for (int64_t c = lo; c < hi; ++c) row[c] += m[c * ms[3]];
      } else if (bool_mask) {
        const bool* m = static_cast<const bool*>(p.mask.data) + base;
        for (int64_t c = lo; c < hi; ++c) row[c] = m[c * ms[3]] ? row[c] : ninf;
      }
    }
    std::fill(row, row + lo, ninf);
    std::fill(row + hi, row + cols, ninf);
  }
}

// Multiplies P (rows x cols) by the dropout keep mask and 1 / (1 - p), in place.
template <class T>
void apply_dropout(const SdpaParams& p, T* P, int64_t ld, int64_t b, int64_t h, int64_t i0,
                   int64_t rows, int64_t j0, int64_t cols) {
  const float pf = static_cast<float>(p.dropout_p);
  const T inv = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  const uint64_t skv = static_cast<uint64_t>(p.len_kv());
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t base =
        ((static_cast<uint64_t>(b) * p.heads_q() + h) * p.len_q() + (i0 + r)) * skv + j0;
    for (int64_t c = 0; c < cols; ++c)
      P[r * ld + c] *= sdpa_keep(p.seed, p.offset, base + c, pf) ? inv : T(0);
  }
}

template <class T>
void forward_typed(const SdpaParams& p) {
  const int64_t B = p.batch(), Hq = p.heads_q(), G = Hq / p.heads_kv(), Sq = p.len_q();
  const int64_t Dqk = p.dim_qk(), Dv = p.dim_v();
  const int64_t q_tiles = (Sq + kBr - 1) / kBr;
  const int64_t tasks = B * Hq * q_tiles;
  const T ninf = -std::numeric_limits<T>::infinity();
#pragma omp parallel
  {
    std::vector<T> qt(kBr * Dqk), kt(kBc * Dqk), vt(kBc * Dv), s(kBr * kBc), acc(kBr * Dv);
    std::vector<T> m(kBr), l(kBr);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / (Hq * q_tiles), h = (task / q_tiles) % Hq;
      const int64_t i0 = (task % q_tiles) * kBr, rows = std::min(kBr, Sq - i0);
      const int64_t len_q = seq_len(p.seq_len_q, b, Sq),
                    len_kv = seq_len(p.seq_len_kv, b, p.len_kv());
      std::fill(m.begin(), m.end(), ninf);
      std::fill(l.begin(), l.end(), T(0));
      std::fill(acc.begin(), acc.end(), T(0));
      KeyRange kr = i0 < len_q ? key_range(p, i0, rows, len_kv) : KeyRange{};
      load_rows(p.q, b, h, i0, rows, qt.data());
      Map<T> Q(qt.data(), rows, Dqk), A(acc.data(), rows, Dv);
      Q *= static_cast<T>(p.scale);  // scores come out of the GEMM already scaled
      for (int64_t j0 = kr.lo; j0 < kr.hi; j0 += kBc) {
        const int64_t cols = std::min(kBc, kr.hi - j0);
        ConstMap<T> K = tile(p.k, b, h / G, j0, cols, kt.data());
        ConstMap<T> V = tile(p.v, b, h / G, j0, cols, vt.data());
        tile_gemm(false, true, rows, cols, Dqk, Q.data(), Dqk, K.data(), K.outerStride(), false,
                  s.data(), kBc);
        finish_scores(p, s.data(), kBc, b, h, i0, rows, j0, cols, len_q, len_kv, (T*)nullptr);
        for (int64_t r = 0; r < rows; ++r) {
          T* row = s.data() + r * kBc;
          T mt = m[r];
          for (int64_t c = 0; c < cols; ++c) mt = row[c] > mt ? row[c] : mt;
          if (mt == ninf) {  // nothing visible in this row yet
            std::fill(row, row + cols, T(0));
            continue;
          }
          const T alpha = scalar::exp_any(m[r] - mt);  // 0 when m was -inf
          T sum = 0;
          for (int64_t c = 0; c < cols; ++c) {
            T e = scalar::exp_any(row[c] - mt);
            row[c] = e;
            sum += e;
          }
          l[r] = l[r] * alpha + sum;
          m[r] = mt;
          if (alpha != T(1)) A.row(r) *= alpha;
        }
        if (p.dropout_p > 0) apply_dropout(p, s.data(), kBc, b, h, i0, rows, j0, cols);
        tile_gemm(false, false, rows, Dv, cols, s.data(), kBc, V.data(), V.outerStride(), true,
                  A.data(), Dv);
      }
      T* stats = static_cast<T*>(p.stats.data) + (b * Hq + h) * Sq + i0;
      for (int64_t r = 0; r < rows; ++r) {
        const bool any = l[r] > T(0);
        stats[r] = any ? m[r] + std::log(l[r]) : ninf;
        A.row(r) *= any ? T(1) / l[r] : T(0);
      }
      store_rows(p.out, b, h, i0, rows, acc.data(), T(1));
    }
  }
}

template <class T>
void backward_typed(const SdpaParams& p, const View& dout, const SdpaGradViews& g) {
  const int64_t B = p.batch(), Hq = p.heads_q(), Hk = p.heads_kv(), G = Hq / Hk;
  const int64_t Sq = p.len_q(), Skv = p.len_kv(), Dqk = p.dim_qk(), Dv = p.dim_v();
  const T scale = static_cast<T>(p.scale), ninf = -std::numeric_limits<T>::infinity();
  const bool dropout = p.dropout_p > 0;
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  // One task per (batch, kv head): it owns dK and dV of that head and dQ of its query
  // heads, so there are no races and every sum has a fixed order.
#pragma omp parallel
  {
    std::vector<T> qt(kBr * Dqk), dot(kBr * Dv), ot(kBr * Dv), kt(kBc * Dqk), vt(kBc * Dv);
    std::vector<T> s(kBr * kBc), pd(kBr * kBc), dp(kBr * kBc), th(kBr * kBc);
    std::vector<T> dq(kBr * Dqk), dk(Skv * Dqk), dv(Skv * Dv), dvec(kBr), lse(kBr);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < B * Hk; ++task) {
      const int64_t b = task / Hk, hk = task % Hk;
      const int64_t len_q = seq_len(p.seq_len_q, b, Sq), len_kv = seq_len(p.seq_len_kv, b, Skv);
      std::fill(dk.begin(), dk.end(), T(0));
      std::fill(dv.begin(), dv.end(), T(0));
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        for (int64_t i0 = 0; i0 < Sq; i0 += kBr) {
          const int64_t rows = std::min(kBr, Sq - i0);
          std::fill(dq.begin(), dq.end(), T(0));
          KeyRange kr = i0 < len_q ? key_range(p, i0, rows, len_kv) : KeyRange{};
          if (kr.lo < kr.hi) {
            load_rows(p.q, b, h, i0, rows, qt.data());
            Map<T>(qt.data(), rows, Dqk) *= scale;  // scaled q: scores and dK need no more scaling
            load_rows(dout, b, h, i0, rows, dot.data());
            load_rows(p.out, b, h, i0, rows, ot.data());
            const T* st = static_cast<const T*>(p.stats.data) + (b * Hq + h) * Sq + i0;
            for (int64_t r = 0; r < rows; ++r) {
              T d = 0;
              for (int64_t c = 0; c < Dv; ++c) d += dot[r * Dv + c] * ot[r * Dv + c];
              dvec[r] = d;  // D = rowsum(dO * O)
              lse[r] = st[r];
            }
          }
          Map<T> Q(qt.data(), rows, Dqk), dO(dot.data(), rows, Dv), dQ(dq.data(), rows, Dqk);
          for (int64_t j0 = kr.lo; j0 < kr.hi; j0 += kBc) {
            const int64_t cols = std::min(kBc, kr.hi - j0);
            ConstMap<T> K = tile(p.k, b, hk, j0, cols, kt.data());
            ConstMap<T> V = tile(p.v, b, hk, j0, cols, vt.data());
            tile_gemm(false, true, rows, cols, Dqk, Q.data(), Dqk, K.data(), K.outerStride(), false,
                      s.data(), kBc);
            finish_scores(p, s.data(), kBc, b, h, i0, rows, j0, cols, len_q, len_kv,
                          p.softcap > 0 ? th.data() : nullptr);
            for (int64_t r = 0; r < rows; ++r) {  // P, rebuilt from the saved logsumexp
              T* row = s.data() + r * kBc;
              const T l = lse[r];
              for (int64_t c = 0; c < cols; ++c)
                row[c] = l == ninf ? T(0) : scalar::exp_any(row[c] - l);
              std::copy(row, row + cols, pd.data() + r * kBc);
            }
            if (dropout) apply_dropout(p, pd.data(), kBc, b, h, i0, rows, j0, cols);
            tile_gemm(true, false, cols, Dv, rows, pd.data(), kBc, dO.data(), Dv, true,
                      dv.data() + j0 * Dv, Dv);  // dV += Pd^T dO
            tile_gemm(false, true, rows, cols, Dv, dO.data(), Dv, V.data(), V.outerStride(), false,
                      dp.data(), kBc);  // dP = dO V^T
            for (int64_t r = 0; r < rows; ++r) {
              T* prow = s.data() + r * kBc;
              T* dprow = dp.data() + r * kBc;
              const T* drop = pd.data() + r * kBc;
              for (int64_t c = 0; c < cols; ++c) {
                T d = dprow[c];
                if (dropout) d = drop[c] != T(0) ? d * keep_scale : T(0);
                T ds = prow[c] * (d - dvec[r]);  // dS = P * (dP - D)
                if (g.dscores.data) {
                  static_cast<T*>(g.dscores.data)[((b * Hq + h) * Sq + i0 + r) * Skv + j0 + c] = ds;
                }
                if (p.softcap > 0) {
                  T t = th[r * kBc + c];
                  ds *= T(1) - t * t;
                }
                dprow[c] = ds;
              }
            }
            tile_gemm(false, false, rows, Dqk, cols, dp.data(), kBc, K.data(), K.outerStride(),
                      true, dQ.data(), Dqk);  // dQ += dS K
            tile_gemm(true, false, cols, Dqk, rows, dp.data(), kBc, Q.data(), Dqk, true,
                      dk.data() + j0 * Dqk, Dqk);  // dK += dS^T Q (q pre-scaled)
          }
          store_rows(g.dq, b, h, i0, rows, dq.data(), scale);
        }
      }
      store_rows(g.dk, b, hk, 0, Skv, dk.data(), T(1));
      store_rows(g.dv, b, hk, 0, Skv, dv.data(), T(1));
    }
  }
}

}  // namespace

void CpuBackend::sdpa_forward(const SdpaParams& p) {
  if (p.q.dtype == kFloat64) {
    forward_typed<double>(p);
  } else {
    forward_typed<float>(p);
  }
}

void CpuBackend::sdpa_backward(const SdpaParams& p, const View& dout, const SdpaGradViews& g) {
  if (p.q.dtype == kFloat64) {
    backward_typed<double>(p, dout, g);
  } else {
    backward_typed<float>(p, dout, g);
  }
}

}  // namespace tg::cpu
