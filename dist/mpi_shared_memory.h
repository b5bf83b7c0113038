// All-reduces through memory that the ranks of one machine share (MPI-3 shared-memory windows):
// each rank reduces its part of the buffer reading the other ranks' buffers directly, then
// copies the parts they reduced, with three small messages to each peer ordering the steps.
// No payload goes through MPI's messages, whose large transfers on one machine cost a copy
// by the kernel (CMA) and the pinning of every page. Internal to the MPI engine.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dist/communicator.h"

namespace tg::dist::detail {

// An MPI error code as a tg::Error naming the call.
void check_mpi(int code, const char* what);

// dst = ((src[0] op src[1]) op src[2]) ... over n elements of dtype (bool as one byte), with
// two sources or more, dst being one of them or none.
void combine(char* dst, const std::vector<const char*>& src, int64_t n, DType dtype, HostReduce op);

// The job's shared-memory windows: each allocate() is one, every rank's segment of it mapped
// into every rank's address space. Only when all ranks run on one machine.
class SharedWindows {
 public:
  explicit SharedWindows(MPI_Comm world);
  // Frees the windows: collective, so only at the engine's end (never in a tensor's destructor,
  // which may run on one rank alone).
  ~SharedWindows();
  SharedWindows(const SharedWindows&) = delete;
  SharedWindows& operator=(const SharedWindows&) = delete;

  // Whether every rank of `world` shares this machine (the same answer on every rank).
  bool available() const { return node_ != MPI_COMM_NULL; }
  // This rank's segment of a new window of `bytes` per rank (64-byte aligned); collective over
  // world. Kept until the destructor.
  void* allocate(int64_t bytes);

  struct Place {
    int64_t window;
    int64_t offset;  // bytes into the rank's segment
  };
  // Where [data, data + bytes) lies in this rank's segments, if it does.
  std::optional<Place> find(const void* data, int64_t bytes) const;
  // Rank r's `bytes` at `offset` in its segment of window w, in this process's address space
  // (what rank r said of its buffer, checked against the window).
  const char* peer_buffer(int64_t w, int r, int64_t offset, int64_t bytes) const;
  MPI_Win window(int64_t w) const { return windows_[static_cast<size_t>(w)].win; }

 private:
  struct Window {
    MPI_Win win = MPI_WIN_NULL;
    std::vector<char*> segments;  // by rank
    int64_t bytes = 0;            // each rank's (empty_shared has them agree)
  };
  MPI_Comm node_ = MPI_COMM_NULL;  // world's ranks, when all of them are on this machine
  int rank_ = 0;                   // this process's, in node_ (its world rank)
  std::vector<Window> windows_;
};

// The all-reduce of `count` elements at data, which lies in a window of `windows` on every rank
// (dist.cpp has checked that all agree), on comm's point-to-point messages with tags tag0,
// tag0 + 1 and tag0 + 2. Part r of the buffer is reduced by rank r over the ranks in rank
// order, then copied by the others: the same bits on every rank, and every run.
std::unique_ptr<Request> start_shared_all_reduce_request(const SharedWindows& windows, void* data,
                                                         int64_t count, DType dtype, HostReduce op,
                                                         MPI_Comm comm, int tag0);

}  // namespace tg::dist::detail
