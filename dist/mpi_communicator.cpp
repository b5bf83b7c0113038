// The MPI engine of tg::dist. Calls stay on the thread that makes them (MPI_THREAD_SERIALIZED
// is all it asks for), on a duplicate of MPI_COMM_WORLD so that a program's own MPI traffic
// never matches ours; a second duplicate carries the nonblocking all-reduces' data, as
// point-to-point messages round a ring (communicator.h's Channel, RingRequest below), or, for
// buffers in shared memory, the messages that order the ranks' reads of each other's buffers
// (mpi_shared_memory.h). Errors come back as return codes and become tg::Error.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/mpi_shared_memory.h"

namespace tg::dist::detail {
namespace {

// MPI counts are int: longer buffers go in pieces of at most this many elements.
constexpr int64_t kChunk = INT_MAX / 2;

MPI_Op mpi_op(HostReduce op) { return op == HostReduce::Max ? MPI_MAX : MPI_SUM; }

// fn(piece, n) over `count` elements of dtype at data, in pieces of at most kChunk elements.
template <class F>
void for_each_chunk(void* data, int64_t count, DType dtype, F&& fn) {
  auto* bytes = static_cast<char*>(data);
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t at = 0; at < count; at += kChunk)
    fn(bytes + at * size, static_cast<int>(std::min(kChunk, count - at)));
}

// The pieces of one nonblocking collective (one per kChunk elements). MPI_Testall frees them
// once all are done; until then the destructor waits, so no buffer is freed under MPI.
// NOLINTBEGIN(clang-analyzer-optin.mpi.MPI-Checker): completed by MPI_Testall or MPI_Waitall
struct MpiRequest final : Request {
  std::vector<MPI_Request> pieces;
  bool done = false;
  MpiRequest() = default;
  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;
  ~MpiRequest() override {
    if (!done) MPI_Waitall(static_cast<int>(pieces.size()), pieces.data(), MPI_STATUSES_IGNORE);
  }
  bool test() override {
    if (done) return true;
    int all = 0;
    check_mpi(
        MPI_Testall(static_cast<int>(pieces.size()), pieces.data(), &all, MPI_STATUSES_IGNORE),
        "MPI_Testall");
    done = all != 0;
    return done;
  }
};
// NOLINTEND(clang-analyzer-optin.mpi.MPI-Checker)

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case kFloat32:
      return MPI_FLOAT;
    case kFloat64:
      return MPI_DOUBLE;
    case kInt64:
      return MPI_INT64_T;
    case kBool:
      return MPI_UINT8_T;  // one byte, 0 or 1: Max is "any"
    case kBFloat16:
    case kFloat16:
      break;
  }
  fail("dist", "no MPI datatype for ", dtype);
}

// Receive buffers for the ring's reduce-scatter steps, kept from one reduction to the next. A
// fresh buffer for each reduction cost a zero fill and a page fault for each of its pages, every
// step of training (glibc maps buffers this large anew each time): perf put the fill, the
// faults and the unmapping at over a fifth of rank 0's samples in a loop of DDP's nine buckets.
// Idle buffers beyond kKeepBytes are freed. Its users hold the collective lock of dist.cpp.
class ScratchPool {
 public:
  struct Buffer {
    std::unique_ptr<char[]> data;
    int64_t bytes = 0;
  };
  // The smallest idle buffer of at least `bytes`, or a new one (left uninitialised).
  Buffer take(int64_t bytes) {
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it)
      if (it->bytes >= bytes && (best == idle_.end() || it->bytes < best->bytes)) best = it;
    if (best == idle_.end())
      return {std::make_unique_for_overwrite<char[]>(static_cast<size_t>(bytes)), bytes};
    Buffer b = std::move(*best);
    idle_.erase(best);
    idle_bytes_ -= b.bytes;
    return b;
  }
  void give(Buffer b) {
    if (!b.data || idle_bytes_ + b.bytes > kKeepBytes) return;  // freed here
    idle_bytes_ += b.bytes;
    idle_.push_back(std::move(b));
  }

 private:
  static constexpr int64_t kKeepBytes = int64_t{64} << 20;
  std::vector<Buffer> idle_;
  int64_t idle_bytes_ = 0;
};

