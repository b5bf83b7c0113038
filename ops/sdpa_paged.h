// SDPA over a paged key/value cache (cuDNN's paged K/V caches, vLLM's PagedAttention): keys
// and values live in fixed-size blocks of a pool, and a page table says which blocks hold each
// sequence's keys, so a decoding cache grows by a block at a time instead of being reallocated.
#pragma once
#include "ops/sdpa.h"

namespace tg {

// q (B, Hq, Sq, Dqk) as sdpa's; k_pool (N, block, Hk, Dqk) and v_pool (N, block, Hk, Dv): N
// blocks of `block` rows (FlashAttention's paged layout: a block's rows are sdpa's ragged
// (T, H, D) rows); page_table (B, P) int64: sequence b's key j sits in block
// page_table[b, j / block], row j % block; seq_len_kv (B) int64: sequence b's keys, at most
// P * block (the table's entries past them are ignored and may be anything, e.g. -1). Every
// option applies per sequence as in sdpa's ragged layout: bottom-right alignment and ALiBi to
// each sequence's own key count (decoding: the Sq new rows are each sequence's last), a mask
// broadcast to (B, Hq, Sq, max seq_len_kv), dropout indexing that padded layout. On the CPU and
// CUDA (every tensor on q's device). Differentiable: when a gradient is wanted the keys are
// gathered through the table into the ragged layout and sdpa runs, the pools' gradient flowing
// back through the gather (blocks may be shared); without one (decoding) the kernel reads the
// blocks in place, with the same numbers bitwise.
// out and stats (B, Hq, Sq, Dv / 1) as sdpa's. Ragged queries (prefill and decoding in one
// call, vLLM's chunked prefill): q (Tq, Hq, Dqk) with opts.cu_seqlens_q (B + 1 offsets), each
// sequence with its own count of new rows; out and stats then (Tq, Hq, Dv / 1). Errors name
// the argument: "[sdpa_paged] ...".
SdpaResult sdpa_paged(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                      const Tensor& page_table, const Tensor& seq_len_kv,
                      const SdpaOptions& opts = {});

}  // namespace tg
