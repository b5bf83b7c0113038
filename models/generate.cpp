#include "models/generate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "autograd/grad_mode.h"
#include "ops/factories.h"
#include "ops/host_values.h"
#include "ops/join.h"
#include "ops/nn.h"
#include "ops/reduce.h"

namespace tg::nn {

namespace {

void check_sample_options(const SampleOptions& opts, const char* op) {
  TG_CHECK(opts.temperature >= 0, op, "argument 'temperature' must be >= 0, got ",
           opts.temperature);
  TG_CHECK(opts.top_k >= 0, op, "argument 'top_k' must be >= 0, got ", opts.top_k);
}

void check_prompt(const std::vector<int64_t>& prompt, int64_t vocab, const char* op,
                  const std::string& what) {
  TG_CHECK(!prompt.empty(), op, what, " must hold at least one token");
  for (int64_t id : prompt) {
    TG_CHECK(id >= 0 && id < vocab, op, what, " has token ", id, ", outside the vocabulary [0, ",
             vocab, ")");
  }
}

// The next token from the logits z: the largest (greedy), or a sample of softmax(z / T) among
// the top k drawn with one Philox uniform.
int64_t pick_next(std::vector<double> z, const SampleOptions& opts, Generator& gen) {
  const auto vocab = static_cast<int64_t>(z.size());
  if (opts.temperature == 0) return std::max_element(z.begin(), z.end()) - z.begin();
  if (opts.top_k > 0 && opts.top_k < vocab) {
    std::vector<double> keep = z;
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
  for (int64_t i = 0; i < vocab; ++i) {
    acc += z[i];
    if (u <= acc && z[i] > 0) return i;
  }
  return vocab - 1;
}

// The tokens a sequence feeds next: `feed`, unless the cache and it would pass the context;
// then the last `context` tokens of `seq`, from position 0 (`restart` says so).
std::vector<int64_t> within_context(const std::vector<int64_t>& seq, std::vector<int64_t> feed,
                                    int64_t cached, int64_t context, bool& restart) {
  restart = context > 0 && cached + static_cast<int64_t>(feed.size()) > context;
  if (!restart) return feed;
  return {seq.end() - std::min<int64_t>(context, static_cast<int64_t>(seq.size())), seq.end()};
}

}  // namespace

std::vector<int64_t> sample(const Transformer& model, const std::vector<int64_t>& prompt,
                            const SampleOptions& opts, Generator& gen) {
  check_sample_options(opts, "sample");
  check_prompt(prompt, model.config().vocab, "sample", "argument 'prompt'");
  NoGradGuard no_grad;  // the cached forward runs without dropout, whatever the mode
  std::vector<int64_t> seq = prompt, out;
  KVCache cache;
  std::vector<int64_t> feed = prompt;  // tokens the cache has not seen yet
  for (int64_t step = 0; step < opts.max_new_tokens; ++step) {
    bool restart = false;
    feed = within_context(seq, feed, cache.length(), opts.context, restart);
    if (restart) cache = KVCache();  // past the context: again from position 0
    const auto n = static_cast<int64_t>(feed.size());
    Tensor logits = model.forward(
        from_vector(feed, {1, n}, TensorOptions(kInt64).device(model.device())), cache);
    const int64_t next = pick_next(logits.slice(1, n - 1, n).to_vector<double>(), opts, gen);
    seq.push_back(next);
    out.push_back(next);
    feed.assign(1, next);
  }
  return out;
}

std::vector<std::vector<int64_t>> sample_batch(const Transformer& model,
                                               const std::vector<std::vector<int64_t>>& prompts,
                                               const SampleOptions& opts, Generator& gen) {
  constexpr const char* kOp = "sample_batch";
  check_sample_options(opts, kOp);
  TG_CHECK(opts.block_size > 0, kOp, "argument 'block_size' must be positive, got ",
           opts.block_size);
  for (size_t b = 0; b < prompts.size(); ++b)
    check_prompt(prompts[b], model.config().vocab, kOp, "prompt " + std::to_string(b));
  NoGradGuard no_grad;
  // The pools hold what every sequence caches at most (its prompt and all but the last new
  // token, or the context): they never grow, and hold at most one partial block per sequence.
  int64_t blocks = 0;
  for (const auto& p : prompts) {
    int64_t most = static_cast<int64_t>(p.size()) + opts.max_new_tokens - 1;
    if (opts.context > 0) most = std::min(most, opts.context);
    blocks += (most + opts.block_size - 1) / opts.block_size;
  }
  PagedKVCache cache = model.paged_cache(opts.block_size, blocks);
  std::vector<std::vector<int64_t>> seqs = prompts, feeds = prompts, out(prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) cache.add_sequence();
  for (int64_t step = 0; step < opts.max_new_tokens && !prompts.empty(); ++step) {
    std::vector<int64_t> ids, counts;
    for (size_t b = 0; b < prompts.size(); ++b) {
      bool restart = false;
      feeds[b] = within_context(seqs[b], feeds[b], cache.length(static_cast<int64_t>(b)),
                                opts.context, restart);
      if (restart) cache.clear(static_cast<int64_t>(b));
      ids.insert(ids.end(), feeds[b].begin(), feeds[b].end());
      counts.push_back(static_cast<int64_t>(feeds[b].size()));
    }
    const Tensor logits = model.forward(from_vector(ids, {static_cast<int64_t>(ids.size())},
                                                    TensorOptions(kInt64).device(model.device())),
                                        counts, cache);
    // Each sequence's last fed token: its row of logits predicts the next. The rows are read
    // back in one copy, one wait for the device a step rather than one a sequence.
    std::vector<int64_t> last;
    last.reserve(counts.size());
    int64_t at = -1;
    for (int64_t n : counts) last.push_back(at += n);
    const std::vector<double> rows =
        embedding(logits, detail::int64_to_device(last, {static_cast<int64_t>(last.size())},
                                                  model.device()))
            .to_vector<double>();
    const int64_t vocab = logits.size(1);
    for (size_t b = 0; b < prompts.size(); ++b) {
      const auto row = rows.begin() + static_cast<int64_t>(b) * vocab;
      const int64_t next = pick_next({row, row + vocab}, opts, gen);
      seqs[b].push_back(next);
      out[b].push_back(next);
      feeds[b].assign(1, next);
    }
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
