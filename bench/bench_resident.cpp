// Resident memory over a long run: the train CLI's default model and task (reverse, d_model 64,
// 3 layers, batch 64, AdamW with clipping) for `steps` steps with the CLI's evaluation (greedy
// decoding of 200 held-out strings) and checkpoint (model, optimizer and the growing loss log,
// into a temporary directory) every 250 steps, printing every `every` steps the process's
// resident set (VmRSS), the live tensor memory and the step time. A run whose RSS climbs while
// live tensors stay flat is the heap holding freed memory; `trim` 1 calls
// tg::release_free_memory() after each evaluation and checkpoint, as the CLI does, 0 does not.
//
//   bench_resident [threads] [steps] [every] [trim]      (defaults 2, 10000, 1000, 1)
#include <tapegrad.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_args.h"

namespace {

double resident_mb() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      double kb = 0;
      in >> kb;
      return kb / 1024.0;
    }
    in.ignore(1 << 16, '\n');
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::guarded_main([&] {
    const bench::Args args = bench::parse_args("bench_resident", argc, argv, 4, {"cpu"});
    const int threads = args.number(0, "threads", 2);
    const int64_t steps = args.number(1, "steps", 10000), every = args.number(2, "every", 1000);
    const bool trim = args.number(3, "trim", 1) != 0;
    if (threads > 0) tg::set_num_threads(threads);
    bench::print_machine();
    auto task = tg::nn::make_task("reverse", 8);
    const tg::nn::TransformerConfig cfg{.vocab = tg::nn::ByteTokenizer::kVocab,
                                        .d_model = 64,
                                        .layers = 3,
                                        .heads = 4,
                                        .kv_heads = 2};
    tg::nn::Transformer model(cfg, 1);
    tg::nn::AdamWOptions ao;
    ao.lr = 3e-3;
    tg::nn::AdamW opt(model.named_parameters(), ao);
    const std::vector<tg::nn::Example> eval_set = tg::nn::task_eval_set(*task, 200, 1);
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("tapegrad_resident" + std::to_string(::getpid()));
    std::string log = "step,loss,lr\n";
    std::printf("trim %s\nstep\trss_mb\tlive_tensor_mb\tms_per_step\n", trim ? "on" : "off");
    auto last = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < steps; ++step) {
      tg::Generator dropout = tg::nn::step_dropout_generator(1, step);
      tg::nn::train_step(model, opt, tg::nn::task_batch(*task, 64, 1, step), dropout,
                         {.clip = 1.0});
      log += std::to_string(step) + ",0.000000,3.000000e-03\n";
      if ((step + 1) % 250 == 0) {
        tg::nn::exact_match(model, eval_set);
        tg::nn::save_training_checkpoint(dir.string(), model, opt, {{"step", std::to_string(step)}},
                                         {{"loss.csv", log}});
        if (trim) tg::release_free_memory();
      }
      if ((step + 1) % every == 0 || step == 0) {
        const auto now = std::chrono::steady_clock::now();
        const double ms = std::chrono::duration<double, std::milli>(now - last).count();
        last = now;
        std::printf("%lld\t%.1f\t%.1f\t%.2f\n", static_cast<long long>(step + 1), resident_mb(),
                    static_cast<double>(tg::live_storage_bytes()) / 1e6,
                    ms / static_cast<double>(step ? every : 1));
        std::fflush(stdout);
      }
    }
    std::filesystem::remove_all(dir);
    return 0;
  });
}
