#include "models/transformer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ops/elementwise.h"
#include "ops/host_values.h"
#include "ops/join.h"
#include "ops/linalg.h"
#include "ops/nn.h"
#include "ops/rope.h"
#include "ops/sdpa.h"
#include "ops/sdpa_check.h"

namespace tg::nn {

namespace {
constexpr double kInitStd = 0.02;
}

void TransformerConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    TG_CHECK(v > 0, "TransformerConfig", "field '", name, "' must be positive, got ", v);
  };
  positive(vocab, "vocab");
  positive(d_model, "d_model");
  positive(layers, "layers");
  positive(heads, "heads");
  positive(kv_heads, "kv_heads");
  TG_CHECK(ffn >= 0, "TransformerConfig", "field 'ffn' must be >= 0 (0 = default), got ", ffn);
  TG_CHECK(d_model % heads == 0, "TransformerConfig", "field 'd_model' (", d_model,
           ") must be divisible by 'heads' (", heads, ")");
  TG_CHECK(heads % kv_heads == 0, "TransformerConfig", "field 'heads' (", heads,
           ") must be a multiple of 'kv_heads' (", kv_heads, ")");
  TG_CHECK(head_dim() % 2 == 0, "TransformerConfig",
           "head dim d_model/heads must be even for "
           "RoPE, got ",
           head_dim());
  TG_CHECK(rope_theta > 0, "TransformerConfig", "field 'rope_theta' must be positive, got ",
           rope_theta);
  TG_CHECK(attn_dropout >= 0 && attn_dropout < 1, "TransformerConfig",
           "field 'attn_dropout' must be in [0, 1), got ", attn_dropout);
  TG_CHECK(dtype == kFloat32 || dtype == kFloat64, "TransformerConfig",
           "field 'dtype' must be float32 or float64, got ", dtype);
}

Attention::Attention(const TransformerConfig& cfg, Generator& gen) : cfg_(cfg) {
  const int64_t d = cfg.d_model, dh = cfg.head_dim();
  const double out_std = kInitStd / std::sqrt(2.0 * static_cast<double>(cfg.layers));
  wqkv_ = register_module("wqkv", std::make_shared<Linear>(d, (cfg.heads + 2 * cfg.kv_heads) * dh,
                                                           false, gen, kInitStd, cfg.dtype));
  wo_ = register_module(
      "wo", std::make_shared<Linear>(cfg.heads * dh, d, false, gen, out_std, cfg.dtype));
}

Tensor Attention::forward(const Tensor& x, Generator& dropout, LayerCache* cache) const {
  TG_CHECK(x.dim() == 3 && x.size(2) == cfg_.d_model, "Attention",
           "argument 'x' must be (batch, seq, ", cfg_.d_model, "), got ", shape_str(x.sizes()));
  const int64_t b = x.size(0), s = x.size(1), dh = cfg_.head_dim();
  RopeOptions ro;
  ro.theta = cfg_.rope_theta;
  ro.seq_dim = 1;  // (B, S, H, D)
  ro.offset = cache ? cache->length() : 0;
  // Heads are split as (B, S, H, D) views of the packed projection and handed to sdpa as
  // (B, H, S, D) strided views.
  const int64_t hq = cfg_.heads, hk = cfg_.kv_heads;
  std::vector<Tensor> qkv = split(wqkv_->forward(x).view({b, s, hq + 2 * hk, dh}), {hq, hk, hk}, 2);
  Tensor q = rope(qkv[0], ro).transpose(1, 2);
  Tensor k = rope(qkv[1], ro).transpose(1, 2);
  Tensor v = qkv[2].transpose(1, 2);
  SdpaOptions so;
  so.causal = true;
  if (cache) {
    TG_CHECK(cache->length() == 0 || cache->k.size(0) == b, "Attention", "the cache holds batch ",
             cache->length() ? cache->k.size(0) : 0, ", x has batch ", b);
    if (cache->length()) {
      k = cat({cache->k, k}, 2);
      v = cat({cache->v, v}, 2);
    }
    cache->k = k.detach();
    cache->v = v.detach();
    so.causal_align = CausalAlign::BottomRight;  // the new queries are the last positions
  }
  if (is_training() && cfg_.attn_dropout > 0 && !cache) {  // decoding: no dropout
    so.dropout_p = cfg_.attn_dropout;
    so.seed = dropout.seed;
    so.offset = dropout.take(static_cast<uint64_t>(b * cfg_.heads * s * k.size(2)));
  }
  Tensor o = sdpa(q, k, v, so).out;  // (B, Hq, S, Dh)
  return wo_->forward(o.transpose(1, 2).reshape({b, s, cfg_.heads * dh}));
}

