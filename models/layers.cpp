#include "models/layers.h"

#include <cmath>

#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/linalg.h"
#include "ops/nn.h"

namespace tg::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias, Generator& gen, double init_std,
               DType dtype) {
  TG_CHECK(in > 0 && out > 0, "Linear", "expected positive sizes, got in=", in, " out=", out);
  const double std = init_std > 0 ? init_std : 1.0 / std::sqrt(static_cast<double>(in));
  weight = register_parameter("weight", mul(randn({out, in}, gen, dtype), std));
  if (has_bias) bias = register_parameter("bias", zeros({out}, dtype));
}

Tensor Linear::forward(const Tensor& x) const {
  TG_CHECK(x.defined() && x.dim() >= 1 && x.sizes().back() == weight.size(1), "Linear",
           "argument 'x' must end in the input size ", weight.size(1), ", got shape ",
           x.defined() ? shape_str(x.sizes()) : std::string("(undefined)"));
  Tensor y = matmul(x, weight.transpose(0, 1));
  return bias.defined() ? add(y, bias) : y;
}

Embedding::Embedding(int64_t num, int64_t dim, Generator& gen, double init_std, DType dtype) {
  TG_CHECK(num > 0 && dim > 0, "Embedding", "expected positive sizes, got num=", num, " dim=", dim);
  weight = register_parameter("weight", mul(randn({num, dim}, gen, dtype), init_std));
}

Tensor Embedding::forward(const Tensor& ids) const { return embedding(weight, ids); }

RMSNorm::RMSNorm(int64_t dim, double eps_, DType dtype) : eps(eps_) {
  TG_CHECK(dim > 0, "RMSNorm", "expected a positive dim, got ", dim);
  weight = register_parameter("weight", ones({dim}, dtype));
}

Tensor RMSNorm::forward(const Tensor& x) const { return rms_norm(x, weight, eps); }

}  // namespace tg::nn
