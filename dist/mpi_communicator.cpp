// The MPI engine of tg::dist. Calls stay on the thread that makes them (MPI_THREAD_SERIALIZED
// is all it asks for), on a duplicate of MPI_COMM_WORLD so that a program's own MPI traffic
// never matches ours. Errors come back as return codes and become tg::Error.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "core/error.h"
#include "dist/communicator.h"

namespace tg::dist::detail {
namespace {

// MPI counts are int: longer buffers go in pieces of at most this many elements.
constexpr int64_t kChunk = INT_MAX / 2;
// How long a sleeping wait sleeps between tests (the kernel's timer slack adds ~50 us).
constexpr std::chrono::microseconds kPoll{20};

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail("dist", what, " failed: ", std::string(text, static_cast<size_t>(len)));
}

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
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int done = 0;
    MPI_Finalized(&done);
    if (done) return;
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

  void all_reduce(void* data, int64_t count, DType dtype, HostReduce op, bool sleep) override {
    const MPI_Datatype type = mpi_type(dtype);
    const MPI_Op mop = op == HostReduce::Max ? MPI_MAX : MPI_SUM;
    auto* bytes = static_cast<char*>(data);
    const int64_t size = static_cast<int64_t>(dtype_size(dtype));
    // The analyzer wants an MPI_Wait for each MPI_Iallreduce; the MPI_Test that reports
    // completion frees the request instead.
    // NOLINTBEGIN(clang-analyzer-optin.mpi.MPI-Checker)
    for (int64_t at = 0; at < count; at += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, count - at));
      if (!sleep) {
        check(MPI_Allreduce(MPI_IN_PLACE, bytes + at * size, n, type, mop, comm_), "MPI_Allreduce");
        continue;
      }
      // The nonblocking form, tested until done; every test advances it.
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Iallreduce(MPI_IN_PLACE, bytes + at * size, n, type, mop, comm_, &request),
            "MPI_Iallreduce");
      for (int done = 0;;) {
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) break;
        std::this_thread::sleep_for(kPoll);
      }
    }
    // NOLINTEND(clang-analyzer-optin.mpi.MPI-Checker)
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
  MPI_Comm comm_ = MPI_COMM_NULL;
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
