#include "models/generate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "autograd/grad_mode.h"
#include "ops/factories.h"
#include "ops/join.h"
#include "ops/reduce.h"

namespace tg::nn {

std::vector<int64_t> sample(const Transformer& model, const std::vector<int64_t>& prompt,
                            const SampleOptions& opts, Generator& gen) {
  TG_CHECK(!prompt.empty(), "sample", "argument 'prompt' must hold at least one token");
  TG_CHECK(opts.temperature >= 0, "sample", "argument 'temperature' must be >= 0, got ",
           opts.temperature);
  TG_CHECK(opts.top_k >= 0, "sample", "argument 'top_k' must be >= 0, got ", opts.top_k);
  const int64_t vocab = model.config().vocab;
  for (int64_t id : prompt) {
    TG_CHECK(id >= 0 && id < vocab, "sample", "prompt token ", id,
             " is outside the vocabulary [0, ", vocab, ")");
  }
  NoGradGuard no_grad;  // the cached forward runs without dropout, whatever the mode
  std::vector<int64_t> seq = prompt, out;
  KVCache cache;
  std::vector<int64_t> feed = prompt;  // tokens the cache has not seen yet
  for (int64_t step = 0; step < opts.max_new_tokens; ++step) {
    if (opts.context > 0 && cache.length() + static_cast<int64_t>(feed.size()) > opts.context) {
      // Past the context: start again from the last `context` tokens at position 0.
      cache = KVCache();
      feed.assign(seq.end() - std::min<int64_t>(opts.context, static_cast<int64_t>(seq.size())),
                  seq.end());
    }
    const int64_t n = static_cast<int64_t>(feed.size());
    Tensor logits = model.forward(
        from_vector(feed, {1, n}, TensorOptions(kInt64).device(model.device())), cache);
    std::vector<double> z = logits.slice(1, n - 1, n).to_vector<double>();
    int64_t next = 0;
    if (opts.temperature == 0) {
      next = std::max_element(z.begin(), z.end()) - z.begin();
    } else {
      // Keep the k largest logits, then sample softmax(z / T) with one Philox uniform.
      std::vector<double> keep = z;
      if (opts.top_k > 0 && opts.top_k < vocab) {
        std::nth_element(keep.begin(), keep.begin() + (opts.top_k - 1), keep.end(),
                         std::greater<double>());
        const double kth = keep[opts.top_k - 1];
        for (auto& v : z) v = v >= kth ? v : -INFINITY;
      }
      const double zmax = *std::max_element(z.begin(), z.end());
      double total = 0;
      for (auto& v : z) total += (v = std::exp((v - zmax) / opts.temperature));
      const double u = philox_uniform(gen.seed, gen.take(1)) * total;
      double acc = 0;
      next = vocab - 1;
      for (int64_t i = 0; i < vocab; ++i) {
        acc += z[i];
        if (u <= acc && z[i] > 0) {
          next = i;
          break;
        }
      }
    }
    seq.push_back(next);
    out.push_back(next);
    feed.assign(1, next);
  }
  return out;
}

Tensor greedy_decode(const Transformer& model, const Tensor& prompts, int64_t steps) {
  TG_CHECK(prompts.defined() && prompts.dim() == 2 && prompts.dtype() == kInt64, "greedy_decode",
           "argument 'prompts' must be int64 (batch, len)");
  NoGradGuard no_grad;  // the cached forward runs without dropout, whatever the mode
  KVCache cache;
  // The first call reads the whole prompt, later ones one token.
  Tensor next = prompts.to(model.device());
  std::vector<Tensor> picked;
  for (int64_t s = 0; s < steps; ++s) {
    Tensor logits = model.forward(next, cache);
    const int64_t t = logits.size(1);
    next = argmax(logits.slice(1, t - 1, t), -1);  // (B, 1)
    picked.push_back(next);
  }
  return steps ? cat(picked, 1).to(prompts.device()) : zeros({prompts.size(0), 0}, kInt64);
}

ExactMatch exact_match(const Transformer& model, const std::vector<Example>& examples,
                       int64_t batch) {
  TG_CHECK(batch > 0, "exact_match", "argument 'batch' must be positive, got ", batch);
  // Examples of one prompt length and one answer length decode together (a task of random
  // sizes has several); the predictions go back in the examples' order.
  std::map<std::pair<size_t, size_t>, std::vector<size_t>> groups;
  for (size_t i = 0; i < examples.size(); ++i)
    groups[{examples[i].prompt.size(), examples[i].answer.size()}].push_back(i);
  ExactMatch r;
  r.predictions.resize(examples.size());
  for (const auto& [lengths, members] : groups) {
    const auto [p, a] = lengths;
    TG_CHECK(p > 0, "exact_match", "example ", members.front(), " has an empty prompt");
    for (size_t at = 0; at < members.size(); at += static_cast<size_t>(batch)) {
      const size_t end = std::min(members.size(), at + static_cast<size_t>(batch));
      std::vector<int64_t> ids;
      for (size_t i = at; i < end; ++i) {
        const std::vector<int64_t> e = ByteTokenizer::encode(examples[members[i]].prompt);
        ids.insert(ids.end(), e.begin(), e.end());
      }
      const auto n = static_cast<int64_t>(end - at), pl = static_cast<int64_t>(p),
                 al = static_cast<int64_t>(a);
      const std::vector<int64_t> out =
          greedy_decode(model, from_vector(ids, {n, pl}), al).to_vector<int64_t>();
      for (int64_t i = 0; i < n; ++i) {
        const size_t which = members[at + static_cast<size_t>(i)];
        r.predictions[which] = ByteTokenizer::decode(
            std::vector<int64_t>(out.begin() + i * al, out.begin() + (i + 1) * al));
        r.correct += r.predictions[which] == examples[which].answer;
        ++r.total;
      }
    }
  }
  return r;
}

}  // namespace tg::nn
