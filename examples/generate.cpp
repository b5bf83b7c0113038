// Loads a checkpoint written by `train` and continues one or more prompts, sampling with
// temperature and top-k (temperature 0 is greedy). Several prompts, of any lengths, decode
// together through a paged key/value cache. It only reads: nothing is written.
//
//   generate --checkpoint runs/train/model.safetensors --prompt "31415926=" [--tokens 10]
//   generate --prompt "12=" --prompt "345=" --prompts more_prompts.txt
#include <tapegrad.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cli_checks.h"

namespace {

// The prompts of a file, one per line; empty lines are skipped.
std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream in(path);
  TG_CHECK(in.good(), "generate", "cannot read the prompts file '", path, "'");
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) prompts.push_back(line);
  }
  return prompts;
}

int parse_and_run(int argc, char** argv) {
  std::string checkpoint = "runs/train/model.safetensors", prompts_file;
  std::vector<std::string> prompts;
  tg::nn::SampleOptions so;
  so.max_new_tokens = 32;
  so.temperature = 0.0;
  uint64_t seed = 0;
  CLI::App app{"Sample from a tapegrad transformer checkpoint."};
  app.add_option("--checkpoint", checkpoint, "model.safetensors written by train")
      ->check(CLI::ExistingFile)
      ->capture_default_str();
  app.add_option("--prompt", prompts, "text to continue (repeat for several)");
  app.add_option("--prompts", prompts_file, "a file of prompts, one per line (after any --prompt)")
      ->check(CLI::ExistingFile);
  app.add_option("--tokens", so.max_new_tokens, "bytes to generate")->capture_default_str();
  app.add_option("--temperature", so.temperature, "0: greedy")->capture_default_str();
  app.add_option("--top-k", so.top_k, "sample among the k likeliest (0: all)")
      ->capture_default_str();
  app.add_option("--context", so.context, "longest prefix the model sees (0: all)")
      ->capture_default_str();
  app.add_option("--block-size", so.block_size, "tokens per block of the paged key/value cache")
      ->capture_default_str();
  app.add_option("--seed", seed, "sampling seed")->capture_default_str();
  return cli::run("generate", app, argc, argv, [&] {
    cli::positive(so.max_new_tokens, "--tokens");
    cli::finite_in(so.temperature, "--temperature", 0, HUGE_VAL);
    cli::non_negative(so.top_k, "--top-k");
    cli::non_negative(so.context, "--context");
    cli::positive(so.block_size, "--block-size");
    for (const std::string& p : prompts) {
      if (p.empty()) cli::usage_error("--prompt", "must not be empty");
    }
    if (!prompts_file.empty()) {
      const std::vector<std::string> more = read_prompts(prompts_file);
      prompts.insert(prompts.end(), more.begin(), more.end());
    }
    if (prompts.empty()) cli::usage_error("generate", "needs a --prompt or a --prompts file");
    tg::nn::SafetensorsFile f = tg::nn::load_safetensors(checkpoint);
    auto it = f.metadata.find("config");
    TG_CHECK(it != f.metadata.end(), "generate", "'", checkpoint,
             "' has no 'config' metadata: not a checkpoint written by train");
    tg::nn::Transformer model(tg::nn::config_from_json(it->second), 0);
    tg::nn::load_module(checkpoint, model);
    std::vector<std::vector<int64_t>> ids;
    ids.reserve(prompts.size());
    for (const std::string& p : prompts) ids.push_back(tg::nn::ByteTokenizer::encode(p));
    tg::Generator gen{seed, 0};
    const std::vector<std::vector<int64_t>> out = tg::nn::sample_batch(model, ids, so, gen);
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::printf("%s%s\n", prompts[i].c_str(), tg::nn::ByteTokenizer::decode(out[i]).c_str());
    }
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
