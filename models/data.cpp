#include "models/data.h"

#include <algorithm>
#include <fstream>
#include <iterator>

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

std::unique_ptr<Task> make_task(const std::string& name, int64_t size) {
  TG_CHECK(size >= 1 && size <= 64, "task", "argument 'size' must be in [1, 64], got ", size);
  if (name == "reverse") return std::make_unique<Reverse>(size);
  if (name == "sort") return std::make_unique<Sort>(size);
  if (name == "add") return std::make_unique<Add>(size);
  fail("task", "unknown task '", name, "', expected one of reverse, sort, add");
}

Batch task_batch(const Task& task, int64_t batch, uint64_t seed, int64_t step) {
  TG_CHECK(batch > 0, "task", "argument 'batch' must be positive, got ", batch);
  std::mt19937_64 rng = rng_for(seed, step, 0);
  const int64_t t = task.seq_len(), p = task.prompt_len();
  std::vector<int64_t> in(static_cast<size_t>(batch * t)), tgt(in.size(), -100);
  for (int64_t b = 0; b < batch; ++b) {
    Example e = task.sample(rng);
    std::vector<int64_t> ids = ByteTokenizer::encode(e.prompt + e.answer);
    for (int64_t i = 0; i < t; ++i) {
      in[b * t + i] = ids[i];
      if (i + 1 >= p) tgt[b * t + i] = ids[i + 1];  // predict answer tokens only
    }
  }
  return {from_vector(in, {batch, t}), from_vector(tgt, {batch, t})};
}

Batch shard(const Batch& batch, int64_t index, int64_t count) {
  TG_CHECK(count > 0, "shard", "argument 'count' must be positive, got ", count);
  TG_CHECK(index >= 0 && index < count, "shard", "argument 'index' must be in [0, ", count,
           "), got ", index);
  const int64_t rows = batch.inputs.size(0);
  TG_CHECK(rows % count == 0, "shard", "a batch of ", rows, " rows does not split over ", count,
           " ranks: make the batch a multiple of the world size");
  const int64_t n = rows / count;
  return {batch.inputs.narrow(0, index * n, n).contiguous(),
          batch.targets.narrow(0, index * n, n).contiguous()};
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

}  // namespace tg::nn
