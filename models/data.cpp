#include "models/data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <tuple>

#include "ops/factories.h"

namespace tg::nn {

namespace {

// A generator for (seed, step, stream): independent of every other step, so resuming at any
// step reproduces the data. Stream 1 is reserved for evaluation.
std::mt19937_64 rng_for(uint64_t seed, int64_t step, uint64_t stream) {
  std::seed_seq seq{
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(step),
      static_cast<uint32_t>(static_cast<uint64_t>(step) >> 32), static_cast<uint32_t>(stream)};
  return std::mt19937_64(seq);
}

// Uniform in [0, n) without the implementation-defined std::uniform_int_distribution, so
// batches are the same with every standard library.
int64_t below(std::mt19937_64& rng, int64_t n) { return static_cast<int64_t>(rng() % n); }

class Reverse : public Task {
 public:
  explicit Reverse(int64_t n) : n_(n) {}
  std::string name() const override { return "reverse"; }
  Example sample(std::mt19937_64& rng) const override {
    std::string s;
    for (int64_t i = 0; i < n_; ++i) s += static_cast<char>('a' + below(rng, 26));
    return {s + "=", std::string(s.rbegin(), s.rend())};
  }
  int64_t prompt_len() const override { return n_ + 1; }
  int64_t answer_len() const override { return n_; }

 private:
  int64_t n_;
};

class Sort : public Task {
 public:
  explicit Sort(int64_t n) : n_(n) {}
  std::string name() const override { return "sort"; }
  Example sample(std::mt19937_64& rng) const override {
    std::string s;
    for (int64_t i = 0; i < n_; ++i) s += static_cast<char>('0' + below(rng, 10));
    std::string sorted = s;
    std::sort(sorted.begin(), sorted.end());
    return {s + "=", sorted};
  }
  int64_t prompt_len() const override { return n_ + 1; }
  int64_t answer_len() const override { return n_; }

 private:
  int64_t n_;
};

class Add : public Task {
 public:
  explicit Add(int64_t n) : n_(n) {}
  std::string name() const override { return "add"; }
  Example sample(std::mt19937_64& rng) const override {
    std::string a, b;
    for (int64_t i = 0; i < n_; ++i) {
      a += static_cast<char>('0' + below(rng, 10));
      b += static_cast<char>('0' + below(rng, 10));
    }
    // Schoolbook sum of the digit strings (n may exceed what an integer holds).
    std::string sum(static_cast<size_t>(n_ + 1), '0');
    int carry = 0;
    for (int64_t i = n_ - 1; i >= 0; --i) {
      const int d = (a[i] - '0') + (b[i] - '0') + carry;
      sum[i + 1] = static_cast<char>('0' + d % 10);
      carry = d / 10;
    }
    sum[0] = static_cast<char>('0' + carry);
    return {a + "+" + b + "=", sum};
  }
  int64_t prompt_len() const override { return 2 * n_ + 2; }
  int64_t answer_len() const override { return n_ + 1; }

 private:
  int64_t n_;
};

// Every example of a size drawn uniformly from [1, n]: one task of each size.
class RandomSize : public Task {
 public:
  explicit RandomSize(std::vector<std::unique_ptr<Task>> sizes) : sizes_(std::move(sizes)) {}
  std::string name() const override { return sizes_.back()->name(); }
  Example sample(std::mt19937_64& rng) const override {
    return sizes_[static_cast<size_t>(below(rng, static_cast<int64_t>(sizes_.size())))]->sample(
        rng);
  }
  int64_t prompt_len() const override { return sizes_.back()->prompt_len(); }
  int64_t answer_len() const override { return sizes_.back()->answer_len(); }
  bool fixed_length() const override { return false; }

 private:
  std::vector<std::unique_ptr<Task>> sizes_;
};

// Sequences drawn by `next` until the one after would take them past `tokens` tokens.
template <class Next>
std::vector<Sequence> fill(int64_t tokens, Next next) {
  std::vector<Sequence> seqs;
  int64_t used = 0;
  for (;;) {
    Sequence s = next();
    used += static_cast<int64_t>(s.inputs.size());
    if (used > tokens) return seqs;
    seqs.push_back(std::move(s));
  }
}

}  // namespace

std::vector<int64_t> ByteTokenizer::encode(const std::string& text) {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) s += (id >= 0 && id < kVocab) ? static_cast<char>(id) : '?';
  return s;
}

std::vector<std::string> task_names() { return {"reverse", "sort", "add"}; }

std::unique_ptr<Task> make_task(const std::string& name, int64_t size, bool random_sizes) {
  TG_CHECK(size >= 1 && size <= 64, "task", "argument 'size' must be in [1, 64], got ", size);
  if (random_sizes) {
    std::vector<std::unique_ptr<Task>> sizes;
    for (int64_t n = 1; n <= size; ++n) sizes.push_back(make_task(name, n));
    return std::make_unique<RandomSize>(std::move(sizes));
  }
  if (name == "reverse") return std::make_unique<Reverse>(size);
  if (name == "sort") return std::make_unique<Sort>(size);
  if (name == "add") return std::make_unique<Add>(size);
  fail("task", "unknown task '", name, "', expected one of reverse, sort, add");
}

