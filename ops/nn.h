// Neural-network ops: softmax family, embedding, cross-entropy, dropout.
#pragma once
#include <cstdint>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"

namespace tg {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// x / sqrt(mean(x^2 over the last dim) + eps) * weight; weight (D) may be undefined (no scale).
// One fused pass each way; the backward is not itself differentiable.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);
// The fused gradient: {dx, dweight} (dweight undefined without a weight) from the forward's
// contiguous x and per-row rstd = 1/sqrt(mean(x^2) + eps).
std::vector<Tensor> rms_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                      const Tensor& rstd);

// SwiGLU on the packed projections x (..., 2F) = [gate, up]: silu(gate) * up, (..., F).
// Forward and backward are one fused pass each; the backward is not itself differentiable.
Tensor swiglu(const Tensor& x);
// The fused gradient: dx (..., 2F) from dout (..., F) and the forward's contiguous x.
Tensor swiglu_backward(const Tensor& grad, const Tensor& x);

// Rows of weight (R, D) picked by int64 ids of any shape: ids.shape + [D].
Tensor embedding(const Tensor& weight, const Tensor& ids);
// Gradient of embedding w.r.t. weight: grad (ids.shape + [D]) scatter-added into (R, D).
Tensor embedding_backward(const Tensor& grad, const Tensor& ids, int64_t num_rows);

enum class Reduction { Mean, Sum, None };
struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;  // Mean over non-ignored targets (0 if there are none)
};
// logits (..., C) float, targets (...) int64 class ids in [0, C) or ignore_index.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions opts = {});

// Keeps x[n] where the Philox uniform at offset + n exceeds p and scales it by 1/(1-p).
Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset);
Tensor dropout(const Tensor& x, double p, Generator& gen);  // takes and advances gen's offset

}  // namespace tg
