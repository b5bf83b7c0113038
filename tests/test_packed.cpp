// Packed batches: RoPE at given positions, the transformer on sequences back to back against
// each sequence alone and against the padded batch (values, gradients, dropout), and the data
// layer that packs examples into a token budget.
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "test_util.h"

using namespace tg;
using tgtest::rnd;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
namespace fs = std::filesystem;

namespace {

nn::TransformerConfig tiny_config() { return tgtest::tiny_transformer_config(); }

// Sequences of the given lengths with random tokens and targets (a few ignored).
std::vector<nn::Sequence> random_sequences(const std::vector<int64_t>& lengths, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<nn::Sequence> seqs;
  for (int64_t n : lengths) {
    nn::Sequence s;
    for (int64_t i = 0; i < n; ++i) {
      s.inputs.push_back(static_cast<int64_t>(rng() % 11));
      s.targets.push_back(rng() % 5 == 0 ? -100 : static_cast<int64_t>(rng() % 11));
    }
    seqs.push_back(s);
  }
  return seqs;
}

std::vector<std::vector<double>> grads_of(const std::vector<Tensor>& params) {
  std::vector<std::vector<double>> g;
  g.reserve(params.size());
  for (const Tensor& p : params) g.push_back(p.grad().to_vector<double>());
  return g;
}

}  // namespace

TEST_CASE("rope: positions put each row where it says, forward and gradient") {
  Tensor x = rnd({5, 2, 4}, 1);  // (T, H, D)
  RopeOptions o;
  o.seq_dim = 0;
  o.positions = {0, 1, 2, 0, 7};
  o.offset = 1;
  Tensor y = rope(x, o);
  for (int64_t t = 0; t < 5; ++t) {
    RopeOptions one;
    one.seq_dim = 0;
    one.offset = o.positions[static_cast<size_t>(t)] + 1;
    // The same bits: the rows come from the table of positions 0..7, gathered.
    CHECK(y.narrow(0, t, 1).to_vector<double>() ==
          rope(x.narrow(0, t, 1), one).to_vector<double>());
  }
  // Rows far apart (a decoding step's): computed row by row, the same bits again.
  RopeOptions far;
  far.seq_dim = 0;
  far.positions = {3, 1000};
  const Tensor x2 = x.narrow(0, 0, 2), y2 = rope(x2, far);
  for (int64_t t = 0; t < 2; ++t) {
    RopeOptions one;
    one.seq_dim = 0;
    one.offset = far.positions[static_cast<size_t>(t)];
    CHECK(y2.narrow(0, t, 1).to_vector<double>() ==
          rope(x2.narrow(0, t, 1), one).to_vector<double>());
  }
  Fn f = [o](const std::vector<Tensor>& in) { return rope(in[0], o); };
  CHECK_GRADCHECK(f, std::vector<Tensor>{rnd({2, 5, 4}, 2).requires_grad_(true).transpose(0, 1)});
  tgtest::check_throws_with_prefix(
      [&] {
        RopeOptions bad = o;
        bad.positions = {0, 1};
        rope(x, bad);
      },
      "[rope]", "one entry per row");
  tgtest::check_throws_with_prefix(
      [&] {
        RopeOptions bad = o;
        bad.positions[2] = -1;
        rope(x, bad);
      },
      "[rope]", "'positions' must be >= 0");
}

TEST_CASE("packed transformer: each sequence's logits are its own, alone") {
  nn::Transformer model(tiny_config(), 3);
  const std::vector<int64_t> lengths{3, 1, 0, 6, 2};
  nn::Batch b = nn::pack(random_sequences(lengths, 1));
  Generator unused{0, 0};
  Tensor logits = model.forward(b.inputs, b.cu_seqlens, unused);
  REQUIRE(logits.sizes() == Shape{12, 11});
  int64_t at = 0;
  for (int64_t n : lengths) {
    if (n == 0) continue;
    Tensor alone = model.forward(b.inputs.narrow(0, at, n).view({1, n}));
    tgtest::check_close(logits.narrow(0, at, n).to_vector<double>(), alone.to_vector<double>(),
                        1e-12);
    at += n;
  }
}

TEST_CASE("packed transformer: loss and every gradient equal the padded batch's, with dropout") {
  for (double drop : {0.0, 0.25}) {
    CAPTURE(drop);
    nn::TransformerConfig c = tiny_config();
    c.attn_dropout = drop;
    nn::Transformer model(c, 5);
    const std::vector<int64_t> lengths{4, 1, 7, 3};
    const std::vector<nn::Sequence> seqs = random_sequences(lengths, 2);
    // Padded to the longest: the dropout element space is the same (DESIGN §5).
    const nn::Batch padded = nn::pad(seqs, 7), packed = nn::pack(seqs);
    auto run = [&](const nn::Batch& b) {
      for (const Tensor& p : model.parameters()) p.zero_grad();
      Generator dropout{9, 0};
      Tensor loss = nn::batch_loss(model, b, dropout);
      loss.backward();
      return std::pair{loss.item<double>(), grads_of(model.parameters())};
    };
    const auto [loss_padded, grads_padded] = run(padded);
    const auto [loss_packed, grads_packed] = run(packed);
    CHECK(loss_packed == doctest::Approx(loss_padded).epsilon(1e-12));
    REQUIRE(grads_packed.size() == grads_padded.size());
    for (size_t i = 0; i < grads_packed.size(); ++i) {
      CAPTURE(i);
      tgtest::check_close(grads_packed[i], grads_padded[i], 1e-12);
    }
  }
}

