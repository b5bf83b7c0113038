#include "dist/mpi_shared_memory.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace tg::dist::detail {

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail("dist", what, " failed: ", std::string(text, static_cast<size_t>(len)));
}

SharedWindows::SharedWindows(MPI_Comm world) {
  int rank = 0, size = 0;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  MPI_Comm node = MPI_COMM_NULL;
  // Keyed by world rank: a rank's place in `node` is its world rank when all are here.
  check_mpi(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  int here = 0;
  MPI_Comm_size(node, &here);
  if (here == size) {  // every rank reads the same: all here, or none has all
    node_ = node;
    rank_ = rank;
    MPI_Comm_set_errhandler(node_, MPI_ERRORS_RETURN);
  } else {
    MPI_Comm_free(&node);
  }
}

SharedWindows::~SharedWindows() {
  for (Window& w : windows_) {
    MPI_Win_unlock_all(w.win);
    MPI_Win_free(&w.win);
  }
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
}

void* SharedWindows::allocate(int64_t bytes) {
  if (!available()) return nullptr;
  // Whole pages: every segment starts on one (64-byte alignment for the kernels) and no two
  // ranks' segments share a cache line.
  constexpr int64_t kPage = 4096;
  Window w;
  w.bytes = std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each segment near its rank
  char* mine = nullptr;
  const int code =
      MPI_Win_allocate_shared(static_cast<MPI_Aint>(w.bytes), 1, info, node_, &mine, &w.win);
  MPI_Info_free(&info);
  check_mpi(code, "MPI_Win_allocate_shared");
  MPI_Win_set_errhandler(w.win, MPI_ERRORS_RETURN);
  // One passive epoch for the window's life: MPI_Win_sync then orders this rank's loads and
  // stores around the messages that say when the others may read.
  check_mpi(MPI_Win_lock_all(MPI_MODE_NOCHECK, w.win), "MPI_Win_lock_all");
  int size = 0;
  MPI_Comm_size(node_, &size);
  for (int r = 0; r < size; ++r) {
    MPI_Aint seg_bytes = 0;
    int unit = 0;
    void* at = nullptr;
    check_mpi(MPI_Win_shared_query(w.win, r, &seg_bytes, &unit, &at), "MPI_Win_shared_query");
    w.segments.push_back(static_cast<char*>(at));
  }
  windows_.push_back(std::move(w));
  return mine;
}

std::optional<SharedWindows::Place> SharedWindows::find(const void* data, int64_t bytes) const {
  if (!available()) return std::nullopt;
  const char* p = static_cast<const char*>(data);
  for (size_t w = 0; w < windows_.size(); ++w) {
    const char* mine = windows_[w].segments[static_cast<size_t>(rank_)];
    if (p >= mine && p + bytes <= mine + windows_[w].bytes)
      return Place{static_cast<int64_t>(w), p - mine};
  }
  return std::nullopt;
}

const char* SharedWindows::peer_buffer(int64_t w, int r, int64_t offset, int64_t bytes) const {
  const bool fits = w >= 0 && w < static_cast<int64_t>(windows_.size()) && offset >= 0 &&
                    offset + bytes <= windows_[static_cast<size_t>(w)].bytes;
  if (!fits) fail("dist", "internal: rank ", r, " named a buffer outside its shared windows");
  return windows_[static_cast<size_t>(w)].segments[static_cast<size_t>(r)] + offset;
}

namespace {

// dst = ((src[0] op src[1]) op src[2]) ... over n elements, a block at a time so that the
// partial results stay in L1. dst may be one of the sources: with two, each element is read before
// it is written; with more, the block is summed aside first.
template <class T>
void combine_typed(char* dst_bytes, const std::vector<const char*>& src, int64_t n, HostReduce op) {
  constexpr int64_t kBlock = 2048;
  T* dst = reinterpret_cast<T*>(dst_bytes);
  auto apply = [op](T a, T b) { return op == HostReduce::Max ? std::max(a, b) : T(a + b); };
  std::vector<T> aside(src.size() > 2 ? kBlock : 0);
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t len = std::min(kBlock, n - at);
    T* out = src.size() > 2 ? aside.data() : dst + at;
    const T* a = reinterpret_cast<const T*>(src[0]) + at;
    const T* b = reinterpret_cast<const T*>(src[1]) + at;
    for (int64_t i = 0; i < len; ++i) out[i] = apply(a[i], b[i]);
    for (size_t s = 2; s < src.size(); ++s) {
      const T* c = reinterpret_cast<const T*>(src[s]) + at;
      for (int64_t i = 0; i < len; ++i) out[i] = apply(out[i], c[i]);
    }
    if (out != dst + at) std::copy_n(out, len, dst + at);
  }
}

}  // namespace

void combine(char* dst, const std::vector<const char*>& src, int64_t n, DType dtype,
             HostReduce op) {
  switch (dtype) {
    case kFloat32:
      return combine_typed<float>(dst, src, n, op);
    case kFloat64:
      return combine_typed<double>(dst, src, n, op);
    case kInt64:
      return combine_typed<int64_t>(dst, src, n, op);
    case kBool:
      return combine_typed<uint8_t>(dst, src, n, op);  // one byte, 0 or 1: Max is "any"
    case kBFloat16:
    case kFloat16:
      break;
  }
  fail("dist", "no host reduction for ", dtype);
}

