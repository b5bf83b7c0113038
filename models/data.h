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
  std::string answer;  // fixed length for a given task size
};

// A task: prompts and answers of one size, or of sizes drawn at random.
class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual Example sample(std::mt19937_64& rng) const = 0;
  // The longest prompt and answer (the only ones when fixed_length()).
  virtual int64_t prompt_len() const = 0;
  virtual int64_t answer_len() const = 0;
  virtual bool fixed_length() const { return true; }
  int64_t seq_len() const { return prompt_len() + answer_len() - 1; }  // longest model input
};

// "reverse" (n letters a-z, reversed), "sort" (n digits, sorted ascending) or "add" (two
// n-digit numbers, zero-padded, and their n+1-digit sum). Unknown names are an error. With
// random_sizes, every example draws its n uniformly from [1, size].
std::unique_ptr<Task> make_task(const std::string& name, int64_t size, bool random_sizes = false);
std::vector<std::string> task_names();

// One training sequence: its input tokens and their next-token targets (-100: no loss).
struct Sequence {
  std::vector<int64_t> inputs, targets;
};

// The sequence of an example: prompt+answer without its last token, the next token as target
// on answer positions only.
Sequence task_sequence(const Example& example);

// Padded: inputs (B, T) and targets (B, T) int64; targets hold -100 where no loss is taken.
// Packed (cu_seqlens defined): inputs and targets (T) hold B sequences back to back, and
// cu_seqlens (B + 1) int64 says where each begins (Transformer::forward's packed batch).
struct Batch {
  Tensor inputs, targets;
  Tensor cu_seqlens{};  // initialised, so that Batch{inputs, targets} stays warning-free
  // What the mean loss over this batch's targets is multiplied by: 1, or for a rank's shard
  // its share of the global batch's targets times the ranks, so that the ranks' average (what
  // DistributedDataParallel takes) is the global batch's mean.
  double loss_weight = 1.0;
  bool packed() const { return cu_seqlens.defined(); }
};

// The sequences padded to `len` tokens (input 0, target -100 after each one's end).
Batch pad(const std::vector<Sequence>& seqs, int64_t len);
// The sequences back to back, with their offsets.
Batch pack(const std::vector<Sequence>& seqs);

// A batch for `step` of `batch` task sequences, padded to task.seq_len().
Batch task_batch(const Task& task, int64_t batch, uint64_t seed, int64_t step);
// A packed batch for `step`: task sequences drawn until the next one would take the batch past
// `tokens` tokens (which must hold the longest, task.seq_len()).
Batch task_packed_batch(const Task& task, int64_t tokens, uint64_t seed, int64_t step);
// Rank `index`'s part of a global batch split over `count` ranks, so that the ranks together
// see the batch one process would. Padded: rows [index * n, (index + 1) * n), n = rows / count
// (a count that does not divide the rows is an error). Packed: a run of whole sequences, the
// runs cut where the tokens split most evenly (each rank gets at least one sequence; fewer
// sequences than ranks is an error). Its loss_weight makes the ranks' average loss (and
// gradient) the global batch's mean, however the targets fall.
Batch shard(const Batch& batch, int64_t index, int64_t count);
// `count` held-out examples (drawn from a stream that training batches never use).
std::vector<Example> task_eval_set(const Task& task, int64_t count, uint64_t seed);

// A text file's bytes, split 90/10 into training and validation text.
class TextDataset {
 public:
  explicit TextDataset(const std::string& path);
  // Random windows of seq_len + 1 bytes: inputs and next-byte targets everywhere.
  Batch batch(int64_t batch, int64_t seq_len, uint64_t seed, int64_t step, bool validation) const;
  // The text split at line breaks, packed: random lines (each with its '\n', cut to its first
  // max_len + 1 bytes; lines of fewer than 2 bytes have no target and are never drawn), drawn
  // until the next would take the batch past `tokens` tokens (at least max_len).
  Batch packed_batch(int64_t tokens, int64_t max_len, uint64_t seed, int64_t step,
                     bool validation) const;
  const std::string& text() const { return text_; }

 private:
  struct Line {
    size_t start, size;  // bytes, the '\n' included
  };
  std::string path_, text_;
  size_t split_ = 0;
  std::vector<Line> lines_[2];  // [0] training, [1] validation
};

}  // namespace tg::nn
