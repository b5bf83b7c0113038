// Training data: a byte-level tokenizer, synthetic tasks that need attention (with exact-match
// answers), and a text file for character-level language modelling. Batches are a pure
// function of (seed, step), so a resumed run sees the same data as an uninterrupted one.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tg::nn {

// Bytes are tokens: vocabulary 256, no unknowns.
struct ByteTokenizer {
  static constexpr int64_t kVocab = 256;
  static std::vector<int64_t> encode(const std::string& text);
  static std::string decode(const std::vector<int64_t>& ids);  // ids outside [0, 256) become '?'
};

struct Example {
  std::string prompt;  // ends with '='
  std::string answer;  // fixed length for a given task
};

// A task with fixed-length prompts and answers, so batches need no padding.
class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual Example sample(std::mt19937_64& rng) const = 0;
  virtual int64_t prompt_len() const = 0;
  virtual int64_t answer_len() const = 0;
  int64_t seq_len() const { return prompt_len() + answer_len() - 1; }  // model input length
};

// "reverse" (n letters a-z, reversed), "sort" (n digits, sorted ascending) or "add" (two
// n-digit numbers, zero-padded, and their n+1-digit sum). Unknown names are an error.
std::unique_ptr<Task> make_task(const std::string& name, int64_t size);
std::vector<std::string> task_names();

// inputs (B, T) and targets (B, T) int64; targets hold -100 where no loss is taken.
struct Batch {
  Tensor inputs, targets;
};

// A batch for `step`: inputs are prompt+answer without its last token, targets the next token
// on answer positions only.
Batch task_batch(const Task& task, int64_t batch, uint64_t seed, int64_t step);
// Rows [index * n, (index + 1) * n) of `batch`, n = its rows / count: rank `index`'s part of a
// global batch split over `count` ranks, so that the ranks together see the batch one process
// would. A count that does not divide the rows is an error.
Batch shard(const Batch& batch, int64_t index, int64_t count);
// `count` held-out examples (drawn from a stream that training batches never use).
std::vector<Example> task_eval_set(const Task& task, int64_t count, uint64_t seed);

// A text file's bytes, split 90/10 into training and validation text.
class TextDataset {
 public:
  explicit TextDataset(const std::string& path);
  // Random windows of seq_len + 1 bytes: inputs and next-byte targets everywhere.
  Batch batch(int64_t batch, int64_t seq_len, uint64_t seed, int64_t step, bool validation) const;
  const std::string& text() const { return text_; }

 private:
  std::string path_, text_;
  size_t split_ = 0;
};

}  // namespace tg::nn
