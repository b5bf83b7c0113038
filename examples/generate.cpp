// Loads a checkpoint written by `train` and continues a prompt, sampling with temperature
// and top-k (temperature 0 is greedy). It only reads: nothing is written.
//
//   generate --checkpoint runs/train/model.safetensors --prompt "31415926=" [--tokens 10]
#include <tapegrad.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli_checks.h"

namespace {

int parse_and_run(int argc, char** argv) {
  std::string checkpoint = "runs/train/model.safetensors", prompt;
  tg::nn::SampleOptions so;
  so.max_new_tokens = 32;
  so.temperature = 0.0;
  uint64_t seed = 0;
  CLI::App app{"Sample from a tapegrad transformer checkpoint."};
  app.add_option("--checkpoint", checkpoint, "model.safetensors written by train")
      ->check(CLI::ExistingFile)
      ->capture_default_str();
  app.add_option("--prompt", prompt, "text to continue")->required();
  app.add_option("--tokens", so.max_new_tokens, "bytes to generate")->capture_default_str();
  app.add_option("--temperature", so.temperature, "0: greedy")->capture_default_str();
  app.add_option("--top-k", so.top_k, "sample among the k likeliest (0: all)")
      ->capture_default_str();
  app.add_option("--context", so.context, "longest prefix the model sees (0: all)")
      ->capture_default_str();
  app.add_option("--seed", seed, "sampling seed")->capture_default_str();
  return cli::run("generate", app, argc, argv, [&] {
    cli::positive(so.max_new_tokens, "--tokens");
    cli::finite_in(so.temperature, "--temperature", 0, HUGE_VAL);
    cli::non_negative(so.top_k, "--top-k");
    cli::non_negative(so.context, "--context");
    tg::nn::SafetensorsFile f = tg::nn::load_safetensors(checkpoint);
    auto it = f.metadata.find("config");
    TG_CHECK(it != f.metadata.end(), "generate", "'", checkpoint,
             "' has no 'config' metadata: not a checkpoint written by train");
    tg::nn::Transformer model(tg::nn::config_from_json(it->second), 0);
    tg::nn::load_module(checkpoint, model);
    tg::Generator gen{seed, 0};
    auto ids = tg::nn::sample(model, tg::nn::ByteTokenizer::encode(prompt), so, gen);
    std::printf("%s%s\n", prompt.c_str(), tg::nn::ByteTokenizer::decode(ids).c_str());
    return 0;
  });
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return parse_and_run(argc, argv);
  } catch (const std::exception& e) {  // building the flags themselves failed
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
