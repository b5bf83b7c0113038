// Rotary position embedding (RoPE) on adjacent pairs of the last dim (seeds/002 §2):
// (x[2i], x[2i+1]) at position t is rotated by the angle t * theta^(-2i / D).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tg {

struct RopeOptions {
  double theta = 10000.0;
  int64_t offset = 0;    // position of the first element along seq_dim (decoding with a cache)
  int64_t seq_dim = -2;  // the positions dim: -2 for (B, H, S, D), -3 for (B, S, H, D)
  bool inverse = false;  // rotate by the negated angle (RoPE's inverse and its backward)
  // Each row's own position (packed batches, whose positions restart at every sequence):
  // when not empty, row t along seq_dim sits at positions[t] + offset instead of t + offset.
  // One entry per row, each >= 0.
  std::vector<int64_t> positions{};  // initialised: RopeOptions{theta, offset} stays warning-free
};

// x (..., D) floating, D even. Differentiable; the gradient is the inverse rotation.
Tensor rope(const Tensor& x, const RopeOptions& opts = {});

}  // namespace tg