Tensor Attention::forward(const Tensor& x, Generator& dropout, const Packing& packing) const {
  TG_CHECK(x.dim() == 2 && x.size(1) == cfg_.d_model, "Attention",
           "argument 'x' of a packed batch must be (tokens, ", cfg_.d_model, "), got ",
           shape_str(x.sizes()));
  const int64_t t = x.size(0), hq = cfg_.heads;
  const TokenHeads h = token_heads(x, packing.positions);
  SdpaOptions so;
  so.causal = true;  // per sequence; q and k share its length, so both alignments agree
  so.cu_seqlens_q = packing.cu_seqlens;
  so.cu_seqlens_kv = packing.cu_seqlens;
  if (is_training() && cfg_.attn_dropout > 0) {
    // The padded layout's element count (DESIGN §5): a packed batch drops what the same
    // batch padded to its longest sequence would.
    so.dropout_p = cfg_.attn_dropout;
    so.seed = dropout.seed;
    so.offset = dropout.take(
        static_cast<uint64_t>(packing.sequences() * hq * packing.max_len * packing.max_len));
  }
  Tensor o = sdpa(h.q, h.k, h.v, so).out;  // (T, Hq, Dh)
  return wo_->forward(o.reshape({t, hq * cfg_.head_dim()}));
}

Attention::TokenHeads Attention::token_heads(const Tensor& x,
                                             const std::vector<int64_t>& positions) const {
  const int64_t t = x.size(0), dh = cfg_.head_dim(), hq = cfg_.heads, hk = cfg_.kv_heads;
  RopeOptions ro;
  ro.theta = cfg_.rope_theta;
  ro.seq_dim = 0;  // (T, H, D)
  ro.positions = positions;
  // (T, H, D) is sdpa's ragged layout: the heads of the packed projection go in as views.
  std::vector<Tensor> qkv = split(wqkv_->forward(x).view({t, hq + 2 * hk, dh}), {hq, hk, hk}, 1);
  return {rope(qkv[0], ro), rope(qkv[1], ro), qkv[2]};
}

Tensor Attention::forward(const Tensor& x, PagedKVCache& cache, int64_t layer,
                          const PagedStep& step) const {
  const int64_t t = x.size(0), hq = cfg_.heads;
  const TokenHeads h = token_heads(x, step.positions);
  cache.write(layer, step, h.k, h.v);
  SdpaOptions so;
  so.causal = true;
  so.causal_align = CausalAlign::BottomRight;  // the new tokens are each sequence's last
  so.cu_seqlens_q = step.cu_seqlens;
  so.cu_seqlens_kv = step.cu_seqlens_kv;
  // sdpa_paged's attention on the rows the step resolved once for every layer.
  Tensor o = detail::sdpa_pool_rows(h.q, cache.k_pool(layer), cache.v_pool(layer), step.kv_rows,
                                    so)
                 .out;  // (T, Hq, Dh)
  return wo_->forward(o.reshape({t, hq * cfg_.head_dim()}));
}

MLP::MLP(int64_t d_model, int64_t hidden, Generator& gen, double out_std, DType dtype) {
  w13_ = register_module(
      "w13", std::make_shared<Linear>(d_model, 2 * hidden, false, gen, kInitStd, dtype));
  w2_ =
      register_module("w2", std::make_shared<Linear>(hidden, d_model, false, gen, out_std, dtype));
}

Tensor MLP::forward(const Tensor& x) const { return w2_->forward(swiglu(w13_->forward(x))); }

