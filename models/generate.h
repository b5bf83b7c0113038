// Decoding from a Transformer: sampling with temperature and top-k, greedy batch decoding,
// and exact-match evaluation on a task. Decoding keeps a key/value cache: the prompt runs
// once, then each new token runs alone against the cached keys and values (a contiguous
// cache for one prompt or a batch of equal lengths, a paged one for prompts of any lengths).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/philox.h"
#include "models/data.h"
#include "models/transformer.h"

namespace tg::nn {

struct SampleOptions {
  int64_t max_new_tokens = 64;
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = the whole vocabulary
  int64_t context = 0;       // longest prefix fed to the model; 0 = unlimited
  int64_t block_size = 16;   // tokens per block of the paged cache (several prompts)
};

// Continues `prompt` (token ids) and returns only the new tokens.
std::vector<int64_t> sample(const Transformer& model, const std::vector<int64_t>& prompt,
                            const SampleOptions& opts, Generator& gen);

// Continues every prompt, all at once through a paged K/V cache (PagedKVCache, blocks of
// opts.block_size tokens, sized for what each prompt will cache): the prompts may differ in
// length, and greedy decoding gives each one the tokens `sample` gives it alone. Sampling
// draws one uniform per prompt per step, step after step and prompt after prompt, so a
// single prompt draws what `sample` draws. Returns each prompt's new tokens.
std::vector<std::vector<int64_t>> sample_batch(const Transformer& model,
                                               const std::vector<std::vector<int64_t>>& prompts,
                                               const SampleOptions& opts, Generator& gen);

// Greedy continuation of every row of prompts (B, P) int64 by `steps` tokens: (B, steps).
Tensor greedy_decode(const Transformer& model, const Tensor& prompts, int64_t steps);

struct ExactMatch {
  int64_t correct = 0, total = 0;
  std::vector<std::string> predictions;  // one per example
  double accuracy() const { return total ? static_cast<double>(correct) / total : 0.0; }
};

// Greedy answers for `examples`, `batch` at a time among those of one prompt length and one
// answer length; predictions in the examples' order.
ExactMatch exact_match(const Transformer& model, const std::vector<Example>& examples,
                       int64_t batch = 256);

}  // namespace tg::nn