TEST_CASE("packed transformer: gradcheck through the packed layout") {
  nn::TransformerConfig c = tiny_config();
  c.layers = 1;
  nn::Transformer model(c, 7);
  const nn::Batch b = nn::pack(random_sequences({2, 3}, 3));
  Fn f = [&](const std::vector<Tensor>&) {
    Generator unused{0, 0};
    return nn::lm_loss(model.forward(b.inputs, b.cu_seqlens, unused), b.targets);
  };
  CHECK_GRADCHECK(f, model.parameters());
}

TEST_CASE("packed transformer: bad offsets and ids are [Transformer] errors") {
  nn::Transformer model(tiny_config(), 1);
  Generator g{0, 0};
  Tensor ids = from_vector(std::vector<int64_t>{1, 2, 3, 4}, {4});
  auto offsets = [](const std::vector<int64_t>& v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return from_vector(v, {n});
  };
  tgtest::check_throws_with_prefix(
      [&] {
        model.forward(ids, offsets({0, 3, 2, 4}), g);
      },
      "[Transformer]", "must not decrease");
  tgtest::check_throws_with_prefix(
      [&] {
        model.forward(ids, offsets({0, 3}), g);
      },
      "[Transformer]", "from 0 to the 4 tokens");
  tgtest::check_throws_with_prefix(
      [&] {
        model.forward(ids, offsets({1, 4}), g);
      },
      "[Transformer]", "from 0 to the 4 tokens");
  tgtest::check_throws_with_prefix(
      [&] {
        model.forward(ids, from_vector(std::vector<double>{0, 4}, {2}), g);
      },
      "[Transformer]", "1-D int64");
  tgtest::check_throws_with_prefix(
      [&] {
        model.forward(ids.view({1, 4}), offsets({0, 4}), g);
      },
      "[Transformer]", "int64 (tokens)");
}

TEST_CASE("packing: budgets, random task sizes, pure in step, and pad's layout") {
  auto task = nn::make_task("reverse", 6, /*random_sizes=*/true);
  CHECK_FALSE(task->fixed_length());
  CHECK(task->seq_len() == 12);
  nn::Batch b = nn::task_packed_batch(*task, 40, 1, 3);
  const std::vector<int64_t> cu = b.cu_seqlens.to_vector<int64_t>();
  const std::vector<int64_t> in = b.inputs.to_vector<int64_t>(),
                             tg = b.targets.to_vector<int64_t>();
  CHECK(cu.back() <= 40);
  CHECK(cu.back() > 40 - 12);  // stops only when the next sequence does not fit
  CHECK(static_cast<int64_t>(in.size()) == cu.back());
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    // A reverse example of size n: n letters, '=', then n - 1 answer letters as input.
    const int64_t len = cu[s + 1] - cu[s], n = len / 2;
    CHECK(len % 2 == 0);
    CHECK(in[cu[s] + n] == '=');
    for (int64_t i = 0; i < n; ++i) CHECK(tg[cu[s] + n + i] == in[cu[s] + n - 1 - i]);
    CHECK(tg[cu[s]] == -100);
  }
  CHECK(nn::task_packed_batch(*task, 40, 1, 3).inputs.to_vector<int64_t>() == in);
  CHECK(nn::task_packed_batch(*task, 40, 1, 4).inputs.to_vector<int64_t>() != in);
  // Sizes cover [1, 6].
  std::set<int64_t> sizes;
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200; ++i) sizes.insert(static_cast<int64_t>(task->sample(rng).answer.size()));
  CHECK(sizes == std::set<int64_t>{1, 2, 3, 4, 5, 6});
  // The padded batch of a random-size task: zeros and -100 after each sequence.
  nn::Batch p = nn::task_batch(*task, 4, 1, 3);
  CHECK(p.inputs.sizes() == Shape{4, 12});
  CHECK_FALSE(p.packed());
  tgtest::check_throws_with_prefix([&] { nn::task_packed_batch(*task, 11, 1, 0); }, "[task]",
                                   "longest sequence");
  tgtest::check_throws_with_prefix([&] { nn::pad(random_sequences({5}, 1), 4); }, "[pad]",
                                   "more than the length");
}

