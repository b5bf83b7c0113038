// A paged key/value cache for decoding several sequences at once (vLLM's PagedAttention,
// cuDNN's paged K/V caches): each layer keeps its keys and values in one pool of fixed-size
// blocks, (blocks, block_size, Hk, Dh), and each sequence owns a list of blocks, its row of
// the page table. A sequence grows a block at a time, and the blocks a sequence gives back
// serve the next one, so the memory in use follows the tokens actually cached (at most one
// partly filled block per sequence) instead of batch x the longest sequence.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tg::nn {

// The cached sequences' layout for one forward step: which pool rows the new tokens go to
// and which rows every layer's attention reads (the page table resolved once for all layers).
// Made by PagedKVCache::begin; the tensors are on the cache's device.
struct PagedStep {
  Tensor cu_seqlens;                // (B + 1) int64: sequence b's new tokens, back to back
  std::vector<int64_t> positions;   // (T): each new token's position in its sequence
  Tensor page_table;                // (B, pages) int64, -1 past a sequence's blocks
  std::vector<int64_t> seq_len_kv;  // (B): each sequence's length after the step
  // Every cached key's pool row (block * block_size + row), sequence after sequence, and
  // their (B + 1) offsets (as tg::sdpa_paged resolves page_table and seq_len_kv).
  Tensor kv_rows, cu_seqlens_kv;
  Tensor slots;  // (T) int64: the pool row of each new token
};

// Keeps the invariant that every block is either free or owned by exactly one sequence, and
// that a sequence owns the blocks its length needs, ceil(length / block_size) (more only
// when a step that allocated them failed before end()).
class PagedKVCache {
 public:
  // `capacity` blocks are allocated up front (zeros of `dtype` on `device`); when a step needs
  // more, the pools grow to twice the blocks (a reallocation that keeps every block's id).
  PagedKVCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t block_size,
               int64_t capacity, DType dtype, Device device);

  int64_t add_sequence();   // a new empty sequence; returns its index
  void clear(int64_t seq);  // gives the sequence's blocks back; it stays, empty
  int64_t sequences() const { return static_cast<int64_t>(pages_.size()); }
  int64_t layers() const { return static_cast<int64_t>(k_.size()); }
  int64_t length(int64_t seq) const;  // tokens cached
  int64_t block_size() const { return block_size_; }
  int64_t capacity() const;  // blocks in each pool
  int64_t blocks_in_use() const;
  int64_t bytes() const;  // the pools' memory, every layer's keys and values

  // A forward step adding new_tokens[b] tokens to sequence b (one entry per sequence):
  // allocates the blocks they need and lays out where they go. write() then stores each
  // layer's new keys and values, and end() counts the tokens in.
  PagedStep begin(const std::vector<int64_t>& new_tokens);
  // k (T, Hk, Dh) and v alike, the step's new tokens: written into layer `layer`'s pools.
  void write(int64_t layer, const PagedStep& step, const Tensor& k, const Tensor& v);
  void end(const PagedStep& step);
  const Tensor& k_pool(int64_t layer) const { return k_[static_cast<size_t>(layer)]; }
  const Tensor& v_pool(int64_t layer) const { return v_[static_cast<size_t>(layer)]; }

 private:
  int64_t take_block();  // a free block, growing the pools when there is none
  void check_sequence(int64_t seq, const char* arg) const;

  int64_t block_size_;
  std::vector<Tensor> k_, v_;                // per layer (capacity, block_size, Hk, Dh)
  std::vector<std::vector<int64_t>> pages_;  // per sequence: its blocks in order
  std::vector<int64_t> lengths_;             // per sequence: tokens cached
  std::vector<int64_t> free_;                // blocks nobody owns (taken from the back)
};

}  // namespace tg::nn
