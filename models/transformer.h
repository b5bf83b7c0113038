// A decoder-only transformer: token embedding, pre-norm blocks of grouped-query attention
// with RoPE (causal tg::sdpa) and a SwiGLU MLP, a final RMSNorm and the LM head.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/philox.h"
#include "models/layers.h"
#include "models/paged_cache.h"

namespace tg::nn {

struct TransformerConfig {
  int64_t vocab = 256;
  int64_t d_model = 128;
  int64_t layers = 2;
  int64_t heads = 4;     // query heads
  int64_t kv_heads = 2;  // key/value heads; heads % kv_heads == 0 (1: MQA, heads: MHA)
  int64_t ffn = 0;       // SwiGLU hidden size; 0 picks 8/3 d_model rounded up to 32
  double rope_theta = 10000.0;
  double norm_eps = 1e-6;
  double attn_dropout = 0.0;
  bool tie_weights = false;  // LM head shares the embedding table
  DType dtype = kFloat32;

  int64_t head_dim() const { return d_model / heads; }
  int64_t ffn_size() const { return ffn > 0 ? ffn : (8 * d_model / 3 + 31) / 32 * 32; }
  // Throws a [TransformerConfig] error naming the first inconsistent field.
  void validate() const;
};

// The keys and values one attention layer has seen, (B, Hk, T, Dh) each (after RoPE), for
// decoding one token at a time without recomputing the prefix.
struct LayerCache {
  Tensor k, v;
  int64_t length() const { return k.defined() ? k.size(2) : 0; }
};

// A packed batch's layout: B sequences back to back along the token dim, sequence b holding
// tokens [cu_seqlens[b], cu_seqlens[b + 1]). Attention stays within a sequence and RoPE
// positions restart at 0 at each one.
struct Packing {
  Tensor cu_seqlens;               // (B + 1) int64, on the model's device
  std::vector<int64_t> positions;  // (T): each token's position within its sequence
  int64_t max_len = 0;             // the longest sequence
  int64_t sequences() const { return static_cast<int64_t>(cu_seqlens.numel()) - 1; }
  // Checks the offsets (1-D int64, 0 first, never decreasing, `tokens` last): a
  // [Transformer] error otherwise.
  static Packing of(const Tensor& cu_seqlens, int64_t tokens, Device device);
};

// Grouped-query self-attention: Hq query heads share Hk key/value heads. The three input
// projections are one Linear (wqkv: d_model -> (Hq + 2 Hk) Dh, rows q then k then v): one
// wide GEMM instead of three, two of them only Hk Dh wide.
class Attention : public Module {
 public:
  Attention(const TransformerConfig& cfg, Generator& gen);
  // x (B, S, d_model) -> (B, S, d_model); causal. `dropout` draws the attention dropout
  // stream (used only in training mode with attn_dropout > 0). With a cache, x's tokens
  // follow the cached ones: RoPE positions start at the cache length, the new keys and
  // values are appended, the causal mask is aligned bottom-right, and there is no dropout.
  Tensor forward(const Tensor& x, Generator& dropout, LayerCache* cache = nullptr) const;
  // A packed batch: x (T, d_model) -> (T, d_model), causal within each sequence (ragged sdpa).
  Tensor forward(const Tensor& x, Generator& dropout, const Packing& packing) const;
  // Decoding through a paged cache: x (T, d_model) holds the step's new tokens (step.positions
  // say where each sits in its sequence); their keys and values go into layer `layer` of the
  // cache, then they attend to their sequence's cached tokens and themselves (causal,
  // bottom-right: the new tokens are each sequence's last). No dropout.
  Tensor forward(const Tensor& x, PagedKVCache& cache, int64_t layer, const PagedStep& step) const;

 private:
  // x (T, d_model) -> q (T, Hq, Dh), k and v (T, Hk, Dh), views of the one projection, q and k
  // rotated at each token's position (sdpa's ragged layout).
  struct TokenHeads {
    Tensor q, k, v;
  };
  TokenHeads token_heads(const Tensor& x, const std::vector<int64_t>& positions) const;

