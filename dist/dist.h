// tg::dist: collectives across the processes of a job, for data-parallel training. CPU tensors
// go through MPI (a job started by mpirun, or srun where its variables are set); CUDA tensors
// are staged through host memory. A build without MPI (TAPEGRAD_MPI=OFF, or MPI not found)
// still has tg::dist, with a world of one process, so code written for it runs anywhere.
//
// Collectives are not recorded on the tape (they act on data, as optimizers do) and every rank
// must call the same collectives in the same order with tensors of the same shape and dtype.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tg::dist {

enum class ReduceOp : uint8_t { Sum, Mean, Max };

// How a collective waits for the other ranks. Spin: MPI's own busy wait, the lowest latency.
// Sleep: it tests for completion and sleeps between tests, leaving the core to other threads:
// for a thread that reduces beside computation on the same cores, as the communication thread
// of nn::DistributedDataParallel does.
enum class Wait : uint8_t { Spin, Sleep };

struct InitOptions {
  // Seconds one collective may wait for the other ranks before this process prints which
  // collective it was waiting in and ends the whole job (exit status 1; mpirun then stops the
  // other ranks): a rank that died or diverged never leaves the others hanging. 0 waits forever.
  double timeout_s = 300;
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

int rank();        // this process's rank; 0 before init
int world_size();  // the number of processes; 1 before init

// Waits until every rank has called it.
void barrier();
// In place, on every rank: t = op over the ranks of their t. Sum and Max take every dtype but
// bool (Max takes bool: any); Mean takes floating dtypes. 16-bit tensors are reduced in float32
// and rounded once. The result is the same on every rank, bitwise.
void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum, Wait wait = Wait::Spin);
// In place: every rank's t becomes root's.
void broadcast(Tensor& t, int root = 0);
// Every rank's t, stacked in rank order along a new first dim: (world_size, ...t's shape).
Tensor all_gather(const Tensor& t);

// Prints "[rank r] message" to stderr and ends every process of the job with `code`. For a
// rank that cannot go on: the others are stopped instead of waiting for it.
[[noreturn]] void abort(const std::string& message, int code = 1);

}  // namespace tg::dist
