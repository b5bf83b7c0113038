#include "models/paged_cache.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "ops/factories.h"
#include "ops/host_values.h"
#include "ops/join.h"

namespace tg::nn {

namespace {
constexpr const char* kName = "PagedKVCache";
}

PagedKVCache::PagedKVCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t block_size,
                           int64_t capacity, DType dtype, Device device)
    : block_size_(block_size) {
  TG_CHECK(layers > 0 && kv_heads > 0 && head_dim > 0, kName,
           "arguments 'layers', 'kv_heads' and 'head_dim' must be positive, got ", layers, ", ",
           kv_heads, " and ", head_dim);
  TG_CHECK(block_size > 0, kName, "argument 'block_size' must be positive, got ", block_size);
  TG_CHECK(capacity >= 0, kName, "argument 'capacity' must be >= 0 blocks, got ", capacity);
  const TensorOptions o = TensorOptions(dtype).device(device);
  for (int64_t i = 0; i < layers; ++i) {
    k_.push_back(zeros({capacity, block_size, kv_heads, head_dim}, o));
    v_.push_back(zeros({capacity, block_size, kv_heads, head_dim}, o));
  }
  // Taken from the back: blocks 0, 1, 2, ... in order.
  for (int64_t b = capacity - 1; b >= 0; --b) free_.push_back(b);
}

int64_t PagedKVCache::add_sequence() {
  pages_.emplace_back();
  lengths_.push_back(0);
  return sequences() - 1;
}

void PagedKVCache::check_sequence(int64_t seq, const char* arg) const {
  TG_CHECK(seq >= 0 && seq < sequences(), kName, "argument '", arg, "' must name one of the ",
           sequences(), " sequences, got ", seq);
}

void PagedKVCache::clear(int64_t seq) {
  check_sequence(seq, "seq");
  auto& pages = pages_[static_cast<size_t>(seq)];
  free_.insert(free_.end(), pages.rbegin(), pages.rend());
  pages.clear();
  lengths_[static_cast<size_t>(seq)] = 0;
}

int64_t PagedKVCache::length(int64_t seq) const {
  check_sequence(seq, "seq");
  return lengths_[static_cast<size_t>(seq)];
}

int64_t PagedKVCache::capacity() const { return k_.front().size(0); }

int64_t PagedKVCache::blocks_in_use() const {
  return capacity() - static_cast<int64_t>(free_.size());
}

int64_t PagedKVCache::bytes() const {
  int64_t total = 0;
  for (size_t i = 0; i < k_.size(); ++i) {
    total += static_cast<int64_t>((k_[i].numel() + v_[i].numel()) * dtype_size(k_[i].dtype()));
  }
  return total;
}

int64_t PagedKVCache::take_block() {
  if (free_.empty()) {
    // Twice the blocks (one at least); the old blocks keep their ids, the new ones are free.
    const int64_t old = capacity(), grown = std::max<int64_t>(1, 2 * old);
    NoGradGuard no_grad;
    for (auto* pools : {&k_, &v_}) {
      for (Tensor& pool : *pools) {
        Shape more = pool.sizes();
        more[0] = grown - old;
        pool = cat({pool, zeros(more, pool.options())}, 0);
      }
    }
    for (int64_t b = grown - 1; b >= old; --b) free_.push_back(b);
  }
  const int64_t b = free_.back();
  free_.pop_back();
  return b;
}

PagedStep PagedKVCache::begin(const std::vector<int64_t>& new_tokens) {
  TG_CHECK(static_cast<int64_t>(new_tokens.size()) == sequences(), kName, "a step needs one count ",
           "of new tokens per sequence (", sequences(), "), got ", new_tokens.size());
  for (size_t s = 0; s < new_tokens.size(); ++s) {  // before any block is taken
    TG_CHECK(new_tokens[s] >= 0, kName, "sequence ", s, " must get >= 0 new tokens, got ",
             new_tokens[s]);
  }
  PagedStep step;
  std::vector<int64_t> cu{0}, cu_kv{0}, rows, slots;
  int64_t pages = 0;
  for (size_t s = 0; s < new_tokens.size(); ++s) {
    const int64_t n = new_tokens[s], len = lengths_[s];
    auto& own = pages_[s];
    while (static_cast<int64_t>(own.size()) * block_size_ < len + n) own.push_back(take_block());
    for (int64_t pos = 0; pos < len + n; ++pos) {  // every key the sequence has after the step
      rows.push_back(own[static_cast<size_t>(pos / block_size_)] * block_size_ + pos % block_size_);
      if (pos < len) continue;
      step.positions.push_back(pos);  // a new token
      slots.push_back(rows.back());
    }
    cu.push_back(cu.back() + n);
    cu_kv.push_back(cu_kv.back() + len + n);
    step.seq_len_kv.push_back(len + n);
    pages = std::max(pages, static_cast<int64_t>(own.size()));
  }
  std::vector<int64_t> table(new_tokens.size() * static_cast<size_t>(pages), -1);
  for (size_t s = 0; s < pages_.size(); ++s)
    std::copy(pages_[s].begin(), pages_[s].end(), table.begin() + static_cast<int64_t>(s) * pages);
  // Sent to the device in one copy, with their host values kept (detail::int64_to_device):
  // sdpa checks the offsets and index_copy_ the slots on the host in every layer, and a read
  // from a GPU would wait for the work queued before it.
  const auto size = [](const std::vector<int64_t>& v) { return static_cast<int64_t>(v.size()); };
  const std::vector<Tensor> sent = detail::int64_to_device({{cu, {size(cu)}},
                                                            {table, {sequences(), pages}},
                                                            {rows, {size(rows)}},
                                                            {cu_kv, {size(cu_kv)}},
                                                            {slots, {size(slots)}}},
                                                           k_.front().device());
  step.cu_seqlens = sent[0];
  step.page_table = sent[1];
  step.kv_rows = sent[2];
  step.cu_seqlens_kv = sent[3];
  step.slots = sent[4];
  return step;
}

void PagedKVCache::write(int64_t layer, const PagedStep& step, const Tensor& k, const Tensor& v) {
  TG_CHECK(layer >= 0 && layer < static_cast<int64_t>(k_.size()), kName, "argument 'layer' must ",
           "be in [0, ", k_.size(), "), got ", layer);
  NoGradGuard no_grad;  // the cache holds values: nothing flows back into it
  for (auto [src, pool] : {std::pair{&k, &k_[static_cast<size_t>(layer)]},
                           std::pair{&v, &v_[static_cast<size_t>(layer)]}}) {
    const auto tokens = static_cast<int64_t>(step.positions.size());
    TG_CHECK(src->dim() == 3 && src->size(0) == tokens && src->size(1) == pool->size(2) &&
                 src->size(2) == pool->size(3),
             kName, "the step's new keys and values must be (", tokens, ", ", pool->size(2), ", ",
             pool->size(3), "), got ", shape_str(src->sizes()));
    Tensor rows = pool->view({pool->size(0) * block_size_, pool->size(2), pool->size(3)});
    rows.index_copy_(0, step.slots, *src);
  }
}

void PagedKVCache::end(const PagedStep& step) {
  TG_CHECK(step.seq_len_kv.size() == lengths_.size(), kName, "the step was begun for ",
           step.seq_len_kv.size(), " sequences, the cache has ", lengths_.size());
  lengths_ = step.seq_len_kv;
}

}  // namespace tg::nn
