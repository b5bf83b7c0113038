// What tg::dist asks of an engine for CUDA tensors: collectives over contiguous buffers in one
// device's memory, queued on that device's stream (backends/cuda), so that they run after the
// kernels that wrote the buffer and before those that read it, and the host does not wait.
// dist.cpp validates and converts tensors; an engine only moves bytes. Internal.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "dist/communicator.h"

namespace tg::dist::detail {

struct DeviceCommunicator {
  virtual ~DeviceCommunicator() = default;
  virtual int device() const = 0;  // the CUDA device index it was made for
  // In place over `count` elements of dtype float32, float64, int64 or bool (bool: Max only).
  virtual void all_reduce(void* data, int64_t count, DType dtype, HostReduce op) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // recv (size() * bytes) receives every rank's `bytes` from send, in rank order.
  virtual void all_gather(const void* send, void* recv, int64_t bytes) = 0;
};

// Whether this build has NCCL (TAPEGRAD_NCCL).
bool nccl_built();

// Two ranks whose CUDA device `device` is the same GPU (NCCL takes one rank per GPU), from the
// devices' UUIDs gathered over `host`; none when every rank has a GPU of its own. Collective.
std::optional<std::pair<int, int>> ranks_sharing_a_gpu(Communicator& host, int device);

// NCCL over `host`'s ranks on CUDA device `device`: rank 0 makes NCCL's unique id and `host`
// broadcasts it. Collective. Throws (no NCCL in this build, or NCCL's own error).
std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Communicator& host, int device);

}  // namespace tg::dist::detail
