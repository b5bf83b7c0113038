// Core-op benchmark: each tapegrad op against a plain reference on the same machine (Eigen
// GEMM on the same buffers, a plain loop for elementwise work). Prints one line per case:
//   name <TAB> tapegrad ms <TAB> reference ms
// bench/compare_torch.py runs this and the same ops in PyTorch and prints the ratios.
//
//   bench_ops [threads] [cpu|cuda]      (or --device cuda)
// On CUDA each timed run ends with a device synchronization, and the reference column is 0
// (the references are CPU loops).
#include <tapegrad.h>
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench_args.h"

namespace {

bool g_cuda = false;

// Median of `reps` timed runs after one warm-up, in milliseconds.
double time_ms(const std::function<void()>& fn, int reps = 9) {
  auto run = [&] {
    fn();
    if (g_cuda) tg::cuda_synchronize();
  };
  run();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    run();
    auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void row(const char* name, double ours, double ref) {
  std::printf("%s\t%.3f\t%.3f\n", name, ours, ref);
}

}  // namespace

static int run(const bench::Args& args) {
  tg::set_num_threads(args.number(0, "threads", 2));
  bench::print_machine();
  g_cuda = args.device == "cuda";
  const tg::Device dev = g_cuda ? tg::kCUDA : tg::kCPU;
  // Plain CPU loops as the reference; skipped (0) on CUDA.
  auto ref_ms = [&](const std::function<void()>& fn) { return g_cuda ? 0.0 : time_ms(fn); };
  tg::Generator gen{1, 0};

  for (int64_t n : {256, 512, 1024}) {
    tg::Tensor a = tg::randn({n, n}, gen), b = tg::randn({n, n}, gen);
    using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::Map<const Mat> ea(a.data_ptr<float>(), n, n), eb(b.data_ptr<float>(), n, n);
    Mat ec(n, n);
    double ref = ref_ms([&] { ec.noalias() = ea * eb; });
    a = a.to(dev);
    b = b.to(dev);
    double ours = time_ms([&] { tg::matmul(a, b); });
    char name[64];
    std::snprintf(name, sizeof name, "matmul_f32_%lld", static_cast<long long>(n));
    row(name, ours, ref);
  }
  {
    tg::Tensor a = tg::randn({8, 64, 256, 64}, gen).to(dev),
               b = tg::randn({8, 64, 64, 256}, gen).to(dev);
    double ours = time_ms([&] { tg::matmul(a, b); });
    row("bmm_f32_512x256x64x256", ours, 0);
  }

  const int64_t n = 1 << 22;
  tg::Tensor x = tg::randn({n}, gen), y = tg::randn({n}, gen);
  std::vector<float> out(n);
  const float* xp = x.data_ptr<float>();
  const float* yp = y.data_ptr<float>();
  const tg::Tensor keep_x = x, keep_y = y;  // the CPU buffers the references read
  x = x.to(dev);
  y = y.to(dev);
  row("add_f32_4M", time_ms([&] { tg::add(x, y); }), ref_ms([&] {
        float* o = out.data();
#pragma omp parallel for
        for (int64_t i = 0; i < n; ++i) o[i] = xp[i] + yp[i];
      }));
  row("gelu_f32_4M", time_ms([&] { tg::gelu(x); }), ref_ms([&] {
        float* o = out.data();
#pragma omp parallel for
        for (int64_t i = 0; i < n; ++i) {
          float v = xp[i];
          o[i] = 0.5f * v * (1.f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
        }
      }));
  row("exp_f32_4M", time_ms([&] { tg::exp(x); }), 0);
  row("tanh_f32_4M", time_ms([&] { tg::tanh(x); }), 0);
  row("sigmoid_f32_4M", time_ms([&] { tg::sigmoid(x); }), 0);
  row("pow2_f32_4M", time_ms([&] { tg::pow(x, 2.0); }), 0);
  const tg::Tensor xa = tg::abs(x);  // positive arguments: no NaN path
  row("sqrt_f32_4M", time_ms([&] { tg::sqrt(xa); }), 0);
  row("rsqrt_f32_4M", time_ms([&] { tg::rsqrt(xa); }), 0);
  row("log_f32_4M", time_ms([&] { tg::log(xa); }), 0);
  row("log1p_f32_4M", time_ms([&] { tg::log1p(xa); }), 0);
  row("expm1_f32_4M", time_ms([&] { tg::expm1(x); }), 0);
  row("pow3_f32_4M", time_ms([&] { tg::pow(x, 3.0); }), 0);
  row("pow_half_f32_4M", time_ms([&] { tg::pow(xa, 0.5); }), 0);
  row("softplus_f32_4M", time_ms([&] { tg::softplus(x); }), 0);
  const tg::Tensor above = tg::gt(x, y);
  row("where_f32_4M", time_ms([&] { tg::where(above, x, y); }), 0);
  tg::Tensor m = x.reshape({4096, 1024});
  row("sum_lastdim_f32_4096x1024", time_ms([&] { tg::sum(m, {1}); }), ref_ms([&] {
        float* o = out.data();
#pragma omp parallel for
        for (int64_t r = 0; r < 4096; ++r) {
          float s = 0;
          for (int64_t c = 0; c < 1024; ++c) s += xp[r * 1024 + c];
          o[r] = s;
        }
      }));
  row("softmax_f32_4096x1024", time_ms([&] { tg::softmax(m, -1); }), 0);
  tg::Tensor mg = m.detach().requires_grad_();
  tg::Tensor gout = tg::randn({4096, 1024}, gen).to(dev);
  row("softmax_fwd_bwd_f32_4096x1024", time_ms([&] {
        tg::softmax(mg, -1).backward(gout);
        mg.zero_grad();
      }),
      0);
  // Elementwise ops' backward (one pass each: elementwise_ops.def's ...Backward).
  for (auto [name, op] :
       {std::pair{"tanh", +[](const tg::Tensor& v) { return tg::tanh(v); }},
        std::pair{"relu", +[](const tg::Tensor& v) { return tg::relu(v); }},
        std::pair{"softplus", +[](const tg::Tensor& v) { return tg::softplus(v); }}}) {
    row((std::string(name) + "_fwd_bwd_f32_4096x1024").c_str(), time_ms([&, op = op] {
          op(mg).backward(gout);
          mg.zero_grad();
        }),
        0);
  }
  tg::Tensor mt = m.transpose(0, 1);
  row("transpose_copy_f32_1024x4096", time_ms([&] { mt.contiguous(); }), 0);
  // Ops whose operands are not plain rows: a reduction across rows, a max along them, an
  // operand read transposed, a broadcast row; and the two fused training kernels with a
  // PyTorch counterpart, each forward and backward.
  row("sum_dim0_f32_4096x1024", time_ms([&] { tg::sum(m, {0}); }), 0);
  row("max_lastdim_f32_4096x1024", time_ms([&] { tg::max(m, {1}); }), 0);
  row("max_dim0_f32_4096x1024", time_ms([&] { tg::max(m, {0}); }), 0);
  tg::Tensor m2 = tg::randn({1024, 4096}, gen).to(dev);
  row("add_transposed_f32_4096x1024", time_ms([&] { tg::add(m, m2.transpose(0, 1)); }), 0);
  tg::Tensor w = tg::randn({1024}, gen).to(dev);
  row("mul_row_broadcast_f32_4096x1024", time_ms([&] { tg::mul(m, w); }), 0);
  tg::Tensor wg = w.detach().requires_grad_();
  row("rms_norm_fwd_bwd_f32_4096x1024", time_ms([&] {
        tg::rms_norm(mg, wg, 1e-6).backward(gout);
        mg.zero_grad();
        wg.zero_grad();
      }),
      0);
  row("logsumexp_lastdim_f32_4096x1024", time_ms([&] { tg::logsumexp(m, {1}); }), 0);
  row("var_lastdim_f32_4096x1024", time_ms([&] { tg::var(m, {1}); }), 0);
  row("cat_dim1_f32_4096x1024x2", time_ms([&] { tg::cat({m, m}, 1); }), 0);
  tg::Tensor targets = tg::mul(tg::rand({4096}, gen), 1023.99).to(tg::kInt64).to(dev);
  row("cross_entropy_fwd_bwd_f32_4096x1024", time_ms([&] {
        tg::cross_entropy(mg, targets).backward();
        mg.zero_grad();
      }),
      0);
  return 0;
}

int main(int argc, char** argv) {
  return bench::guarded_main([&] {
    return run(bench::parse_args("bench_ops", argc, argv, 1, {"cpu", "cuda"}));
  });
}