Block::Block(const TransformerConfig& cfg, Generator& gen) {
  attn_norm_ =
      register_module("attn_norm", std::make_shared<RMSNorm>(cfg.d_model, cfg.norm_eps, cfg.dtype));
  attn_ = register_module("attn", std::make_shared<Attention>(cfg, gen));
  mlp_norm_ =
      register_module("mlp_norm", std::make_shared<RMSNorm>(cfg.d_model, cfg.norm_eps, cfg.dtype));
  const double out_std = kInitStd / std::sqrt(2.0 * static_cast<double>(cfg.layers));
  mlp_ = register_module(
      "mlp", std::make_shared<MLP>(cfg.d_model, cfg.ffn_size(), gen, out_std, cfg.dtype));
}

Tensor Block::mlp_residual(const Tensor& h) const {
  return add(h, mlp_->forward(mlp_norm_->forward(h)));
}

Tensor Block::forward(const Tensor& x, Generator& dropout, LayerCache* cache) const {
  return mlp_residual(add(x, attn_->forward(attn_norm_->forward(x), dropout, cache)));
}

Tensor Block::forward(const Tensor& x, Generator& dropout, const Packing& packing) const {
  return mlp_residual(add(x, attn_->forward(attn_norm_->forward(x), dropout, packing)));
}

Tensor Block::forward(const Tensor& x, PagedKVCache& cache, int64_t layer,
                      const PagedStep& step) const {
  return mlp_residual(add(x, attn_->forward(attn_norm_->forward(x), cache, layer, step)));
}

Transformer::Transformer(const TransformerConfig& cfg, uint64_t seed) : cfg_(cfg) {
  cfg.validate();
  Generator gen{seed, 0};
  embed_ = register_module(
      "embed", std::make_shared<Embedding>(cfg.vocab, cfg.d_model, gen, kInitStd, cfg.dtype));
  for (int64_t i = 0; i < cfg.layers; ++i) {
    blocks_.push_back(
        register_module("blocks." + std::to_string(i), std::make_shared<Block>(cfg, gen)));
  }
  norm_ = register_module("norm", std::make_shared<RMSNorm>(cfg.d_model, cfg.norm_eps, cfg.dtype));
  if (!cfg.tie_weights) {
    head_ = register_module(
        "head", std::make_shared<Linear>(cfg.d_model, cfg.vocab, false, gen, kInitStd, cfg.dtype));
  }
}

namespace {
// A tensor's shape and dtype for an error message ("(undefined)" when it has none).
std::string described(const Tensor& t) {
  return t.defined() ? shape_str(t.sizes()) + " " + std::string(dtype_name(t.dtype()))
                     : std::string("(undefined)");
}

void check_ids(const Tensor& ids) {
  TG_CHECK(ids.defined() && ids.dim() == 2 && ids.dtype() == kInt64, "Transformer",
           "argument 'ids' must be int64 (batch, seq), got ", described(ids));
}

// ids (T) int64 of sequences back to back: `what` names the batch in the error.
void check_token_ids(const Tensor& ids, const char* what) {
  TG_CHECK(ids.defined() && ids.dim() == 1 && ids.dtype() == kInt64, "Transformer",
           "argument 'ids' of ", what, " must be int64 (tokens), got ", described(ids));
}
}  // namespace

Tensor Transformer::forward(const Tensor& ids, Generator& dropout) const {
  check_ids(ids);
  Tensor h = embed_->forward(ids);
  for (const auto& block : blocks_) h = block->forward(h, dropout);
  return logits(h);
}