Sequence task_sequence(const Example& example) {
  const std::vector<int64_t> ids = ByteTokenizer::encode(example.prompt + example.answer);
  const size_t p = example.prompt.size();
  Sequence s;
  s.inputs.assign(ids.begin(), ids.end() - 1);
  s.targets.assign(s.inputs.size(), -100);
  for (size_t i = p - 1; i < s.inputs.size(); ++i) s.targets[i] = ids[i + 1];  // answers only
  return s;
}

Batch pad(const std::vector<Sequence>& seqs, int64_t len) {
  const int64_t rows = static_cast<int64_t>(seqs.size());
  std::vector<int64_t> in(static_cast<size_t>(rows * len), 0), tgt(in.size(), -100);
  for (int64_t b = 0; b < rows; ++b) {
    const Sequence& s = seqs[static_cast<size_t>(b)];
    TG_CHECK(static_cast<int64_t>(s.inputs.size()) <= len, "pad", "sequence ", b, " holds ",
             s.inputs.size(), " tokens, more than the length ", len);
    std::copy(s.inputs.begin(), s.inputs.end(), in.begin() + b * len);
    std::copy(s.targets.begin(), s.targets.end(), tgt.begin() + b * len);
  }
  return {from_vector(in, {rows, len}), from_vector(tgt, {rows, len})};
}

Batch pack(const std::vector<Sequence>& seqs) {
  std::vector<int64_t> in, tgt, cu{0};
  for (const Sequence& s : seqs) {
    in.insert(in.end(), s.inputs.begin(), s.inputs.end());
    tgt.insert(tgt.end(), s.targets.begin(), s.targets.end());
    cu.push_back(static_cast<int64_t>(in.size()));
  }
  const int64_t t = static_cast<int64_t>(in.size());
  return {from_vector(in, {t}), from_vector(tgt, {t}),
          from_vector(cu, {static_cast<int64_t>(cu.size())})};
}

Batch task_batch(const Task& task, int64_t batch, uint64_t seed, int64_t step) {
  TG_CHECK(batch > 0, "task", "argument 'batch' must be positive, got ", batch);
  std::mt19937_64 rng = rng_for(seed, step, 0);
  std::vector<Sequence> seqs;
  for (int64_t b = 0; b < batch; ++b) seqs.push_back(task_sequence(task.sample(rng)));
  return pad(seqs, task.seq_len());
}

Batch task_packed_batch(const Task& task, int64_t tokens, uint64_t seed, int64_t step) {
  TG_CHECK(tokens >= task.seq_len(), "task", "argument 'tokens' (", tokens,
           ") must hold the task's longest sequence, ", task.seq_len(), " tokens");
  std::mt19937_64 rng = rng_for(seed, step, 0);
  return pack(fill(tokens, [&] { return task_sequence(task.sample(rng)); }));
}

namespace {

// Sequences [first, last) of a packed batch, offsets rebased to 0.
Batch packed_sequences(const Batch& batch, const std::vector<int64_t>& cu, int64_t first,
                       int64_t last) {
  std::vector<int64_t> sub;
  for (int64_t b = first; b <= last; ++b) sub.push_back(cu[b] - cu[first]);
  const int64_t t0 = cu[first], t = cu[last] - t0;
  return {batch.inputs.narrow(0, t0, t).contiguous(), batch.targets.narrow(0, t0, t).contiguous(),
          from_vector(sub, {static_cast<int64_t>(sub.size())})};
}

// Where rank r's run of sequences begins, r in [0, count]: the offset nearest r / count of the
// tokens, at least one sequence after the previous rank's start and leaving one for each later
// rank.
std::vector<int64_t> even_cuts(const std::vector<int64_t>& cu, int64_t count) {
  const int64_t seqs = static_cast<int64_t>(cu.size()) - 1;
  std::vector<int64_t> cuts{0};
  for (int64_t r = 1; r < count; ++r) {
    const double goal = static_cast<double>(cu.back()) * static_cast<double>(r) / count;
    int64_t best = cuts.back() + 1;
    for (int64_t b = best; b <= seqs - (count - r); ++b) {
      if (std::abs(static_cast<double>(cu[b]) - goal) <
          std::abs(static_cast<double>(cu[best]) - goal))
        best = b;
    }
    cuts.push_back(best);
  }
  cuts.push_back(seqs);
  return cuts;
}

// The targets that take a loss.
int64_t counted(const Tensor& targets) {
  const std::vector<int64_t> t = targets.to_vector<int64_t>();
  return static_cast<int64_t>(
      std::count_if(t.begin(), t.end(), [](int64_t v) { return v != -100; }));
}

// `part` of `whole` with the loss weight that makes the ranks' average the whole's mean.
Batch weighted(Batch part, const Batch& whole, int64_t count) {
  const int64_t all = counted(whole.targets);
  if (all > 0) {
    part.loss_weight = whole.loss_weight * static_cast<double>(counted(part.targets) * count) /
                       static_cast<double>(all);
  }
  return part;
}

}  // namespace

