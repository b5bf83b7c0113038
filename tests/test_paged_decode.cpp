// Decoding through a paged K/V cache: the cache's block bookkeeping, the model's paged steps
// against each sequence run alone (float64), paged against contiguous decoding bitwise
// (float32), and sample_batch against sample one prompt at a time.
#include <vector>

#include "test_util.h"

using namespace tg;
using tgtest::check_throws_with_prefix;

namespace {

using Ids = std::vector<int64_t>;

Tensor ids_of(const Ids& ids) { return from_vector(ids, {static_cast<int64_t>(ids.size())}); }

// A float32 model as the CLI trains them, small: 4 query heads sharing 2 key/value heads.
nn::TransformerConfig float32_config() {
  nn::TransformerConfig c;
  c.vocab = 37;
  c.d_model = 32;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  return c;
}

}  // namespace

TEST_CASE("PagedKVCache: blocks follow the tokens, come back on clear and survive growth") {
  nn::PagedKVCache cache(1, 1, 2, /*block_size=*/3, /*capacity=*/2, kFloat64, kCPU);
  CHECK(cache.add_sequence() == 0);
  CHECK(cache.add_sequence() == 1);
  nn::PagedStep step = cache.begin({4, 0});  // 4 tokens: 2 blocks, the whole pool
  CHECK(cache.blocks_in_use() == 2);
  CHECK(step.slots.to_vector<int64_t>() == Ids{0, 1, 2, 3});  // blocks 0 and 1
  CHECK(step.positions == Ids{0, 1, 2, 3});
  // The step's index tensors (views of one upload): offsets, every key's pool row, the table.
  CHECK(step.cu_seqlens.to_vector<int64_t>() == Ids{0, 4, 4});
  CHECK(step.cu_seqlens_kv.to_vector<int64_t>() == Ids{0, 4, 4});
  CHECK(step.kv_rows.to_vector<int64_t>() == Ids{0, 1, 2, 3});
  CHECK(step.page_table.sizes() == Shape{2, 2});
  CHECK(step.page_table.to_vector<int64_t>() == Ids{0, 1, -1, -1});
  const Tensor k = tgtest::rnd({4, 1, 2}, 1);
  cache.write(0, step, k, k);
  cache.end(step);
  CHECK(cache.length(0) == 4);
  CHECK(cache.length(1) == 0);
  // Sequence 1's first token needs a third block: the pool doubles, the old blocks keep their
  // ids and their rows.
  step = cache.begin({0, 1});
  CHECK(step.slots.to_vector<int64_t>() == Ids{6});  // block 2, row 0
  cache.write(0, step, tgtest::rnd({1, 1, 2}, 2), tgtest::rnd({1, 1, 2}, 2));
  cache.end(step);
  CHECK(cache.capacity() == 4);
  CHECK(cache.blocks_in_use() == 3);
  CHECK(cache.bytes() == 2 * 4 * 3 * 1 * 2 * 8);
  const std::vector<int64_t> table = step.page_table.to_vector<int64_t>();
  CHECK(table == Ids{0, 1, 2, -1});
  const Tensor held = cache.k_pool(0).reshape({12, 1, 2}).narrow(0, 0, 4);
  CHECK(held.to_vector<double>() == k.to_vector<double>());
  cache.clear(0);
  CHECK(cache.length(0) == 0);
  CHECK(cache.blocks_in_use() == 1);
  step = cache.begin({5, 0});                                    // reuses the two blocks given back
  CHECK(step.slots.to_vector<int64_t>() == Ids{0, 1, 2, 3, 4});  // blocks 0 and 1 again
  CHECK(cache.blocks_in_use() == 3);
  CHECK(cache.capacity() == 4);
  // A step that adds nothing to empty sequences: empty rows, slots and table.
  nn::PagedKVCache empty(1, 1, 2, 3, 0, kFloat64, kCPU);
  empty.add_sequence();
  empty.add_sequence();
  const nn::PagedStep none = empty.begin({0, 0});
  CHECK(none.cu_seqlens.to_vector<int64_t>() == Ids{0, 0, 0});
  CHECK(none.kv_rows.numel() == 0);
  CHECK(none.slots.numel() == 0);
  CHECK(none.page_table.sizes() == Shape{2, 0});
  check_throws_with_prefix([&] { cache.begin({1}); }, "[PagedKVCache]", "one count");
  check_throws_with_prefix([&] { cache.begin({-1, 0}); }, "[PagedKVCache]", ">= 0 new tokens");
  check_throws_with_prefix([&] { cache.length(2); }, "[PagedKVCache]", "one of the 2 sequences");
  check_throws_with_prefix([&] { cache.write(0, step, k, k); }, "[PagedKVCache]", "(5, 1, 2)");
  check_throws_with_prefix([&] { nn::PagedKVCache(1, 1, 2, 0, 1, kFloat64, kCPU); },
                           "[PagedKVCache]", "'block_size' must be positive");
}