Packing Packing::of(const Tensor& cu_seqlens, int64_t tokens, Device device) {
  TG_CHECK(cu_seqlens.defined() && cu_seqlens.dim() == 1 && cu_seqlens.numel() >= 1 &&
               cu_seqlens.dtype() == kInt64,
           "Transformer", "argument 'cu_seqlens' must be 1-D int64 with B + 1 offsets, got ",
           described(cu_seqlens));
  const std::vector<int64_t> cu = detail::host_int64(cu_seqlens);
  TG_CHECK(cu.front() == 0 && cu.back() == tokens, "Transformer",
           "argument 'cu_seqlens' must run from 0 to the ", tokens, " tokens of 'ids', got ",
           cu.front(), " to ", cu.back());
  Packing p;
  p.positions.reserve(static_cast<size_t>(tokens));
  for (size_t b = 1; b < cu.size(); ++b) {
    TG_CHECK(cu[b] >= cu[b - 1], "Transformer", "argument 'cu_seqlens' must not decrease, got ",
             cu[b - 1], " then ", cu[b], " at index ", b);
    p.max_len = std::max(p.max_len, cu[b] - cu[b - 1]);
    for (int64_t i = 0; i < cu[b] - cu[b - 1]; ++i) p.positions.push_back(i);
  }
  // Every layer's sdpa checks the offsets on the host: a copy sent to a GPU keeps its values
  // there (ops/host_values.h), and one already there was read through host_int64 above.
  p.cu_seqlens = cu_seqlens.device() == device
                     ? cu_seqlens
                     : detail::int64_to_device(cu, cu_seqlens.sizes(), device);
  return p;
}

Tensor Transformer::forward(const Tensor& ids, const Tensor& cu_seqlens, Generator& dropout) const {
  check_token_ids(ids, "a packed batch");
  const Packing packing = Packing::of(cu_seqlens, ids.size(0), device());
  Tensor h = embed_->forward(ids);
  for (const auto& block : blocks_) h = block->forward(h, dropout, packing);
  return logits(h);
}

Tensor Transformer::logits(const Tensor& h) const {
  Tensor n = norm_->forward(h);
  return head_ ? head_->forward(n) : matmul(n, embed_->weight.transpose(0, 1));
}

Tensor Transformer::forward(const Tensor& ids) const { return forward(ids, default_generator()); }

Tensor Transformer::forward(const Tensor& ids, KVCache& cache) const {
  check_ids(ids);
  if (cache.layers.empty()) cache.layers.resize(blocks_.size());
  TG_CHECK(cache.layers.size() == blocks_.size(), "Transformer", "the cache has ",
           cache.layers.size(), " layers, the model ", blocks_.size());
  Generator unused{0, 0};  // attention runs without dropout on the cached path
  Tensor h = embed_->forward(ids);
  for (size_t i = 0; i < blocks_.size(); ++i) h = blocks_[i]->forward(h, unused, &cache.layers[i]);
  return logits(h);
}

PagedKVCache Transformer::paged_cache(int64_t block_size, int64_t capacity) const {
  return {cfg_.layers, cfg_.kv_heads, cfg_.head_dim(), block_size, capacity, cfg_.dtype, device()};
}

Tensor Transformer::forward(const Tensor& ids, const std::vector<int64_t>& new_tokens,
                            PagedKVCache& cache) const {
  check_token_ids(ids, "a paged decoding step");
  const Tensor& pool = cache.k_pool(0);
  TG_CHECK(cache.layers() == cfg_.layers && pool.size(2) == cfg_.kv_heads &&
               pool.size(3) == cfg_.head_dim() && pool.dtype() == cfg_.dtype &&
               pool.device() == device(),
           "Transformer", "the paged cache does not fit the model: ", cache.layers(),
           " layers of blocks ", shape_str(pool.sizes()), " ", dtype_name(pool.dtype()), " on ",
           pool.device(), ", the model wants ", cfg_.layers, " layers of (blocks, block, ",
           cfg_.kv_heads, ", ", cfg_.head_dim(), ") ", dtype_name(cfg_.dtype), " on ", device(),
           " (Transformer::paged_cache makes one that fits)");
  int64_t total = 0;
  for (int64_t n : new_tokens) total += n;
  TG_CHECK(total == ids.size(0), "Transformer", "argument 'new_tokens' must add up to the ",
           ids.size(0), " tokens of 'ids', got ", total);
  const PagedStep step = cache.begin(new_tokens);
  Tensor h = embed_->forward(ids);
  for (size_t i = 0; i < blocks_.size(); ++i)
    h = blocks_[i]->forward(h, cache, static_cast<int64_t>(i), step);
  cache.end(step);
  return logits(h);
}

Tensor lm_loss(const Tensor& logits, const Tensor& targets) {
  const int64_t v = logits.sizes().back();
  return cross_entropy(logits.reshape({-1, v}), targets.reshape({-1}));
}

}  // namespace tg::nn
