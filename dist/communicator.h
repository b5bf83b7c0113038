// What tg::dist asks of a message-passing engine: collectives over contiguous host buffers.
// dist.cpp validates, stages and converts tensors; an engine only moves bytes. Internal.
#pragma once
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace tg::dist::detail {

enum class HostReduce : uint8_t { Sum, Max };

struct Communicator {
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void barrier() = 0;
  // In place over `count` elements of dtype float32, float64, int64 or bool (bool: Max only).
  // sleep: wait by testing for completion and sleeping in between, not by MPI's busy wait.
  virtual void all_reduce(void* data, int64_t count, DType dtype, HostReduce op, bool sleep) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // recv (size() * bytes) receives every rank's `bytes` from send, in rank order.
  virtual void all_gather(const void* send, void* recv, int64_t bytes) = 0;
  [[noreturn]] virtual void abort(int code) = 0;
};

// The MPI engine (MPI_COMM_WORLD, initialised here unless the program did it); null in a build
// without MPI, and for a process that no launcher started and that has not initialised MPI
// itself (a world of one: starting MPI alone would cost time and, in Open MPI, a daemon).
std::unique_ptr<Communicator> make_mpi_communicator();

// Whether a launcher (mpirun, mpiexec, srun) started this process, from its environment.
bool started_by_launcher();

}  // namespace tg::dist::detail
