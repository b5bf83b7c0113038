// Paged against contiguous decoding (issue 18's target): the reference transformer of
// bench_train_step (d_model 256, 4 layers, 8/2 heads) decodes `batch` prompts greedily by
// `tokens` new tokens each.
//   equal lengths: prompts of `prompt` tokens, decoded as one batch with the contiguous cache
//     (nn::KVCache, grown by concatenation every step) and with the paged cache (blocks of 16);
//     the two give the same tokens (checked), so the comparison is of the caches alone.
//   mixed lengths: prompt lengths uniform in [1, 2 prompt]: the paged cache decodes them all at
//     once; the contiguous cache needs one length per batch, so it decodes them one at a time,
//     and a batch padded to the longest would hold batch x (longest + tokens) rows.
// Reports decoded tokens per second (prefill included), the median of `reps` runs taken in
// turn, and the caches' memory at the end: the contiguous cache's tensors, the paged pools
// (against the bytes of the tokens they actually hold: the partial last blocks are the rest).
//
// Both keep the picked tokens on the device and read them back once at the end (greedy_decode's
// way), so that the comparison is of the caches, not of when the host waits for the device.
// One more decoding of each kind runs under the kernel profiler: its "kernel_ms" lines give
// each kind's time and calls over the whole decoding ("read_back" counts the reads from a GPU,
// each of which waits for the work queued before it).
//
//   bench_paged [threads] [reps] [prompt] [tokens] [batch] [cpu|cuda]
#include <tapegrad.h>

#include <cstdio>
#include <random>
#include <vector>

#include "bench_args.h"
#include "bench_timing.h"

using bench::median;
using bench::now_ms;
using Ids = std::vector<int64_t>;

namespace {

constexpr int64_t kBlock = 16;

int64_t cache_bytes(const tg::nn::KVCache& c) {
  int64_t total = 0;
  for (const auto& l : c.layers)
    total += static_cast<int64_t>((l.k.numel() + l.v.numel()) * tg::dtype_size(l.k.dtype()));
  return total;
}

// Greedy decoding of equal-length prompts (B, P) with the contiguous cache: (B, tokens).
Ids decode_contiguous(const tg::nn::Transformer& m, const Ids& prompts, int64_t batch,
                      int64_t tokens, int64_t& bytes) {
  tg::nn::KVCache cache;
  tg::Tensor next = tg::from_vector(prompts, {batch, static_cast<int64_t>(prompts.size()) / batch},
                                    tg::TensorOptions(tg::kInt64).device(m.device()));
  std::vector<tg::Tensor> picked;
  for (int64_t t = 0; t < tokens; ++t) {
    const tg::Tensor logits = m.forward(next, cache);
    const int64_t s = logits.size(1);
    next = tg::argmax(logits.slice(1, s - 1, s), -1);  // (B, 1)
    picked.push_back(next);
  }
  bytes = cache_bytes(cache);
  return tg::cat(picked, 1).to_vector<int64_t>();
}

// The same with the paged cache: the prompts may differ in length.
Ids decode_paged(const tg::nn::Transformer& m, const std::vector<Ids>& prompts, int64_t tokens,
                 int64_t& bytes) {
  int64_t blocks = 0;
  Ids ids, counts;
  for (const Ids& p : prompts) {
    blocks += (static_cast<int64_t>(p.size()) + tokens - 1 + kBlock - 1) / kBlock;
    ids.insert(ids.end(), p.begin(), p.end());
    counts.push_back(static_cast<int64_t>(p.size()));
  }
  tg::nn::PagedKVCache cache = m.paged_cache(kBlock, blocks);
  for (size_t b = 0; b < prompts.size(); ++b) cache.add_sequence();
  const auto batch = static_cast<int64_t>(prompts.size());
  const tg::TensorOptions on_device = tg::TensorOptions(tg::kInt64).device(m.device());
  // The picked tokens stay on the device, fed back as the next step's ids (one per sequence),
  // and are read back once at the end, as decode_contiguous does.
  tg::Tensor next = tg::from_vector(ids, {static_cast<int64_t>(ids.size())}, on_device);
  std::vector<tg::Tensor> picked;
  for (int64_t t = 0; t < tokens; ++t) {
    tg::Tensor logits = m.forward(next, counts, cache);
    if (t == 0) {  // the prompts: each sequence's last row
      Ids last;
      int64_t at = -1;
      for (int64_t n : counts) last.push_back(at += n);
      logits = tg::embedding(logits, tg::from_vector(last, {batch}, on_device));
    }
    next = tg::argmax(logits, -1);  // (B)
    picked.push_back(next.view({batch, 1}));
    counts.assign(prompts.size(), 1);
  }
  bytes = cache.bytes();
  return tg::cat(picked, 1).to_vector<int64_t>();  // (B, tokens), sequence after sequence
}

}  // namespace

