// tg::dist: collectives across the processes of a job, for data-parallel training. CPU tensors
// go through MPI (a job started by mpirun, or srun where its variables are set); CUDA tensors
// through NCCL where the build has it and every rank has a GPU of its own, else staged through
// host memory over MPI (InitOptions::cuda_collectives). A build without MPI (TAPEGRAD_MPI=OFF,
// or MPI not found) still has tg::dist, with a world of one process, so code written for it
// runs anywhere.
//
// Over NCCL a collective of CUDA tensors is queued on the device's stream, like a kernel: it
// returns at once, and what reads the result later on that device sees it (host reads wait, as
// for any CUDA tensor). Every rank's CUDA collectives use one device, the one the first used.
//
// Collectives are not recorded on the tape (they act on data, as optimizers do) and every rank
// must call the same collectives in the same order with tensors of the same shape and dtype.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tg::dist {

enum class ReduceOp : uint8_t { Sum, Mean, Max };

// How collectives of CUDA tensors travel.
enum class CudaCollectives : uint8_t {
  // NCCL when this build has it (TAPEGRAD_NCCL) and no two ranks use the same GPU (NCCL takes
  // one rank per GPU); else through host memory.
  Auto,
  // NCCL; where it cannot be had, the first collective of a CUDA tensor is an error.
  Nccl,
  // Staged through host memory over MPI: a copy to the host (which waits for the device) and
  // back.
  Host,
};

struct InitOptions {
  // Seconds one collective may wait for the other ranks before this process prints which
  // collective it was waiting in and ends the whole job (exit status 1; mpirun then stops the
  // other ranks): a rank that died or diverged never leaves the others hanging. 0 waits forever.
  // (Over NCCL this covers the collective's start; the device's own wait is not watched.)
  double timeout_s = 300;
  CudaCollectives cuda_collectives = CudaCollectives::Auto;
};

// Starts the process group: every rank of the job under mpirun or srun, else a world of one.
// Call once, before any collective; a second call is an error. The group ends at exit.
void init(const InitOptions& options = {});
bool is_initialized();
// The engine behind the collectives: "mpi", or "none" for a world of one without it (a build
// without MPI, or a process that no launcher started: MPI is not started for it).
const char* backend();
// Whether this build has MPI (TAPEGRAD_MPI).
bool available();
// Whether this build has NCCL (TAPEGRAD_NCCL).
bool nccl_available();
// The engine behind collectives of CUDA tensors: "nccl" or "host", chosen at the first of them
// (the same on every rank; InitOptions::cuda_collectives); "none" until then, and in a world of
// one that no launcher started.
const char* cuda_backend();

int rank();        // this process's rank; 0 before init
int world_size();  // the number of processes; 1 before init
// This process's place among the job's processes on its machine (0 to their number - 1, in an
// order the launcher picks, not always the ranks'), from the launcher's environment (Open
// MPI's mpirun, MPICH's hydra, srun); 0 where it does not say. For choosing a GPU:
// cuda:(local_rank() % cuda_device_count()).
int local_rank();

// Waits until every rank has called it.
void barrier();
// In place, on every rank: t = op over the ranks of their t. Sum and Max take every dtype but
// bool (Max takes bool: any); Mean takes floating dtypes. 16-bit tensors are reduced in float32
// and rounded once. The result is the same on every rank, bitwise.
void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);

namespace detail {
struct PendingReduce;
}

// A collective started by all_reduce_async and not yet waited for, like the work handle of
// torch.distributed's async_op=True. Move-only. The engine moves data only inside tg::dist's
// calls, so a program that computes while a reduction is in flight calls test() now and then
// (between layers, say) to keep it going; wait() finishes it. Destroying an unfinished Work
// waits for it. Every rank must finish every Work it starts.
class Work {
 public:
  Work() = default;  // one with nothing to do: finished
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work();
  // Advances every reduction in flight in this process; true once this one has finished and
  // its tensor holds the result. Throws the collective's error (ranks that disagree on it) the
  // first time it is asked after it failed.
  bool test();
  // Until finished, under the same timeout as the blocking collectives.
  void wait();

 private:
  friend Work all_reduce_async(Tensor& t, ReduceOp op);
  explicit Work(std::shared_ptr<detail::PendingReduce> pending);
  std::shared_ptr<detail::PendingReduce> pending_;
};

// all_reduce without waiting: returns at once, and t holds the result once the Work has
// finished (until then t must not be read or written). The arguments are checked at once on
// this rank; the ranks' agreement on them (dtype, size) is checked in flight, and a
// disagreement is an error from test() or wait() on every rank. Reductions that are in flight
// together are matched across ranks in the order they were started, and independently of the
// blocking collectives called meanwhile. A CUDA tensor's reduction is all_reduce's, and the Work
// comes back finished: over NCCL it is queued on the device's stream (so it is asynchronous
// already), and through host memory the copies wait for the device anyway.
Work all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum);

// An uninitialised contiguous CPU tensor in memory that the ranks of one machine share (an MPI
// shared-memory window): all_reduce_async of such tensors, when every rank passes one, reduces
// by reading the other ranks' memory directly instead of sending it through MPI's messages
// (DistributedDataParallel's buckets live there). Collective: every rank calls it with the same
// sizes and dtype. Where the ranks do not all share one machine, and in a world of one, it is
// an ordinary tensor. The memory stays allocated until the process group ends (freeing it is a
// collective step), even once the tensor is gone: allocate few, and reuse them.
Tensor empty_shared(const Shape& sizes, DType dtype = kFloat32);

// In place: every rank's t becomes root's.
void broadcast(Tensor& t, int root = 0);
// Every rank's t, stacked in rank order along a new first dim: (world_size, ...t's shape).
Tensor all_gather(const Tensor& t);

// Prints "[rank r] message" to stderr and ends every process of the job with `code`. For a
// rank that cannot go on: the others are stopped instead of waiting for it.
[[noreturn]] void abort(const std::string& message, int code = 1);

}  // namespace tg::dist
