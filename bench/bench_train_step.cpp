// Training-step benchmark of the reference transformer (vocab 256, d_model 256, 4 layers,
// 8 query heads, 2 kv heads, head dim 32, SwiGLU 768, batch 16, sequence 128): milliseconds
// per step and tokens/s, split into forward / backward / optimizer, and the kernel time by
// kind from the profiling backend.
//
//   bench_train_step [threads] [steps] [cpu|cuda] [--precision fp32|bf16|fp16]
//
// bf16 and fp16 run the forward under AutocastGuard (fp16 with loss scaling), as
// nn::train_step does; peak_mb is the high-water mark of live tensor memory during a step.
// bench/compare_train_torch.py runs this beside the same model and step in PyTorch.
#include <tapegrad.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_args.h"
#include "bench_timing.h"

using bench::median;
using bench::now_ms;

int main(int argc, char** argv) {
  return bench::guarded_main([&] {
    const bench::Args args = bench::parse_args("bench_train_step", argc, argv, 2, {"cpu", "cuda"});
    const int threads = args.number(0, "threads", 0), steps = args.number(1, "steps", 5);
    const tg::Device device = args.device == "cuda" ? tg::kCUDA : tg::kCPU;
    if (threads > 0) tg::set_num_threads(threads);
    bench::print_machine();
    const tg::nn::TransformerConfig cfg{
        .vocab = 256, .d_model = 256, .layers = 4, .heads = 8, .kv_heads = 2, .ffn = 768};
    const int64_t batch = 16, seq = 128;
    tg::nn::Transformer model(cfg, 1);
    model.to(device);
    tg::nn::AdamW opt(model.named_parameters(), {3e-4, 0.9, 0.95, 1e-8, 0.1});
    tg::Generator data{7, 0};
    auto ids = [&] {
      return tg::mul(tg::rand({batch, seq + 1}, data, tg::kFloat64), 255.999).to(tg::kInt64);
    };
    std::printf("bench_train_step: %lld parameters, batch %lld x %lld, %d threads, %s\n",
                static_cast<long long>(model.parameter_count()), static_cast<long long>(batch),
                static_cast<long long>(seq), tg::get_num_threads(), args.precision.c_str());
    const tg::DType precision = args.precision_dtype();
    tg::nn::GradScaler scaler;

    std::vector<double> fwd, bwd, upd, total;
    auto one_step = [&](bool record) {
      tg::Tensor t = ids().to(device);
      tg::Tensor in = t.slice(1, 0, seq), tgt = t.slice(1, 1, seq + 1);
      const double a = now_ms();
      tg::Tensor loss;
      {
        tg::AutocastGuard autocast(precision);
        loss = tg::nn::lm_loss(model.forward(in), tgt);
      }
      loss.item<float>();
      const double b = now_ms();
      opt.zero_grad();
      (precision == tg::kFloat16 ? scaler.scale(loss) : loss).backward();
      const double c = now_ms();
      const bool finite = precision != tg::kFloat16 || scaler.unscale(model.parameters());
      if (precision == tg::kFloat16) scaler.update(!finite);
      tg::nn::clip_grad_norm(model.parameters(), 1.0);
      if (finite) opt.step();
      model.parameters().back().to_vector<float>();  // wait for the update (CUDA)
      const double d = now_ms();
      if (record) {
        fwd.push_back(b - a);
        bwd.push_back(c - b);
        upd.push_back(d - c);
        total.push_back(d - a);
      }
    };
    one_step(false);
    one_step(false);
    tg::reset_peak_storage_bytes();
    const int64_t resident = tg::live_storage_bytes();  // weights and optimizer state
    for (int i = 0; i < steps; ++i) one_step(true);
    const double peak_mb = static_cast<double>(tg::peak_storage_bytes()) / 1e6;
    const double step_ms = median(total);
    std::printf(
        "step_ms\t%.2f\ntokens_per_s\t%.0f\nforward_ms\t%.2f\nbackward_ms\t%.2f\n"
        "optimizer_ms\t%.2f\npeak_mb\t%.1f\nresident_mb\t%.1f\n",
        step_ms, batch * seq / step_ms * 1e3, median(fwd), median(bwd), median(upd), peak_mb,
        static_cast<double>(resident) / 1e6);

    // Where the time goes: kernel time by kind over `steps` more steps, per step.
    bench::print_kernel_profile("", steps, [&] { one_step(false); });

    // The norms alone: the 9 RMSNorms of a step, forward and backward, at the step's shape.
    tg::nn::RMSNorm norm(cfg.d_model);
    norm.to(device);
    tg::Tensor x = tg::randn({batch, seq, cfg.d_model}, data).to(device).requires_grad_();
    tg::Tensor g = tg::randn({batch, seq, cfg.d_model}, data).to(device);
    std::vector<double> norms;
    for (int i = 0; i < steps + 1; ++i) {
      const double s = now_ms();
      for (int64_t n = 0; n < 2 * cfg.layers + 1; ++n) norm.forward(x).backward(g);
      x.grad().to_vector<float>();
      if (i) norms.push_back(now_ms() - s);
    }
    std::printf("norms_ms\t%.2f\n", median(norms));
    return 0;
  });
}