// A nonblocking all-reduce as a ring of point-to-point messages: the buffer in size() parts, a
// reduce-scatter (size() - 1 steps, each sending one part to the next rank and adding the one
// that comes from the previous rank), then an all-gather of the reduced parts (size() - 1 more).
// On nine buckets of a 12.6 MB gradient, two ranks of one machine, Open MPI's MPI_Iallreduce
// (its libnbc component) took 2.4 ms and this 1.8-2.2, against 1.6-1.9 for one blocking
// MPI_Allreduce of the same bytes (docs/PERFORMANCE.md, "The nonblocking all-reduce"); DDP's
// buckets, in shared memory on one machine, take mpi_shared_memory.cpp's path instead.
// Each part is reduced by one rank in a fixed order and copied to the others, so every rank
// gets the same bits, the same every run for a given world size. Messages carry the tag of
// their reduction's sequence number and step: reductions in flight together may advance in
// different orders on different ranks. Longer buffers than an MPI count go a piece at a time.
// NOLINTBEGIN(clang-analyzer-optin.mpi.MPI-Checker): completed by MPI_Testall or MPI_Waitall
struct RingRequest final : Request {
  char* data;
  int64_t count, size;  // elements, and their bytes
  DType dtype;
  HostReduce op;
  MPI_Comm comm;
  int rank, ranks, tag0;
  int64_t piece0 = 0;  // the piece [piece0, piece0 + kChunk * ranks) in flight
  int step = 0;        // of the piece: 2 * (ranks - 1) in all
  ScratchPool& pool;
  ScratchPool::Buffer scratch;  // from pool, for as long as the reduction runs
  int scattered = -1;  // during a reduce-scatter step, the part whose peer's copy is in scratch
  MPI_Request pending[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  bool done = false;

  RingRequest(void* d, int64_t n, DType t, HostReduce o, MPI_Comm c, int r, int world, int tag,
              ScratchPool& scratch_pool)
      : data(static_cast<char*>(d)),
        count(n),
        size(static_cast<int64_t>(dtype_size(t))),
        dtype(t),
        op(o),
        comm(c),
        rank(r),
        ranks(world),
        tag0(tag),
        pool(scratch_pool) {
    // Big enough for any part: the first piece's are the largest.
    if (ranks > 1) scratch = pool.take((piece_count() + ranks - 1) / ranks * size);
    post();
  }
  RingRequest(const RingRequest&) = delete;
  RingRequest& operator=(const RingRequest&) = delete;
  ~RingRequest() override {
    try {
      while (!test()) MPI_Waitall(2, pending, MPI_STATUSES_IGNORE);
    } catch (...) {  // MPI failed under it: nothing left to wait for that could finish
    }
    pool.give(std::move(scratch));
  }
  // Part k of the piece in flight: its first element and its length.
  int64_t piece_count() const { return std::min(kChunk * ranks, count - piece0); }
  int64_t part_at(int k) const { return piece0 + piece_count() * k / ranks; }
  int part_count(int k) const { return static_cast<int>(part_at(k + 1) - part_at(k)); }
  static int mod(int a, int n) { return ((a % n) + n) % n; }

  // Posts the current step's send to the next rank and receive from the previous one, or
  // finishes when the whole buffer has gone round.
  void post() {
    if (ranks == 1) {  // nothing to exchange
      done = true;
      return;
    }
    if (step == 2 * (ranks - 1)) {  // this piece has gone round: the next one, if any
      piece0 += piece_count();
      step = 0;
      if (piece0 >= count) {
        done = true;
        pool.give(std::move(scratch));
        return;
      }
    }
    const int next = mod(rank + 1, ranks), prev = mod(rank - 1, ranks);
    const bool scatter = step < ranks - 1;
    const int s = scatter ? step : step - (ranks - 1);
    // Reduce-scatter: send part rank - s, receive part rank - s - 1 (into scratch, then added
    // to ours). All-gather: send the reduced part rank + 1 - s, receive part rank - s in place.
    const int out = scatter ? mod(rank - s, ranks) : mod(rank + 1 - s, ranks);
    const int in = scatter ? mod(rank - s - 1, ranks) : mod(rank - s, ranks);
    char* in_at = data + part_at(in) * size;
    scattered = scatter ? in : -1;
    if (scatter) in_at = scratch.data.get();
    const int tag = tag0 + step;
    check_mpi(MPI_Irecv(in_at, part_count(in), mpi_type(dtype), prev, tag, comm, &pending[0]),
              "MPI_Irecv");
    check_mpi(MPI_Isend(data + part_at(out) * size, part_count(out), mpi_type(dtype), next, tag,
                        comm, &pending[1]),
              "MPI_Isend");
  }
  bool test() override {
    while (!done) {
      int both = 0;
      check_mpi(MPI_Testall(2, pending, &both, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (!both) return false;
      if (scattered >= 0) {  // the received part, added to ours
        char* mine = data + part_at(scattered) * size;
        combine(mine, {mine, scratch.data.get()}, part_count(scattered), dtype, op);
      }
      ++step;
      post();
    }
    return true;
  }
};
// NOLINTEND(clang-analyzer-optin.mpi.MPI-Checker)

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
                "MPI_Init_thread");
      owns_mpi_ = true;
    }
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &data_comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(data_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int* ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(data_comm_, MPI_TAG_UB, &ub, &found);
    tag_ub_ = found && ub ? *ub : 32767;  // the least the standard allows
    shared_ = std::make_unique<SharedWindows>(data_comm_);
  }
  ~MpiCommunicator() override {
    int done = 0;
    MPI_Finalized(&done);
    if (done) return;
    shared_.reset();
    MPI_Comm_free(&data_comm_);
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override { check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); }

