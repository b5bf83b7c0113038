// Scaled-dot-product attention with softmax statistics and a hand-written backward
// (DESIGN.md §4). q (B, Hq, Sq, Dqk), k (B, Hk, Skv, Dqk), v (B, Hk, Skv, Dv), Hq % Hk == 0.
// The ragged layout (cu_seqlens_q/kv given): q (Tq, Hq, Dqk), k (Tk, Hk, Dqk), v (Tk, Hk, Dv)
// hold the B sequences back to back; out is (Tq, Hq, Dv) and stats (Tq, Hq, 1).
#pragma once
#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace tg {

enum class CausalAlign { TopLeft, BottomRight };

struct SdpaOptions {
  std::optional<double> scale;  // default 1/sqrt(Dqk)
  bool causal = false;
  CausalAlign causal_align = CausalAlign::TopLeft;  // or BottomRight: j <= i + Skv - Sq
  int64_t window = 0;                               // > 0 keeps keys j > i_aligned - window
  std::optional<Tensor>
      mask;  // broadcastable to (B, Hq, Sq, Skv); float: added; bool: true = attend
  std::optional<Tensor> seq_len_q, seq_len_kv;  // int64 (B): rows/keys at or past them are padding
  // The ragged layout: int64 (B + 1) offsets, 0 first, never decreasing, the rows of q (of k)
  // last. Every rule applies per sequence with its own lengths (bottom-right alignment,
  // ALiBi); the mask broadcasts to (B, Hq, max Sq, max Skv) and dropout indexes that padded
  // layout. Both devices; twice differentiable like the dense layout.
  std::optional<Tensor> cu_seqlens_q, cu_seqlens_kv;
  bool alibi = false;  // adds -slope_h * |i_aligned - j|
  double softcap = 0;  // > 0: scores become c * tanh(s / c)
  double dropout_p = 0;
  uint64_t seed = 0, offset = 0;  // dropout stream position (DESIGN.md §5)
};

// A row that no key is visible to has out 0, stats -inf and zero gradients. A NaN in q, k, v or
// a float mask gives NaN wherever it reaches, as in sdpa_reference: a row with a NaN score has
// out NaN (and stats -inf, there being no finite logsumexp), and NaN gradients. On the CPU the
// backward and double backward recompute each score as the forward summed it, bit for bit (for
// up to 8 query rows a head, as dot products of K's rows in every pass, whatever the threads or
// the batch), so their P = exp(S - stats) is the forward's, at any size of score. The CUDA
// kernels keep out and stats as accurate as their scores at any size, and their gradients
// finite (P at most 1). But the tensor-core backward recomputes scores as other products and
// reads the statistics back in log2 units, so its P carries their rounding: from scores of
// about 10^6, where a float's spacing reaches 1/8 of a log2 unit (2^(1/8): 9%), P drifts,
// and from 10^8 on a row's top key can get any P from 0 to 1.
struct SdpaResult {
  Tensor out;  // (B, Hq, Sq, Dv); ragged: (Tq, Hq, Dv)
  // (B, Hq, Sq, 1) (ragged: (Tq, Hq, 1)): logsumexp of the masked scores, -inf for fully masked
  // rows; float32 for bfloat16/float16 q (compute_dtype), else q's dtype.
  Tensor stats;
};

struct SdpaGrads {
  Tensor dq, dk, dv;
  Tensor dmask;  // the float mask's gradient reduced to its shape (materializes the
                 // (B, Hq, Sq, Skv) score gradient first); undefined without a float mask
};

// Differentiable through the tape (q, k, v and a float mask may require grad).
SdpaResult sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& opts = {});
// The two passes, for users who drive them: no tape.
SdpaResult sdpa_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                        const SdpaOptions& opts = {});
SdpaGrads sdpa_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& dout, const Tensor& stats, const SdpaOptions& opts = {});
// The same function composed from primitive ops (matmul, softmax pieces, where), with autograd
// through it: the reference the kernels are tested against. Materializes (B, Hq, Sq, Skv).
SdpaResult sdpa_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                          const SdpaOptions& opts = {});
// The dropout keep-mask (bool, (B, Hq, Sq, Skv)) that sdpa uses for these options.
Tensor sdpa_dropout_mask(int64_t batch, int64_t heads_q, int64_t len_q, int64_t len_kv,
                         const SdpaOptions& opts, Device device = kCPU);
// ALiBi slopes of `heads` heads (float64, (heads)).
Tensor alibi_slopes(int64_t heads);

}  // namespace tg