TEST_CASE("paged decoding: every step's logits are each sequence's run alone (float64)") {
  nn::Transformer model(tgtest::tiny_transformer_config(), 7);
  model.eval();
  // Three sequences fed unevenly: prompts of 5, 1 and 0 tokens, then steps of one token
  // each, then a step where only some sequences grow (by 2, 0 and 3).
  const std::vector<Ids> whole{{3, 1, 4, 1, 5, 9, 2, 6, 5}, {2, 7, 1, 8, 2, 8}, {1, 4, 1, 4}};
  const std::vector<Ids> steps{{5, 1, 0}, {1, 1, 1}, {1, 1, 0}, {2, 0, 3}};
  nn::PagedKVCache cache = model.paged_cache(2, 1);  // grows as the steps need
  for (size_t b = 0; b < whole.size(); ++b) cache.add_sequence();
  std::vector<int64_t> fed(whole.size(), 0);
  for (const Ids& counts : steps) {
    Ids ids;
    for (size_t b = 0; b < whole.size(); ++b)
      ids.insert(ids.end(), whole[b].begin() + fed[b], whole[b].begin() + fed[b] + counts[b]);
    const Tensor logits = model.forward(ids_of(ids), counts, cache);
    int64_t at = 0;
    for (size_t b = 0; b < whole.size(); ++b) {
      const auto len = static_cast<int64_t>(fed[b] + counts[b]);
      if (counts[b] > 0) {
        const Ids prefix(whole[b].begin(), whole[b].begin() + len);
        const Tensor alone = model.forward(from_vector(prefix, {1, len})).squeeze(0);
        tgtest::check_close(logits.narrow(0, at, counts[b]).to_vector<double>(),
                            alone.narrow(0, fed[b], counts[b]).to_vector<double>(), 1e-12);
      }
      CHECK(cache.length(static_cast<int64_t>(b)) == len);
      at += counts[b];
      fed[b] = len;
    }
  }
  // 9, 3 and 4 tokens in blocks of 2.
  CHECK(cache.blocks_in_use() == 5 + 2 + 2);
  check_throws_with_prefix(
      [&] {
        model.forward(ids_of({1, 2}), {1, 0, 0}, cache);
      },
      "[Transformer]", "add up to the 2 tokens");
  nn::PagedKVCache other = nn::Transformer(float32_config(), 3).paged_cache(2, 1);
  other.add_sequence();
  check_throws_with_prefix([&] { model.forward(ids_of({1}), {1}, other); }, "[Transformer]",
                           "does not fit the model");
}

TEST_CASE("paged decoding is bitwise the contiguous cache's (float32)") {
  nn::Transformer model(float32_config(), 3);
  model.eval();
  // A batch of equal lengths decodes with the contiguous cache too: prefill, then 4 steps.
  const Ids prompts{5, 3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4};
  const int64_t B = 3, P = 7;
  nn::KVCache contiguous;
  nn::PagedKVCache paged = model.paged_cache(4, 0);
  for (int64_t b = 0; b < B; ++b) paged.add_sequence();
  Tensor next_c = from_vector(prompts, {B, P});
  Tensor next_p = ids_of(prompts);
  Ids counts(B, P);
  for (int step = 0; step < 5; ++step) {
    CAPTURE(step);
    const Tensor lc = model.forward(next_c, contiguous);  // (B, s, V)
    const Tensor lp = model.forward(next_p, counts, paged);
    CHECK(lc.reshape({-1, lc.size(2)}).to_vector<float>() == lp.to_vector<float>());
    const int64_t s = lc.size(1);
    next_c = argmax(lc.slice(1, s - 1, s), -1);  // (B, 1)
    next_p = next_c.reshape({B});
    counts.assign(B, 1);
  }
  // Prompts of different lengths, all at once, against each alone: the same tokens.
  const std::vector<Ids> mixed{{5, 3, 1}, {4}, {1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7}};
  nn::SampleOptions so;
  so.max_new_tokens = 6;
  so.temperature = 0;
  so.block_size = 4;
  Generator g0{1, 0};
  const std::vector<Ids> together = nn::sample_batch(model, mixed, so, g0);
  for (size_t b = 0; b < mixed.size(); ++b) {
    Generator g{1, 0};
    CHECK(together[b] == nn::sample(model, mixed[b], so, g));
  }
}

TEST_CASE("sample_batch: one prompt draws what sample draws, context restarts alike") {
  nn::Transformer model(float32_config(), 3);
  model.eval();
  nn::SampleOptions so;
  so.max_new_tokens = 9;
  so.temperature = 0.8;
  so.top_k = 5;
  so.block_size = 2;
  for (int64_t context : {0, 6}) {
    CAPTURE(context);
    so.context = context;
    Generator g1{4, 0}, g2{4, 0};
    const Ids alone = nn::sample(model, {3, 1, 4, 1}, so, g1);
    const std::vector<Ids> together = nn::sample_batch(model, {{3, 1, 4, 1}}, so, g2);
    CHECK(together.front() == alone);
    CHECK(g1.offset == g2.offset);
  }
  so.temperature = 0;  // greedy, past the context: each prompt as if alone
  so.context = 5;
  const std::vector<Ids> prompts{{2, 7, 1, 8, 2, 8, 1}, {3}};
  Generator g{0, 0};
  const std::vector<Ids> together = nn::sample_batch(model, prompts, so, g);
  for (size_t b = 0; b < prompts.size(); ++b) {
    Generator g1{0, 0};
    CHECK(together[b] == nn::sample(model, prompts[b], so, g1));
  }
  check_throws_with_prefix(
      [&] {
        nn::sample_batch(model, std::vector<Ids>{{1}, {}}, so, g);
      },
      "[sample_batch]", "prompt 1 must hold at least one token");
  check_throws_with_prefix([&] { nn::sample_batch(model, std::vector<Ids>{{40}}, so, g); },
                           "[sample_batch]",
                           "prompt 0 has token 40, outside the vocabulary [0, 37)");
  so.block_size = 0;
  check_throws_with_prefix([&] { nn::sample_batch(model, std::vector<Ids>{{1}}, so, g); },
                           "[sample_batch]", "'block_size' must be positive");
}
