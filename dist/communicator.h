// What tg::dist asks of a message-passing engine: collectives over contiguous host buffers.
// dist.cpp validates, stages and converts tensors; an engine only moves bytes. Internal.
#pragma once
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace tg::dist::detail {

enum class HostReduce : uint8_t { Sum, Max };

// Which of the engine's two channels a nonblocking collective goes on. Collectives are matched
// across ranks in the order each rank starts them on a channel, and (MPI's rule) a blocking
// collective never matches a nonblocking one. Control carries the blocking collectives and the
// exchanges that check every collective's arguments first (all of them nonblocking, so that
// ranks calling different collectives match and learn it), in the program's call order; Data
// carries the payloads of nonblocking all-reduces, which dist.cpp starts only once their check
// has passed, in the order they were asked for.
enum class Channel : uint8_t { Control, Data };

// A nonblocking collective in flight. test() advances it (the engine moves data only inside
// its calls) and says whether it has finished; the buffer it was started on must stay alive
// and untouched until then. Destroying an unfinished one waits for it.
struct Request {
  virtual ~Request() = default;
  virtual bool test() = 0;
};

struct Communicator {
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void barrier() = 0;
  // In place over `count` elements of dtype float32, float64, int64 or bool (bool: Max only).
  virtual void all_reduce(void* data, int64_t count, DType dtype, HostReduce op) = 0;
  // The nonblocking all_reduce, in place.
  virtual std::unique_ptr<Request> start_all_reduce(void* data, int64_t count, DType dtype,
                                                    HostReduce op, Channel channel) = 0;
  // `bytes` of host memory that the other ranks can read too (an MPI shared-memory window), for
  // start_shared_all_reduce; null unless every rank runs on this machine. Collective. Kept
  // until the engine ends.
  virtual void* allocate_shared(int64_t bytes) = 0;
  // Whether [data, data + bytes) lies in memory from allocate_shared.
  virtual bool is_shared(const void* data, int64_t bytes) const = 0;
  // start_all_reduce on Channel::Data, for a buffer that is_shared on every rank (the caller
  // has checked that all agree): the ranks read each other's buffers instead of messages.
  virtual std::unique_ptr<Request> start_shared_all_reduce(void* data, int64_t count, DType dtype,
                                                           HostReduce op) = 0;
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