TEST_CASE("shard: a packed batch splits into runs of whole sequences, evenly by tokens") {
  const nn::Batch b = nn::pack(random_sequences({5, 1, 2, 6, 3, 3}, 4));  // 20 tokens
  std::vector<int64_t> joined;
  std::vector<int64_t> tokens;
  for (int64_t r = 0; r < 2; ++r) {
    const nn::Batch s = nn::shard(b, r, 2);
    REQUIRE(s.packed());
    const std::vector<int64_t> cu = s.cu_seqlens.to_vector<int64_t>(),
                               in = s.inputs.to_vector<int64_t>();
    CHECK(cu.front() == 0);
    CHECK(cu.back() == static_cast<int64_t>(in.size()));
    joined.insert(joined.end(), in.begin(), in.end());
    tokens.push_back(cu.back());
  }
  CHECK(joined == b.inputs.to_vector<int64_t>());
  CHECK(tokens == std::vector<int64_t>{8, 12});  // cut at 8 (nearest 10 of 0, 5, 6, 8, 14, 17)
  // The ranks' average of their weighted losses is the whole batch's mean, packed or padded
  // (rows of different target counts).
  nn::Transformer model(tiny_config(), 2);
  Generator unused{0, 0};
  auto loss_of = [&](const nn::Batch& x) {
    return nn::batch_loss(model, x, unused).item<double>();
  };
  const nn::Batch padded = nn::pad(random_sequences({5, 1, 2, 6, 3, 3}, 4), 6);
  for (const nn::Batch* whole : {&b, &padded}) {
    double average = 0;
    for (int64_t r = 0; r < 2; ++r) average += loss_of(nn::shard(*whole, r, 2)) / 2;
    CHECK(average == doctest::Approx(loss_of(*whole)).epsilon(1e-12));
  }
  // Every rank gets a sequence, even when one holds most tokens.
  const nn::Batch lopsided = nn::pack(random_sequences({1, 30, 1}, 5));
  for (int64_t r = 0; r < 3; ++r) CHECK(nn::shard(lopsided, r, 3).cu_seqlens.numel() == 2);
  tgtest::check_throws_with_prefix([&] { nn::shard(lopsided, 0, 4); }, "[shard]",
                                   "at least one sequence");
}

TEST_CASE("text dataset: packed lines, each a line's start with next-byte targets") {
  const fs::path dir = fs::temp_directory_path() / "tapegrad_packed_text";
  fs::create_directories(dir);
  std::string text;
  for (int i = 0; i < 60; ++i)
    text += std::string(static_cast<size_t>(1 + i % 9), 'a' + i % 26) + "\n";
  std::ofstream(dir / "t.txt", std::ios::binary) << text;
  nn::TextDataset data((dir / "t.txt").string());
  for (bool validation : {false, true}) {
    const nn::Batch b = data.packed_batch(30, 5, 1, 2, validation);
    const std::vector<int64_t> cu = b.cu_seqlens.to_vector<int64_t>();
    const std::vector<int64_t> in = b.inputs.to_vector<int64_t>(),
                               tg = b.targets.to_vector<int64_t>();
    CHECK(cu.size() >= 5);
    for (size_t s = 0; s + 1 < cu.size(); ++s) {
      const int64_t len = cu[s + 1] - cu[s];
      CHECK(len >= 1);
      CHECK(len <= 5);
      // A run of one letter ended by '\n' (or cut at 5 tokens): the inputs hold no '\n'.
      for (int64_t i = cu[s]; i < cu[s + 1]; ++i) {
        CHECK(in[i] == in[cu[s]]);
        CHECK((tg[i] == in[cu[s]] || (tg[i] == '\n' && i + 1 == cu[s + 1])));
      }
    }
  }
  CHECK(data.packed_batch(30, 5, 1, 2, false).inputs.to_vector<int64_t>() ==
        data.packed_batch(30, 5, 1, 2, false).inputs.to_vector<int64_t>());
  std::ofstream(dir / "flat.txt", std::ios::binary) << std::string(100, '\n');
  tgtest::check_throws_with_prefix(
      [&] { nn::TextDataset((dir / "flat.txt").string()).packed_batch(30, 5, 1, 0, false); },
      "[text]", "no line of 2 or more bytes");
  fs::remove_all(dir);
}

TEST_CASE("train_step on packed batches: the loss of a random-size task falls") {
  nn::TransformerConfig c = tiny_config();
  c.vocab = 256;
  c.d_model = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 64;
  c.dtype = kFloat32;
  nn::Transformer model(c, 2);
  nn::AdamWOptions ao;
  ao.lr = 1e-2;
  nn::AdamW opt(model.named_parameters(), ao);
  auto task = nn::make_task("sort", 4, true);
  Generator dropout{1, 0};
  double first = 0, last = 0;
  for (int64_t step = 0; step < 40; ++step) {
    const double loss =
        nn::train_step(model, opt, nn::task_packed_batch(*task, 160, 1, step), dropout);
    if (step < 5) first += loss / 5;
    if (step >= 35) last += loss / 5;
  }
  CHECK(last < 0.7 * first);
}