Batch shard(const Batch& batch, int64_t index, int64_t count) {
  TG_CHECK(count > 0, "shard", "argument 'count' must be positive, got ", count);
  TG_CHECK(index >= 0 && index < count, "shard", "argument 'index' must be in [0, ", count,
           "), got ", index);
  if (batch.packed()) {
    const std::vector<int64_t> cu = batch.cu_seqlens.to_vector<int64_t>();
    TG_CHECK(static_cast<int64_t>(cu.size()) - 1 >= count, "shard", "a packed batch of ",
             cu.size() - 1, " sequences does not split over ", count,
             " ranks: give each rank at least one sequence (a larger token budget)");
    const std::vector<int64_t> cuts = even_cuts(cu, count);
    return weighted(packed_sequences(batch, cu, cuts[index], cuts[index + 1]), batch, count);
  }
  const int64_t rows = batch.inputs.size(0);
  TG_CHECK(rows % count == 0, "shard", "a batch of ", rows, " rows does not split over ", count,
           " ranks: make the batch a multiple of the world size");
  const int64_t n = rows / count;
  return weighted({batch.inputs.narrow(0, index * n, n).contiguous(),
                   batch.targets.narrow(0, index * n, n).contiguous()},
                  batch, count);
}

std::vector<Example> task_eval_set(const Task& task, int64_t count, uint64_t seed) {
  std::mt19937_64 rng = rng_for(seed, 0, 1);
  std::vector<Example> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(task.sample(rng));
  return out;
}

TextDataset::TextDataset(const std::string& path) : path_(path) {
  std::ifstream in(path, std::ios::binary);
  TG_CHECK(in.good(), "text", "cannot open '", path, "': no such file or not readable");
  text_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  split_ = text_.size() * 9 / 10;
  // The lines of each split (a line across the split point is cut there).
  for (size_t at = 0; at < text_.size();) {
    const size_t nl = text_.find('\n', at);
    const size_t end = nl == std::string::npos ? text_.size() : nl + 1;
    for (auto [lo, hi, part] :
         {std::tuple{at, std::min(end, split_), 0}, std::tuple{std::max(at, split_), end, 1}}) {
      if (hi >= lo + 2) lines_[part].push_back({lo, hi - lo});
    }
    at = end;
  }
}

Batch TextDataset::batch(int64_t batch, int64_t seq_len, uint64_t seed, int64_t step,
                         bool validation) const {
  const size_t lo = validation ? split_ : 0, hi = validation ? text_.size() : split_;
  TG_CHECK(batch > 0 && seq_len > 0, "text", "batch and seq_len must be positive, got ", batch,
           " and ", seq_len);
  TG_CHECK(hi - lo > static_cast<size_t>(seq_len) + 1, "text", "'", path_, "' has ", hi - lo,
           " bytes of ", validation ? "validation" : "training", " text, need more than ",
           seq_len + 1, " for --seq-len ", seq_len);
  std::mt19937_64 rng = rng_for(seed, step, validation ? 2 : 3);
  std::vector<int64_t> in(static_cast<size_t>(batch * seq_len)), tgt(in.size());
  const int64_t starts = static_cast<int64_t>(hi - lo) - seq_len;
  for (int64_t b = 0; b < batch; ++b) {
    const size_t at = lo + static_cast<size_t>(below(rng, starts));
    for (int64_t i = 0; i < seq_len; ++i) {
      in[b * seq_len + i] = static_cast<unsigned char>(text_[at + i]);
      tgt[b * seq_len + i] = static_cast<unsigned char>(text_[at + i + 1]);
    }
  }
  return {from_vector(in, {batch, seq_len}), from_vector(tgt, {batch, seq_len})};
}

Batch TextDataset::packed_batch(int64_t tokens, int64_t max_len, uint64_t seed, int64_t step,
                                bool validation) const {
  TG_CHECK(max_len > 0 && tokens >= max_len, "text", "max_len must be positive and tokens at least",
           " max_len, got ", max_len, " and ", tokens);
  const std::vector<Line>& lines = lines_[validation ? 1 : 0];
  TG_CHECK(!lines.empty(), "text", "'", path_, "' has no line of 2 or more bytes in its ",
           validation ? "validation" : "training", " text (the last 10% is validation)");
  std::mt19937_64 rng = rng_for(seed, step, validation ? 2 : 3);
  return pack(fill(tokens, [&] {
    const Line& l = lines[static_cast<size_t>(below(rng, static_cast<int64_t>(lines.size())))];
    const size_t n = std::min(l.size, static_cast<size_t>(max_len) + 1);
    Sequence s;
    for (size_t i = 0; i + 1 < n; ++i) {
      s.inputs.push_back(static_cast<unsigned char>(text_[l.start + i]));
      s.targets.push_back(static_cast<unsigned char>(text_[l.start + i + 1]));
    }
    return s;
  }));
}

}  // namespace tg::nn
