// Data-parallel training benchmark: the reference transformer of bench_train_step (global batch 16
// x 128) trained by every rank of the job on its shard, through nn::DistributedDataParallel. Rank
// 0 prints the step time and samples/s, the gradient reduction's time (in its calls, during
// backward and at its end) and the part backward's end waited for (the part not hidden), and the
// all-reduce bandwidth of tg::dist against MPI_Allreduce itself on the same bytes, whole and cut
// into the DDP's buckets.
//
// What backward's end waits for is two things: the reduction's last buckets, and, on a rank that
// finished its backward first, the other ranks' backward (the ranks' imbalance: on a noisy
// machine one core runs a few percent slower than the other for a whole run). The rank that
// finished last waits for the first alone, so each step's smallest wait over the ranks is the
// reduction's own exposed time, and the largest minus the smallest the imbalance; "hidden, last
// rank" compares the former with the time the same buckets take to reduce with nothing to hide
// behind.
//
//   bench_ddp [steps] [bucket_kb] [reduce] [shared]                (one process: the baseline)
//   mpirun -np 2 bench_ddp [steps] [bucket_kb] [reduce] [shared]   (OMP_NUM_THREADS=1)
//
// reduce 0 trains every rank's shard without DDP (no gradient crosses): the ceiling the
// machine itself sets, the processes sharing its memory bandwidth and caches. shared 0 keeps
// DDP's buckets private (DistributedDataParallelOptions::shared_buckets), so that they go
// through MPI's messages as between machines.
// bench/ddp_scaling.sh runs all three and prints the ratios.
#include <tapegrad.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#ifdef TAPEGRAD_BENCH_MPI
#include <mpi.h>
#endif