  TransformerConfig cfg_;
  std::shared_ptr<Linear> wqkv_, wo_;
};

// SwiGLU: w2(silu(w1 x) * w3 x), with w1 and w3 packed into one Linear (w13: d_model ->
// 2 hidden, gate rows then up rows) and the product done by the fused tg::swiglu.
class MLP : public Module {
 public:
  MLP(int64_t d_model, int64_t hidden, Generator& gen, double out_std, DType dtype);
  Tensor forward(const Tensor& x) const;

 private:
  std::shared_ptr<Linear> w13_, w2_;
};

// Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x)).
class Block : public Module {
 public:
  Block(const TransformerConfig& cfg, Generator& gen);
  Tensor forward(const Tensor& x, Generator& dropout, LayerCache* cache = nullptr) const;
  Tensor forward(const Tensor& x, Generator& dropout, const Packing& packing) const;
  Tensor forward(const Tensor& x, PagedKVCache& cache, int64_t layer, const PagedStep& step) const;

 private:
  Tensor mlp_residual(const Tensor& h) const;  // h + mlp(norm(h))

  std::shared_ptr<RMSNorm> attn_norm_, mlp_norm_;
  std::shared_ptr<Attention> attn_;
  std::shared_ptr<MLP> mlp_;
};

// One LayerCache per block.
struct KVCache {
  std::vector<LayerCache> layers;
  int64_t length() const { return layers.empty() ? 0 : layers.front().length(); }
};

class Transformer : public Module {
 public:
  // Weights ~ N(0, 0.02^2), residual output projections scaled by 1/sqrt(2 layers) (GPT-2).
  Transformer(const TransformerConfig& cfg, uint64_t seed);
  // ids (B, S) int64 -> logits (B, S, vocab).
  Tensor forward(const Tensor& ids, Generator& dropout) const;
  Tensor forward(const Tensor& ids) const;  // dropout from default_generator()
  // A packed batch: ids (T) int64 hold B sequences back to back, cu_seqlens (B + 1) int64 say
  // where each begins (any device); logits (T, vocab). Each token sees only the earlier
  // tokens of its own sequence, and its RoPE position counts from its sequence's start, so
  // the logits are those of each sequence run alone (and of a padded batch's real tokens).
  Tensor forward(const Tensor& ids, const Tensor& cu_seqlens, Generator& dropout) const;
  // Incremental decoding: ids (B, s) continue the tokens in `cache` (empty at first); returns
  // their logits and appends their keys and values. Runs without dropout.
  Tensor forward(const Tensor& ids, KVCache& cache) const;
  // Decoding several sequences of different lengths at once: ids (T) int64 hold each cached
  // sequence's new tokens back to back, new_tokens[b] of them for sequence b of `cache` (0 is
  // allowed); returns their logits (T, vocab) and caches their keys and values. Each token
  // sees its own sequence only, at its position in it: the logits are those of each sequence
  // run alone. Runs without dropout (the attention of tg::sdpa_paged).
  Tensor forward(const Tensor& ids, const std::vector<int64_t>& new_tokens,
                 PagedKVCache& cache) const;
  // An empty paged cache for this model (its layers, key/value heads, dtype and device):
  // blocks of `block_size` tokens, `capacity` of them allocated up front.
  PagedKVCache paged_cache(int64_t block_size, int64_t capacity) const;
  const TransformerConfig& config() const { return cfg_; }

 private:
  Tensor logits(const Tensor& h) const;  // final norm, then the LM head (or the tied table)

  TransformerConfig cfg_;
  std::shared_ptr<Embedding> embed_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<RMSNorm> norm_;
  std::shared_ptr<Linear> head_;  // null when tied
};

// Mean cross-entropy of logits (..., V) against int64 targets (...); -100 is ignored.
Tensor lm_loss(const Tensor& logits, const Tensor& targets);

}  // namespace tg::nn
