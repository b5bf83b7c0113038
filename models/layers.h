// The basic layers: Linear, Embedding, RMSNorm. Initialisation draws from a Generator so that
// a model built twice with the same seed is the same model.
#pragma once
#include <cstdint>

#include "core/philox.h"
#include "models/module.h"

namespace tg::nn {

// y = x W^T + b with W (out, in), as in PyTorch. Weights ~ N(0, init_std^2), bias 0;
// init_std <= 0 picks 1/sqrt(in).
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, Generator& gen, double init_std = 0,
         DType dtype = kFloat32);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;  // bias undefined without one
};

// Rows of a (num, dim) table picked by int64 ids. Weights ~ N(0, init_std^2).
class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Generator& gen, double init_std = 1.0,
            DType dtype = kFloat32);
  Tensor forward(const Tensor& ids) const;
  Tensor weight;
};

// RMSNorm over the last dim with a learned scale (initialised to 1).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6, DType dtype = kFloat32);
  Tensor forward(const Tensor& x) const;
  Tensor weight;
  double eps;
};

}  // namespace tg::nn