  void all_reduce(void* data, int64_t count, DType dtype, HostReduce op) override {
    for_each_chunk(data, count, dtype, [&](void* piece, int n) {
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, piece, n, mpi_type(dtype), mpi_op(op), comm_),
                "MPI_Allreduce");
    });
  }
  std::unique_ptr<Request> start_all_reduce(void* data, int64_t count, DType dtype, HostReduce op,
                                            Channel channel) override {
    if (channel == Channel::Data) {
      return std::make_unique<RingRequest>(data, count, dtype, op, data_comm_, rank_, size_,
                                           next_data_tag(), scratch_);
    }
    // Control: the small agreement exchanges, as one of MPI's nonblocking collectives.
    auto request = std::make_unique<MpiRequest>();
    for_each_chunk(data, count, dtype, [&](void* piece, int n) {
      MPI_Request& r = request->pieces.emplace_back(MPI_REQUEST_NULL);
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, piece, n, mpi_type(dtype), mpi_op(op), comm_, &r),
                "MPI_Iallreduce");
    });
    return request;
  }
  void* allocate_shared(int64_t bytes) override { return shared_->allocate(bytes); }
  bool is_shared(const void* data, int64_t bytes) const override {
    return shared_->find(data, bytes).has_value();
  }
  std::unique_ptr<Request> start_shared_all_reduce(void* data, int64_t count, DType dtype,
                                                   HostReduce op) override {
    return start_shared_all_reduce_request(*shared_, data, count, dtype, op, data_comm_,
                                           next_data_tag());
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (int64_t at = 0; at < bytes; at += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, bytes - at));
      check_mpi(MPI_Bcast(p + at, n, MPI_BYTE, root, comm_), "MPI_Bcast");
    }
  }
  void all_gather(const void* send, void* recv, int64_t bytes) override {
    if (bytes <= kChunk) {
      check_mpi(MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv,
                              static_cast<int>(bytes), MPI_BYTE, comm_),
                "MPI_Allgather");
      return;
    }
    // Longer: one broadcast per rank, straight into its place.
    auto* out = static_cast<char*>(recv);
    std::copy_n(static_cast<const char*>(send), bytes, out + rank_ * bytes);
    for (int r = 0; r < size_; ++r) broadcast(out + r * bytes, bytes, r);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(comm_, code);
    std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

 private:
  // The first of the tags of the next Channel::Data reduction: every kind takes at most `steps`
  // (the ring's 2 (size - 1) steps, the shared-memory reduction's 3), cycling through what
  // MPI_TAG_UB leaves room for.
  int next_data_tag() {
    const int steps = std::max(3, 2 * (size_ - 1));
    return static_cast<int>(data_sequence_++ % std::max(1, tag_ub_ / steps)) * steps;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;       // Channel::Control and the blocking collectives
  MPI_Comm data_comm_ = MPI_COMM_NULL;  // Channel::Data
  int rank_ = 0, size_ = 1;
  int tag_ub_ = 32767;
  int64_t data_sequence_ = 0;  // Channel::Data all-reduces started: the same count on every rank
  ScratchPool scratch_;        // the rings' receive buffers; outlives them (see Request)
  std::unique_ptr<SharedWindows> shared_;  // freed before the communicators
  bool owns_mpi_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  int ready = 0;
  MPI_Initialized(&ready);
  if (!ready && !started_by_launcher()) return nullptr;
  return std::make_unique<MpiCommunicator>();
}

}  // namespace tg::dist::detail