#include "bench_args.h"

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds of `reps` runs of f, all ranks starting together.
template <class F>
double timed(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps + 1; ++i) {
    tg::dist::barrier();
    const double a = now_s();
    f();
    if (i) t.push_back(now_s() - a);  // the first warms up
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  return bench::guarded_main([&] {
    tg::dist::init();
    const bench::Args args = bench::parse_args("bench_ddp", argc, argv, 4, {"cpu"});
    const int steps = args.number(0, "steps", 10), bucket_kb = args.number(1, "bucket_kb", 0);
    const bool reduce_grads = args.number(2, "reduce", 1) != 0;
    const bool shared_buckets = args.number(3, "shared", 1) != 0;
    const int rank = tg::dist::rank(), world = tg::dist::world_size();
    const bool lead = rank == 0;
    if (lead) bench::print_machine();
    const tg::nn::TransformerConfig cfg{
        .vocab = 256, .d_model = 256, .layers = 4, .heads = 8, .kv_heads = 2, .ffn = 768};
    const int64_t batch = 16, seq = 128;
    TG_CHECK(batch % world == 0, "bench_ddp", "the batch of ", batch, " does not split over ",
             world, " ranks");
    tg::nn::Transformer model(cfg, 1);
    std::optional<tg::nn::DistributedDataParallel> ddp;
    if (reduce_grads)
      ddp.emplace(model,
                  tg::nn::DistributedDataParallelOptions{.bucket_bytes = int64_t{bucket_kb} << 10,
                                                         .shared_buckets = shared_buckets});
    tg::nn::AdamW opt(model.named_parameters(), {3e-4, 0.9, 0.95, 1e-8, 0.1});
    const int64_t params = model.parameter_count();
    const double grad_mb = static_cast<double>(params) * 4 / 1e6;

    std::vector<double> step_s, forward_s, backward_s, update_s, reduce_s, wait_s;
    auto one_step = [&](int64_t step, bool record) {
      tg::Generator data{7, static_cast<uint64_t>(step) << 32};
      tg::Tensor t =
          tg::mul(tg::rand({batch, seq + 1}, data, tg::kFloat64), 255.999).to(tg::kInt64);
      const tg::nn::Batch shard =
          tg::nn::shard({t.slice(1, 0, seq), t.slice(1, 1, seq + 1)}, rank, world);
      tg::dist::barrier();  // every rank starts the step together
      const double a = now_s();
      opt.zero_grad();
      tg::Tensor loss = tg::nn::lm_loss(model.forward(shard.inputs), shard.targets);
      const double b = now_s();
      loss.backward();  // the reduction ends inside it
      const double c = now_s();
      tg::nn::clip_grad_norm(model.parameters(), 1.0);
      opt.step();
      const double d = now_s();
      if (!record) return;
      step_s.push_back(d - a);
      forward_s.push_back(b - a);
      backward_s.push_back(c - b);
      update_s.push_back(d - c);
      reduce_s.push_back(ddp ? ddp->last_reduction().reduce_s : 0.0);
      wait_s.push_back(ddp ? ddp->last_reduction().wait_s : 0.0);
    };
    for (int64_t s = 0; s < 2; ++s) one_step(s, false);  // the buckets settle after the first
    for (int64_t s = 0; s < steps; ++s) one_step(2 + s, true);
    const double step = median(step_s), reduce = median(reduce_s), wait = median(wait_s);
    // Each step's smallest and largest wait over the ranks (see the top of this file).
    std::vector<double> tail_s(wait_s.size()), imbalance_s(wait_s.size());
    if (world > 1) {
      const std::vector<double> waits =
          tg::dist::all_gather(
              tg::from_vector(wait_s, {static_cast<int64_t>(wait_s.size())}).to(tg::kFloat64))
              .to_vector<double>();
      for (size_t i = 0; i < wait_s.size(); ++i) {
        double lo = waits[i], hi = waits[i];
        for (int r = 1; r < world; ++r) {
          lo = std::min(lo, waits[r * wait_s.size() + i]);
          hi = std::max(hi, waits[r * wait_s.size() + i]);
        }
        tail_s[i] = lo;
        imbalance_s[i] = hi - lo;
      }
    }
    const double tail = median(tail_s), imbalance = median(imbalance_s);
    // Every rank's own medians: a step of DDP goes at its slowest rank's pace (on a noisy
    // machine one core may run several percent slower than the other for a whole run), which
    // shows as the faster rank's wait.
    const tg::Tensor mine = tg::from_vector(
        std::vector<double>{median(forward_s), median(backward_s), reduce, wait}, {4});
    const std::vector<double> ranks = tg::dist::all_gather(mine).to_vector<double>();
    if (lead) {
      std::printf(
          "bench_ddp: %d ranks x %d threads, %lld parameters (%.1f MB of float32 gradients), "
          "global batch %lld x %lld, %s\n",
          world, tg::get_num_threads(), static_cast<long long>(params), grad_mb,
          static_cast<long long>(batch), static_cast<long long>(seq),
          world == 1 ? "a world of one (nothing to reduce)"
          : ddp      ? (std::to_string(ddp->bucket_count()) + " buckets").c_str()
                     : "no gradient reduction (every rank on its shard alone)");
      std::printf(
          "step_ms\t%.2f\nsamples_per_s\t%.2f\nforward_ms\t%.2f\nbackward_ms\t%.2f\n"
          "clip_and_update_ms\t%.2f\t(the whole model on every rank)\n",
          step * 1e3, static_cast<double>(batch) / step, median(forward_s) * 1e3,
          median(backward_s) * 1e3, median(update_s) * 1e3);
      if (world > 1 && ddp) {
        std::printf("reduce_ms\t%.2f\t(in the reduction's calls, %.1f%% of the step)\n",
                    reduce * 1e3, 100 * reduce / step);
        std::printf(
            "exposed_ms\t%.2f\t(rank 0's backward's end waiting for it)\nhidden_pct\t%.1f\t(rank "
            "0: 1 - exposed / reduce)\n",
            wait * 1e3, 100 * std::max(0.0, 1 - wait / reduce));
        std::printf(
            "last_rank_exposed_ms\t%.3f\t(each step's smallest wait over the ranks: the "
            "reduction's own)\nimbalance_ms\t%.2f\t(each step's largest wait less its smallest: "
            "a rank waiting for another's backward)\n",
            tail * 1e3, imbalance * 1e3);
      }
      for (int r = 0; world > 1 && r < world; ++r) {
        const double* v = ranks.data() + 4 * r;
        std::printf("rank %d\tforward_ms %.1f\tbackward_ms %.1f\treduce_ms %.1f\texposed_ms %.1f\n",
                    r, v[0] * 1e3, v[1] * 1e3, v[2] * 1e3, v[3] * 1e3);
      }
    }
    if (world == 1 || !ddp) return 0;

    // All-reduce bandwidth on the gradient's bytes: tg::dist (argument checks, the rank
    // agreement exchange, in place) against MPI_Allreduce, whole and in DDP's bucket count.
    const int64_t n = params;
    tg::Tensor buf = tg::ones({n});
    const int reps = 20;
    const int64_t pieces = std::max<int64_t>(1, ddp->bucket_count());
    std::vector<tg::Tensor> parts, shared_parts;  // the latter in memory the ranks share
    for (int64_t k = 0; k < pieces; ++k) {
      const int64_t len = n / pieces + (k < n % pieces ? 1 : 0);
      parts.push_back(tg::ones({len}));
      shared_parts.push_back(tg::dist::empty_shared({len}));
      shared_parts.back().fill_(1.0);
    }
    const double ours = timed(reps, [&] { tg::dist::all_reduce(buf); });
    const double ours_parts = timed(reps, [&] {
      for (tg::Tensor& p : parts) tg::dist::all_reduce(p);
    });
    auto async_on = [&](std::vector<tg::Tensor>& buckets) {
      return timed(reps, [&] {
        std::vector<tg::dist::Work> works;
        works.reserve(buckets.size());
        for (tg::Tensor& p : buckets) works.push_back(tg::dist::all_reduce_async(p));
        for (tg::dist::Work& w : works) w.wait();
      });
    };
    const double ours_async = async_on(parts), ours_shared = async_on(shared_parts);
    // The buckets DDP used, reduced with nothing to hide behind.
    const double alone = shared_buckets ? ours_shared : ours_async;
    if (lead) {
      std::printf("allreduce_ms\ttg::dist\t%.3f\t%.2f GB/s\n", ours * 1e3, grad_mb / ours / 1e3);
      std::printf("allreduce_ms\ttg::dist in %lld buckets\t%.3f\n", static_cast<long long>(pieces),
                  ours_parts * 1e3);
      std::printf("allreduce_ms\ttg::dist in %lld buckets, all_reduce_async\t%.3f\n",
                  static_cast<long long>(pieces), ours_async * 1e3);
      std::printf(
          "allreduce_ms\ttg::dist in %lld buckets, all_reduce_async, empty_shared (DDP's)\t%.3f\n",
          static_cast<long long>(pieces), ours_shared * 1e3);
      std::printf("hidden_pct\t%.1f\t(last rank: 1 - last_rank_exposed / the %s buckets alone)\n",
                  100 * std::max(0.0, 1 - tail / alone), shared_buckets ? "shared" : "private");
    }
#ifdef TAPEGRAD_BENCH_MPI
    std::vector<float> raw(static_cast<size_t>(n), 1.0f);
    const double mpi = timed(reps, [&] {
      MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    });
    if (lead) {
      std::printf("allreduce_ms\tMPI_Allreduce\t%.3f\t%.2f GB/s\n", mpi * 1e3, grad_mb / mpi / 1e3);
      std::printf("allreduce_ratio\ttg::dist / MPI\t%.3f\n", ours / mpi);
      std::printf("allreduce_ratio\ttg::dist in buckets / MPI whole\t%.3f\n", ours_parts / mpi);
      std::printf("allreduce_ratio\ttg::dist in buckets, all_reduce_async / MPI whole\t%.3f\n",
                  ours_async / mpi);
      std::printf(
          "allreduce_ratio\ttg::dist in buckets, all_reduce_async, empty_shared (DDP's) / MPI "
          "whole\t%.3f\n",
          ours_shared / mpi);
    }
#endif
    return 0;
  });
}
