// The CPU-against-CUDA comparisons of the CUDA suites: op cases and training runs.
#include "cuda_parity.h"

#include <cmath>

using namespace tg;

namespace cudatest {

Tensor r(const Shape& s, uint64_t seed, double lo, double hi, bool grad) {
  Tensor t = tgtest::rnd(s, seed, lo, hi).to(kFloat32);
  return grad ? t.requires_grad_() : t;
}

namespace {

std::string index_str(int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_str(idx);
}

}  // namespace

void compare(const std::string& what, const Tensor& cpu, const Tensor& gpu, double tol) {
  INFO(what);
  REQUIRE(gpu.device().is_cuda());
  REQUIRE(cpu.sizes() == gpu.sizes());
  REQUIRE(cpu.dtype() == gpu.dtype());
  std::vector<double> a = cpu.to_vector<double>(), b = gpu.to_vector<double>();
  int64_t worst = -1, nonfinite_mismatch = -1;
  double worst_err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool fa = std::isfinite(a[i]), fb = std::isfinite(b[i]);
    if (!fa || !fb) {
      const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];
      if (!same && nonfinite_mismatch < 0) nonfinite_mismatch = static_cast<int64_t>(i);
      continue;
    }
    const double err = std::abs(a[i] - b[i]) / (tol * (1 + std::abs(a[i])));
    if (err > worst_err) {
      worst_err = err;
      worst = static_cast<int64_t>(i);
    }
  }
  if (nonfinite_mismatch >= 0) {
    const auto i = static_cast<size_t>(nonfinite_mismatch);
    FAIL_CHECK("non-finite mismatch at " << index_str(nonfinite_mismatch, cpu.sizes()) << ": cpu "
                                         << a[i] << ", cuda " << b[i]);
  }
  if (worst_err > 1) {
    const auto i = static_cast<size_t>(worst);
    FAIL_CHECK("at " << index_str(worst, cpu.sizes()) << ": cpu " << a[i] << ", cuda " << b[i]
                     << " (" << worst_err << " x the tolerance " << tol << ")");
  }
}

void run_case(const OpCase& c) {
  INFO("op case: " << c.name);
  Inputs cpu_in = c.make(), gpu_in;
  for (const Tensor& t : cpu_in) {
    Tensor g = t.detach().to(kCUDA);
    if (t.requires_grad()) g.requires_grad_();
    gpu_in.push_back(g);
  }
  Tensor out_c = c.f(cpu_in), out_g = c.f(gpu_in);
  compare(c.name + " output", out_c, out_g, c.tol);
  if (!out_c.requires_grad()) return;
  Tensor cot = tgtest::rnd(out_c.sizes(), 99).to(out_c.dtype());
  out_c.backward(cot);
  out_g.backward(cot.to(kCUDA));
  for (size_t i = 0; i < cpu_in.size(); ++i) {
    if (!cpu_in[i].requires_grad()) continue;
    compare(c.name + " grad of input " + std::to_string(i), cpu_in[i].grad(), gpu_in[i].grad(),
            c.grad_tol);
  }
}

void run_all(const std::vector<OpCase>& cases) {
  for (const OpCase& c : cases) run_case(c);
}

void check_training_parity(const nn::TransformerConfig& cfg, uint64_t seed, int64_t steps,
                           const std::function<nn::Batch(int64_t step)>& batch_at,
                           const std::string& what) {
  nn::Transformer cpu_model(cfg, seed), gpu_model(cfg, seed);
  gpu_model.to(kCUDA);
  nn::AdamW cpu_opt(cpu_model.named_parameters(), {1e-2}),
      gpu_opt(gpu_model.named_parameters(), {1e-2});
  for (int64_t step = 0; step < steps; ++step) {
    const nn::Batch batch = batch_at(step);
    Generator d1 = nn::step_dropout_generator(1, step), d2 = nn::step_dropout_generator(1, step);
    const double lc = nn::train_step(cpu_model, cpu_opt, batch, d1);
    const double lg = nn::train_step(gpu_model, gpu_opt, batch, d2);
    INFO("step " << step << ": cpu loss " << lc << ", cuda loss " << lg);
    CHECK(std::abs(lc - lg) < 1e-4 * (1 + std::abs(lc)));
  }
  auto pc = cpu_model.named_parameters(), pg = gpu_model.named_parameters();
  for (size_t i = 0; i < pc.size(); ++i)
    compare("parameter " + pc[i].first + " after " + std::to_string(steps) + " " + what,
            pc[i].second, pg[i].second, 1e-3);
}

}  // namespace cudatest
