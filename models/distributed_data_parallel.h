// Data-parallel training over tg::dist, in the manner of torch.nn.parallel.DistributedDataParallel:
// every rank holds the whole model and runs forward and backward on its own shard of the batch;
// the wrapper makes the gradients the mean over the ranks, so that one optimizer step (left as
// it is) moves every rank's parameters the same way.
//
//   tg::dist::init();
//   Transformer model(cfg, seed);
//   tg::nn::DistributedDataParallel ddp(model);  // rank 0's parameters on every rank
//   AdamW opt(model.named_parameters());
//   ... loss(model.forward(shard)).backward();     // gradients averaged over the ranks
//   opt.step();
//
// The gradients are reduced in buckets while backward is still running: a parameter's
// post-accumulate-grad hook (autograd/hooks.h) copies its gradient into its bucket, a full bucket
// starts its all-reduce (dist::all_reduce_async), and every hook lets the reductions in flight
// move on, so the reductions of the late layers overlap the backward of the early ones on
// backward's own thread (a communication thread would take the core from backward when every rank
// has one core); when backward ends it waits for the rest and writes the means back into .grad().
// CUDA buckets are reduced when backward ends (over NCCL, queued on the device's stream behind
// backward's kernels; else through host memory). Buckets follow the order gradients became final in
// the first backward (the tape's reverse order; rank 0's, so every rank agrees) and are reduced in
// that order on every rank, so the result is deterministic for a fixed world size and bitwise the
// same on every rank.
//
// Each reduction averages what the ranks' .grad() hold once backward ends, so gradient
// accumulation (several backwards before a step) gives the mean of the sums, as in one process,
// and a parameter a rank's backward did not reach contributes its .grad() there (zeros when it
// has none): after the reduction every parameter has a .grad(), zeros where no rank used it.
// In a world of one the wrapper does nothing.
#pragma once
#include <cstdint>
#include <memory>

#include "models/module.h"

namespace tg::nn {

struct DistributedDataParallelOptions {
  // Gradient bytes per bucket (one all-reduce each). 0: the model's gradient bytes / 8,
  // clamped to [64 KiB, 25 MiB], so that all but about an eighth of the reduction can overlap
  // backward.
  int64_t bucket_bytes = 0;
  // Copy rank 0's parameters to every rank at construction (different seeds would otherwise
  // train different models).
  bool broadcast_parameters = true;
  // Keep the CPU buckets in memory that the ranks of one machine share (dist::empty_shared),
  // so that the all-reduce reads the other ranks' gradients in place, without MPI's copies;
  // false sends them through MPI's messages (as across machines, where this has no effect).
  bool shared_buckets = true;
};

// What the gradient reduction of the last backward cost.
struct GradReductionStats {
  int64_t buckets = 0;
  int64_t early_buckets = 0;  // buckets handed to the all-reduce while backward was still running
  int64_t bytes = 0;
  double reduce_s = 0;  // seconds spent in the all-reduces' calls: starting, advancing, waiting
  double wait_s = 0;    // of them, at backward's end waiting for the rest: the part not hidden
};

class DistributedDataParallel {
 public:
  explicit DistributedDataParallel(Module& module, DistributedDataParallelOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Module& module() { return module_; }
  int64_t bucket_count() const;
  const GradReductionStats& last_reduction() const;

 private:
  struct Impl;
  Module& module_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tg::nn
