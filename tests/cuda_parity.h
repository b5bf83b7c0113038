// Shared by the CUDA suites: a table of op cases in the manner of ggml's test-backend-ops,
// each run on CPU and CUDA from the same float32 inputs, outputs and input gradients compared
// with a per-case tolerance; NaN and Inf are located and reported.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace cudatest {

using tg::Tensor;
using Inputs = std::vector<Tensor>;

struct OpCase {
  std::string name;
  std::function<Inputs()> make;  // float32 CPU inputs; those requiring grad get gradients
  std::function<Tensor(const Inputs&)> f;
  double tol = 1e-5;       // relative, with the same absolute floor
  double grad_tol = 1e-5;  // for the gradients
};

// A float32 CPU tensor with values in [lo, hi) from a fixed stream, requiring grad if `grad`.
Tensor r(const tg::Shape& s, uint64_t seed, double lo = -2, double hi = 2, bool grad = true);

// Compares a CUDA result with the CPU one; fails with the worst element, its index, and
// where NaN or Inf appear on one device and not the other.
void compare(const std::string& what, const Tensor& cpu, const Tensor& gpu, double tol);

// Trains a model on the CPU and its copy on CUDA (both from `seed`, AdamW at 1e-2) through the
// same batches, CPU tensors that train_step moves to each model's device, with the same
// dropout streams: every step's losses agree to 1e-4 (relative to 1 + |loss|) and every
// parameter at the end to 1e-3. `what` names the steps in the failure messages.
void check_training_parity(const tg::nn::TransformerConfig& cfg, uint64_t seed, int64_t steps,
                           const std::function<tg::nn::Batch(int64_t step)>& batch_at,
                           const std::string& what);

// Runs one case on both devices and compares the output and every input gradient.
void run_case(const OpCase& c);
void run_all(const std::vector<OpCase>& cases);

}  // namespace cudatest
