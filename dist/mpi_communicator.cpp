// The MPI engine of tg::dist. Calls stay on the thread that makes them (MPI_THREAD_SERIALIZED
// is all it asks for), on a duplicate of MPI_COMM_WORLD so that a program's own MPI traffic
// never matches ours; a second duplicate carries the nonblocking all-reduces' data
// (communicator.h's Channel). Errors come back as return codes and become tg::Error.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"

namespace tg::dist::detail {
namespace {

// MPI counts are int: longer buffers go in pieces of at most this many elements.
constexpr int64_t kChunk = INT_MAX / 2;

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail("dist", what, " failed: ", std::string(text, static_cast<size_t>(len)));
}

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
    check(MPI_Testall(static_cast<int>(pieces.size()), pieces.data(), &all, MPI_STATUSES_IGNORE),
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

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      owns_mpi_ = true;
    }
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    check(MPI_Comm_dup(MPI_COMM_WORLD, &data_comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(data_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int done = 0;
    MPI_Finalized(&done);
    if (done) return;
    MPI_Comm_free(&data_comm_);
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

  void all_reduce(void* data, int64_t count, DType dtype, HostReduce op) override {
    for_each_chunk(data, count, dtype, [&](void* piece, int n) {
      check(MPI_Allreduce(MPI_IN_PLACE, piece, n, mpi_type(dtype), mpi_op(op), comm_),
            "MPI_Allreduce");
    });
  }
  std::unique_ptr<Request> start_all_reduce(void* data, int64_t count, DType dtype, HostReduce op,
                                            Channel channel) override {
    auto request = std::make_unique<MpiRequest>();
    for_each_chunk(data, count, dtype, [&](void* piece, int n) {
      MPI_Request& r = request->pieces.emplace_back(MPI_REQUEST_NULL);
      check(MPI_Iallreduce(MPI_IN_PLACE, piece, n, mpi_type(dtype), mpi_op(op),
                           channel == Channel::Data ? data_comm_ : comm_, &r),
            "MPI_Iallreduce");
    });
    return request;
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (int64_t at = 0; at < bytes; at += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, bytes - at));
      check(MPI_Bcast(p + at, n, MPI_BYTE, root, comm_), "MPI_Bcast");
    }
  }
  void all_gather(const void* send, void* recv, int64_t bytes) override {
    if (bytes <= kChunk) {
      check(MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes),
                          MPI_BYTE, comm_),
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
  MPI_Comm comm_ = MPI_COMM_NULL;       // Channel::Control and the blocking collectives
  MPI_Comm data_comm_ = MPI_COMM_NULL;  // Channel::Data
  int rank_ = 0, size_ = 1;
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
