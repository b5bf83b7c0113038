// Packed against padded training (issue 18's target): the reference transformer of
// bench_train_step (d_model 256, 4 layers, 8/2 heads) trained on batches of 16 sequences whose
// lengths are uniform in [1, S], S = 128. The same sequences go in three ways each step:
// padded to S (a fixed-shape batch), padded to the batch's longest, and packed back to back
// (ragged sdpa). Reports useful tokens (the sequences' own, padding excluded) per second, the
// median of `steps` steps of each, taken in turn so that the machine's drift hits all three,
// then each way's kernel time by kind.
//
//   bench_packed [threads] [steps] [seq] [cpu|cuda]
#include <tapegrad.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "bench_args.h"
#include "bench_timing.h"

using bench::median;
using bench::now_ms;

int main(int argc, char** argv) {
  return bench::guarded_main([&] {
    const bench::Args args = bench::parse_args("bench_packed", argc, argv, 3, {"cpu", "cuda"});
    const int threads = args.number(0, "threads", 0), steps = args.number(1, "steps", 7);
    const int64_t seq = args.number(2, "seq", 128), batch = 16;
    if (threads > 0) tg::set_num_threads(threads);
    bench::print_machine();
    tg::nn::Transformer model(
        {.vocab = 256, .d_model = 256, .layers = 4, .heads = 8, .kv_heads = 2, .ffn = 768}, 1);
    model.to(args.device == "cuda" ? tg::kCUDA : tg::kCPU);
    tg::nn::AdamW opt(model.named_parameters(), {3e-4, 0.9, 0.95, 1e-8, 0.1});
    std::printf("bench_packed: batch %lld sequences of lengths uniform in [1, %lld], %d threads\n",
                static_cast<long long>(batch), static_cast<long long>(seq), tg::get_num_threads());
    std::mt19937_64 rng(7);
    auto sequences = [&] {
      std::vector<tg::nn::Sequence> seqs(static_cast<size_t>(batch));
      for (auto& s : seqs) {
        const auto n = static_cast<size_t>(1 + rng() % static_cast<uint64_t>(seq));
        for (size_t i = 0; i < n; ++i) {
          s.inputs.push_back(static_cast<int64_t>(rng() % 256));
          s.targets.push_back(static_cast<int64_t>(rng() % 256));
        }
      }
      return seqs;
    };
    auto longest = [](const std::vector<tg::nn::Sequence>& seqs) {
      size_t m = 0;
      for (const auto& s : seqs) m = std::max(m, s.inputs.size());
      return static_cast<int64_t>(m);
    };
    // Milliseconds of one train_step on `b` (its loss read back, so a GPU has finished).
    tg::Generator dropout{1, 0};
    auto time_step = [&](const tg::nn::Batch& b) {
      const double a = now_ms();
      tg::nn::train_step(model, opt, b, dropout);
      return now_ms() - a;
    };
    const char* names[3] = {"padded to S", "padded to the longest", "packed"};
    std::vector<double> ms[3], tokens_per_s[3];
    for (int step = -2; step < steps; ++step) {  // two warm-up steps
      const std::vector<tg::nn::Sequence> seqs = sequences();
      int64_t useful = 0;
      for (const auto& s : seqs) useful += static_cast<int64_t>(s.inputs.size());
      const tg::nn::Batch batches[3] = {tg::nn::pad(seqs, seq), tg::nn::pad(seqs, longest(seqs)),
                                        tg::nn::pack(seqs)};
      for (int way = 0; way < 3; ++way) {
        const double t = time_step(batches[way]);
        if (step < 0) continue;
        ms[way].push_back(t);
        tokens_per_s[way].push_back(static_cast<double>(useful) / t * 1e3);
      }
    }
    for (int way = 0; way < 3; ++way) {
      std::printf("%s\tstep_ms %.1f\tuseful_tokens_per_s %.0f\n", names[way], median(ms[way]),
                  median(tokens_per_s[way]));
    }
    std::printf("packed_vs_padded\t%.2f\npacked_vs_longest\t%.2f\n",
                median(tokens_per_s[2]) / median(tokens_per_s[0]),
                median(tokens_per_s[2]) / median(tokens_per_s[1]));

    // Where each way's time goes: kernel time by kind over `steps` more steps of the same
    // batches.
    const std::vector<tg::nn::Sequence> seqs = sequences();
    const tg::nn::Batch batches[3] = {tg::nn::pad(seqs, seq), tg::nn::pad(seqs, longest(seqs)),
                                      tg::nn::pack(seqs)};
    for (int way = 0; way < 3; ++way)
      bench::print_kernel_profile(names[way], steps, [&] { time_step(batches[way]); });
    return 0;
  });
}
