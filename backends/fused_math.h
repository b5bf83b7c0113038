// The per-element math of the fused model kernels, written once for the CPU (cpu_model.cpp)
// and CUDA (cuda_model.cu) kernels. The ops' composite fallbacks (ops/nn.cpp, ops/rope.cpp,
// ops/optimizer_ops.cpp) spell the same formulas with tensor ops.
#pragma once
#include <cmath>

#include "backends/scalar_ops.h"

namespace tg {

// One AdamW update's scalars (models/optim.h); bias_correction_k = 1 - beta_k^step.
struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2;
};

namespace fused {

// AdamWStep's constants in the parameter's dtype, computed once per step.
template <class T>
struct AdamWConstants {
  T decay, beta1, beta2, one_minus_beta1, one_minus_beta2, inv_sqrt_bc2, step, eps;
  explicit AdamWConstants(const AdamWStep& s)
      : decay(static_cast<T>(1 - s.lr * s.weight_decay)),
        beta1(static_cast<T>(s.beta1)),
        beta2(static_cast<T>(s.beta2)),
        one_minus_beta1(static_cast<T>(1 - s.beta1)),
        one_minus_beta2(static_cast<T>(1 - s.beta2)),
        inv_sqrt_bc2(static_cast<T>(1 / std::sqrt(s.bias_correction2))),
        step(static_cast<T>(s.lr / s.bias_correction1)),
        eps(static_cast<T>(s.eps)) {}
};

// p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps). T a scalar or a vector of them (the CPU kernel
// runs whole vectors through it).
template <class T, class C>
TG_HD inline void adamw_update(T& p, T g, T& m, T& v, const AdamWConstants<C>& c) {
  const T mi = c.beta1 * m + c.one_minus_beta1 * g;
  const T vi = c.beta2 * v + c.one_minus_beta2 * g * g;
  m = mi;
  v = vi;
  p = p * c.decay - c.step * mi / (scalar::sqrt_any(vi) * c.inv_sqrt_bc2 + c.eps);
}

// RoPE: the pair (even, odd) rotated by the angle whose cosine and sine are c and s.
template <class T>
TG_HD inline void rope_rotate(T even, T odd, T c, T s, T& out_even, T& out_odd) {
  out_even = even * c - odd * s;
  out_odd = even * s + odd * c;
}

// SwiGLU: silu(gate) * up, and its gradient from dout (T a scalar, or a vector of floats: the CPU
// kernel runs whole vectors through these formulas, scalar::exp_any's VectorMath).
template <class T>
TG_HD inline T swiglu(T gate, T up) {
  return gate * scalar::sigmoid(gate) * up;
}
template <class T>
TG_HD inline void swiglu_grad(T gate, T up, T dout, T& dgate, T& dup) {
  const T s = scalar::sigmoid(gate);
  dgate = dout * up * scalar::silu_grad_from_sigmoid(gate, s);
  dup = dout * gate * s;
}

}  // namespace fused
}  // namespace tg