namespace {

// The steps, each ended by a message to and from every peer (tag0 + step):
//   0. where this rank's buffer is (its window and offset): the others may read it from now on;
//   1. part `rank` reduced in place: the others may copy it;
//   2. the others' parts copied: nobody reads this rank's buffer any more, the caller may.
// NOLINTBEGIN(clang-analyzer-optin.mpi.MPI-Checker): completed by MPI_Testall or MPI_Waitall
struct SharedRequest final : Request {
  const SharedWindows& windows;
  char* data;
  int64_t count, size;  // elements, and their bytes
  DType dtype;
  HostReduce op;
  MPI_Comm comm;
  int rank = 0, ranks = 1, tag0;
  int step = 0;
  bool done = false;
  int64_t where[2] = {0, 0};          // this rank's window and offset, sent to every peer
  std::vector<int64_t> peer_where;    // 2 per rank
  std::vector<const char*> buffers;   // every rank's, in this address space
  std::vector<MPI_Win> windows_used;  // this rank's, then the peers' (repeats do no harm)
  std::vector<MPI_Request> pending;

  SharedRequest(const SharedWindows& w, void* d, int64_t n, DType t, HostReduce o, MPI_Comm c,
                int tag)
      : windows(w),
        data(static_cast<char*>(d)),
        count(n),
        size(static_cast<int64_t>(dtype_size(t))),
        dtype(t),
        op(o),
        comm(c),
        tag0(tag) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    const std::optional<SharedWindows::Place> place = windows.find(data, count * size);
    if (!place)
      fail("dist", "internal: a shared-memory all-reduce of a buffer outside the windows");
    where[0] = place->window;
    where[1] = place->offset;
    peer_where.assign(2 * static_cast<size_t>(ranks), 0);
    windows_used.push_back(windows.window(where[0]));
    sync();  // this rank's writes to its buffer, before the others read it
    post(where, 2);
  }
  SharedRequest(const SharedRequest&) = delete;
  SharedRequest& operator=(const SharedRequest&) = delete;
  ~SharedRequest() override {
    try {
      while (!test())
        MPI_Waitall(static_cast<int>(pending.size()), pending.data(), MPI_STATUSES_IGNORE);
    } catch (...) {  // MPI failed under it: nothing left to wait for that could finish
    }
  }

  int64_t part_at(int k) const { return count * k / ranks; }

  // This step's message to every peer (`n` int64 at `out`; step 0's into peer_where) and theirs.
  void post(const int64_t* out, int n) {
    pending.assign(2 * static_cast<size_t>(ranks - 1), MPI_REQUEST_NULL);
    size_t i = 0;
    for (int q = 0; q < ranks; ++q) {
      if (q == rank) continue;
      check_mpi(MPI_Irecv(n ? &peer_where[2 * static_cast<size_t>(q)] : nullptr, n, MPI_INT64_T, q,
                          tag0 + step, comm, &pending[i++]),
                "MPI_Irecv");
      check_mpi(MPI_Isend(out, n, MPI_INT64_T, q, tag0 + step, comm, &pending[i++]), "MPI_Isend");
    }
  }

  // Every rank's buffer from where they said it is; their loads ordered after their messages.
  void locate() {
    buffers.assign(static_cast<size_t>(ranks), nullptr);
    windows_used.resize(1);
    for (int q = 0; q < ranks; ++q) {
      if (q == rank) {
        buffers[static_cast<size_t>(q)] = data;
        continue;
      }
      const int64_t w = peer_where[2 * static_cast<size_t>(q)];
      const int64_t offset = peer_where[2 * static_cast<size_t>(q) + 1];
      buffers[static_cast<size_t>(q)] = windows.peer_buffer(w, q, offset, count * size);
      windows_used.push_back(windows.window(w));
    }
  }

  // A memory barrier for every window this reduction touches: the stores before it are seen
  // by a peer that has the next message, and the loads after it see the stores a peer made
  // before its message (MPI's unified model, one passive epoch per window).
  void sync() {
    for (MPI_Win w : windows_used) MPI_Win_sync(w);
  }

  bool test() override {
    while (!done) {
      int all = 0;
      check_mpi(
          MPI_Testall(static_cast<int>(pending.size()), pending.data(), &all, MPI_STATUSES_IGNORE),
          "MPI_Testall");
      if (!all) return false;
      if (step == 0) locate();
      sync();
      if (step == 0) {  // everyone's buffer is ready: reduce part `rank` over the ranks in order
        const int64_t at = part_at(rank) * size;
        std::vector<const char*> parts;
        for (const char* b : buffers) parts.push_back(b + at);
        if (ranks > 1) combine(data + at, parts, part_at(rank + 1) - part_at(rank), dtype, op);
      } else if (step == 1) {  // every part reduced: copy the others'
        for (int q = 0; q < ranks; ++q) {
          if (q == rank) continue;
          const int64_t at = part_at(q) * size;
          std::memcpy(data + at, buffers[static_cast<size_t>(q)] + at,
                      static_cast<size_t>((part_at(q + 1) - part_at(q)) * size));
        }
      }
      if (step == 2) {
        done = true;
        return true;
      }
      sync();  // this step's stores, before its message
      ++step;
      post(nullptr, 0);
    }
    return true;
  }
};
// NOLINTEND(clang-analyzer-optin.mpi.MPI-Checker)

}  // namespace

std::unique_ptr<Request> start_shared_all_reduce_request(const SharedWindows& windows, void* data,
                                                         int64_t count, DType dtype, HostReduce op,
                                                         MPI_Comm comm, int tag0) {
  return std::make_unique<SharedRequest>(windows, data, count, dtype, op, comm, tag0);
}

}  // namespace tg::dist::detail