int main(int argc, char** argv) {
  return bench::guarded_main([&] {
    const bench::Args args = bench::parse_args("bench_paged", argc, argv, 5, {"cpu", "cuda"});
    const int threads = args.number(0, "threads", 0), reps = args.number(1, "reps", 5);
    const int64_t prompt = args.number(2, "prompt", 32), tokens = args.number(3, "tokens", 96),
                  batch = args.number(4, "batch", 8);
    if (threads > 0) tg::set_num_threads(threads);
    bench::print_machine();
    tg::nn::Transformer model(
        {.vocab = 256, .d_model = 256, .layers = 4, .heads = 8, .kv_heads = 2, .ffn = 768}, 1);
    model.to(args.device == "cuda" ? tg::kCUDA : tg::kCPU);
    model.eval();
    tg::NoGradGuard no_grad;
    std::printf(
        "bench_paged: %lld prompts of %lld tokens (mixed: uniform in [1, %lld]), %lld new "
        "tokens each, blocks of %lld, %d threads\n",
        static_cast<long long>(batch), static_cast<long long>(prompt),
        2 * static_cast<long long>(prompt), static_cast<long long>(tokens),
        static_cast<long long>(kBlock), tg::get_num_threads());
    std::mt19937_64 rng(5);
    std::vector<Ids> equal(static_cast<size_t>(batch)), mixed(static_cast<size_t>(batch));
    Ids flat;
    int64_t longest = 0, mixed_cached = 0;  // tokens the mixed prompts' caches end up holding
    for (size_t b = 0; b < equal.size(); ++b) {
      for (int64_t i = 0; i < prompt; ++i) equal[b].push_back(static_cast<int64_t>(rng() % 256));
      flat.insert(flat.end(), equal[b].begin(), equal[b].end());
      const auto n = static_cast<int64_t>(1 + rng() % static_cast<uint64_t>(2 * prompt));
      for (int64_t i = 0; i < n; ++i) mixed[b].push_back(static_cast<int64_t>(rng() % 256));
      longest = std::max(longest, n);
      mixed_cached += n + tokens - 1;
    }
    const double decoded = static_cast<double>(batch * tokens);
    std::vector<double> tps[4];
    int64_t bytes[4] = {};
    for (int rep = -1; rep < reps; ++rep) {  // one warm-up
      double a = now_ms();
      const Ids c = decode_contiguous(model, flat, batch, tokens, bytes[0]);
      const double t_contiguous = now_ms() - a;
      a = now_ms();
      const Ids p = decode_paged(model, equal, tokens, bytes[1]);
      const double t_paged = now_ms() - a;
      if (c != p) throw tg::Error("[bench_paged] paged decoding gave other tokens");
      a = now_ms();
      decode_paged(model, mixed, tokens, bytes[2]);
      const double t_mixed = now_ms() - a;
      a = now_ms();
      bytes[3] = 0;
      for (const Ids& one : mixed) {
        int64_t b1 = 0;
        decode_contiguous(model, one, 1, tokens, b1);
        bytes[3] = std::max(bytes[3], b1);
      }
      const double t_alone = now_ms() - a;
      if (rep < 0) continue;
      for (int i = 0; i < 4; ++i) {
        const double t[4] = {t_contiguous, t_paged, t_mixed, t_alone};
        tps[i].push_back(decoded / t[i] * 1e3);
      }
    }
    // One more decoding of each kind under the kernel profiler, its figures for the whole
    // decoding (`tokens` steps).
    int64_t unused = 0;
    bench::print_kernel_profile("contiguous", 1,
                                [&] { decode_contiguous(model, flat, batch, tokens, unused); });
    bench::print_kernel_profile("paged", 1, [&] { decode_paged(model, equal, tokens, unused); });
    // A contiguous batch of the mixed prompts would be padded to the longest.
    const int64_t per_row = bytes[0] / (batch * (prompt + tokens - 1));
    const int64_t padded = batch * (longest + tokens - 1) * per_row;
    std::printf("equal lengths, contiguous\ttokens_per_s %.0f\tcache_MiB %.2f\n", median(tps[0]),
                static_cast<double>(bytes[0]) / (1 << 20));
    std::printf("equal lengths, paged\ttokens_per_s %.0f\tcache_MiB %.2f\n", median(tps[1]),
                static_cast<double>(bytes[1]) / (1 << 20));
    std::printf("mixed lengths, paged\ttokens_per_s %.0f\tcache_MiB %.2f\n", median(tps[2]),
                static_cast<double>(bytes[2]) / (1 << 20));
    std::printf(
        "mixed lengths, contiguous one at a time\ttokens_per_s %.0f\t"
        "(a batch padded to the longest: cache_MiB %.2f)\n",
        median(tps[3]), static_cast<double>(padded) / (1 << 20));
    std::printf(
        "paged_vs_contiguous\t%.3f\nmixed_paged_vs_one_at_a_time\t%.2f\n"
        "mixed_memory_paged_vs_padded\t%.2f\nmixed_memory_paged_vs_tokens_cached\t%.3f\n",
        median(tps[1]) / median(tps[0]), median(tps[2]) / median(tps[3]),
        static_cast<double>(bytes[2]) / static_cast<double>(padded),
        static_cast<double>(bytes[2]) / static_cast<double>(mixed_cached * per_row));
    return 0;
  });
}
