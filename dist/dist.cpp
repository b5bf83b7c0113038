// tg::dist over a Communicator (communicator.h) and, for CUDA tensors, a DeviceCommunicator
// (device_communicator.h: NCCL) or staging through contiguous host buffers: argument checks,
// 16-bit reductions in float32, a signature exchange that turns ranks disagreeing about a
// collective into an error on every rank, and a watchdog that ends the job when a collective
// waits too long.
#include "dist/dist.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "dist/watchdog.h"
#include "ops/ops.h"

namespace tg::dist {
namespace {

// Members are destroyed in reverse order: the watchdog stops before the communicator
// finalizes MPI.
struct State {
  std::unique_ptr<detail::Communicator> comm;  // null: a world of one
  // How CUDA tensors' collectives travel: chosen by the first of them (every rank is in it, and
  // the signature has checked that every rank's tensor is on CUDA), then kept.
  enum class CudaPath : uint8_t { Undecided, Host, Nccl } cuda_path = CudaPath::Undecided;
  CudaCollectives cuda_option = CudaCollectives::Auto;
  std::unique_ptr<detail::DeviceCommunicator> nccl;  // when cuda_path is Nccl
  detail::Watchdog watchdog;
  // One call into the engine at a time in this process: MPI is initialised
  // MPI_THREAD_SERIALIZED, and a program may call collectives from several threads.
  std::mutex collective;
  // The nonblocking all-reduces not yet finished, in the order they were started.
  std::deque<std::shared_ptr<detail::PendingReduce>> in_flight;
  bool initialized = false;
};

State& state() {
  static State s;
  return s;
}

// A collective in progress: this process's only one, under the watchdog's eye.
class Guarded {
 public:
  explicit Guarded(const char* what) : lock_(state().collective) { state().watchdog.arm(what); }
  ~Guarded() { state().watchdog.disarm(); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
};

// What every rank must agree on before a collective moves data: which collective, the dtype,
// the element count, the root and the kind of device (CPU tensors go through MPI, CUDA ones
// perhaps through NCCL: the ranks must take the same engine); and, without having to agree,
// whether its buffer lies in shared memory (empty_shared). Exchanged as the values' minimum and
// maximum over the ranks (one all-reduce of Max over the values and their negatives), so that
// every rank reaches the same verdict.
struct Signature {
  enum Field : uint8_t { kKind, kDType, kNumel, kRoot, kDevice, kShared, kFields };
  Signature(int64_t kind, DType dtype, int64_t numel, int64_t root, Device device,
            bool shared = false)
      : dtype(dtype), numel(numel), root(root), device(device) {
    wire[kKind] = kind;
    wire[kDType] = static_cast<int64_t>(dtype);
    wire[kNumel] = numel;
    wire[kRoot] = root;
    wire[kDevice] = device.is_cuda() ? 1 : 0;
    wire[kShared] = shared ? 1 : 0;
    for (int i = 0; i < kFields; ++i) wire[kFields + i] = -wire[i];  // max of -x is -min of x
  }
  // After the exchange: an error unless every rank passed the same.
  void check(const char* op) const {
    if (!agreed(kKind)) fail(op, "ranks called different collectives at the same point");
    TG_CHECK(agreed(kDType), op, "ranks disagree on the tensor's dtype (this rank: ", dtype, ")");
    TG_CHECK(agreed(kNumel), op, "ranks disagree on the tensor's size: ", numel,
             " elements on this rank, between ", min(kNumel), " and ", wire[kNumel],
             " over the ranks");
    TG_CHECK(agreed(kRoot), op, "ranks disagree on the root: ", root, " on this rank");
    TG_CHECK(agreed(kDevice), op,
             "ranks disagree on the tensor's kind of device: CPU on some, CUDA on others (this "
             "rank: ",
             device, ")");
  }
  // After the exchange: whether every rank's buffer is in shared memory.
  bool all_shared() const { return min(kShared) == 1; }
  DType dtype;
  int64_t numel, root;
  Device device;
  int64_t wire[2 * kFields] = {};

 private:
  int64_t min(Field f) const { return -wire[kFields + f]; }
  bool agreed(Field f) const { return wire[f] == min(f); }
};

// The collectives' kinds, for the signature.
enum Kind : int64_t { kAllReduce = 1, kBroadcast, kAllGather, kAllReduceAsync, kEmptyShared };

// The signature's exchange, nonblocking on the control channel whatever the collective (see
// communicator.h's Channel).
std::unique_ptr<detail::Request> start_agreeing(Signature& sig) {
  return state().comm->start_all_reduce(sig.wire, 2 * Signature::kFields, kInt64,
                                        detail::HostReduce::Max, detail::Channel::Control);
}

// Blocking collectives: exchange and check the signature before any data moves.
void agree(const char* op, Kind kind, DType dtype, int64_t numel, int64_t root, Device device) {
  Signature sig(kind, dtype, numel, root, device);
  const std::unique_ptr<detail::Request> exchange = start_agreeing(sig);
  while (!exchange->test()) {
  }
  sig.check(op);
}

// The number of processes the launcher started, from its environment (Open MPI's mpirun,
// MPICH's hydra, srun's PMI-2); 1 when there is none or it does not say (PMIx).
int launched_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* v = std::getenv(var)) return std::max(1, std::atoi(v));
  }
  return 1;
}

// A collective before init in a job of several processes would silently act as a world of
// one (every rank training alone): an error instead.
void check_initialized(const char* op) {
  if (state().initialized) return;
  const int n = launched_world_size();
  TG_CHECK(n <= 1, op, "the process group is not initialized, and this process is one of ", n,
           " started by the launcher: call tg::dist::init() first");
}

void check_writable(const Tensor& t, const char* op) {
  TG_CHECK(t.defined(), op, "argument 'tensor' is undefined");
  TG_CHECK(!(grad_enabled() && t.requires_grad()), op,
           "argument 'tensor' requires grad while grad mode is on: collectives are not "
           "recorded on the tape; pass tensor.detach() or use tg::NoGradGuard");
  for (int64_t d = 0; d < t.dim(); ++d) {
    TG_CHECK(t.strides()[d] != 0 || t.sizes()[d] <= 1, op, "argument 'tensor' of shape ",
             shape_str(t.sizes()), " has stride 0 in dim ", d,
             " (an expanded view): it cannot be written in place; clone() it first");
  }
}

// A private contiguous copy of t's values in `dtype` on `device` (never t's own storage).
Tensor private_copy(const Tensor& t, DType dtype, Device device = kCPU) {
  NoGradGuard ng;
  Tensor h = t.detach().to(device).to(dtype).contiguous();
  if (h.numel() && h.raw_data() == t.raw_data()) h = h.clone();
  return h;
}

void write_back(Tensor& t, const Tensor& host) {
  NoGradGuard ng;
  t.copy_(host.to(t.dtype()));
}

}  // namespace

bool detail::started_by_launcher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

void init(const InitOptions& options) {
  State& s = state();
  TG_CHECK(!s.initialized, "dist.init", "the process group is already initialized");
  TG_CHECK(options.timeout_s >= 0, "dist.init", "timeout_s must be >= 0, got ", options.timeout_s);
  s.comm = detail::make_mpi_communicator();
  s.cuda_option = options.cuda_collectives;
  s.initialized = true;
  s.watchdog.start(options.timeout_s, rank());
  if (world_size() > 1) {
    // An exception nobody catches ends every rank, not this one alone.
    std::set_terminate([] {
      std::string what = "terminate called";
      if (std::exception_ptr e = std::current_exception()) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          what = x.what();
        } catch (...) {
          what = "an exception that is not a std::exception";
        }
      }
      abort(what, 1);
    });
  }
}

bool is_initialized() { return state().initialized; }
const char* backend() { return state().comm ? "mpi" : "none"; }
bool available() {
#ifdef TAPEGRAD_MPI
  return true;
#else
  return false;
#endif
}
bool nccl_available() { return detail::nccl_built(); }
const char* cuda_backend() {
  switch (state().cuda_path) {
    case State::CudaPath::Host:
      return "host";
    case State::CudaPath::Nccl:
      return "nccl";
    case State::CudaPath::Undecided:
      break;
  }
  return "none";
}
int rank() { return state().comm ? state().comm->rank() : 0; }
int world_size() { return state().comm ? state().comm->size() : 1; }
int local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var)) return std::max(0, std::atoi(v));
  return 0;
}

void barrier() {
  check_initialized("dist.barrier");
  if (!state().comm) return;
  Guarded g("barrier");
  state().comm->barrier();
}

namespace {

// all_reduce's checks on this rank's arguments.
void check_all_reduce(const char* op_name, const Tensor& t, ReduceOp op) {
  check_initialized(op_name);
  check_writable(t, op_name);
  const DType dt = t.dtype();
  TG_CHECK(op != ReduceOp::Mean || is_floating(dt), op_name, "Mean takes a floating tensor, got ",
           dt);
  TG_CHECK(op == ReduceOp::Max || dt != kBool, op_name, "a bool tensor takes Max (any), not ",
           op == ReduceOp::Sum ? "Sum" : "Mean");
}

detail::HostReduce host_reduce(ReduceOp op) {
  return op == ReduceOp::Max ? detail::HostReduce::Max : detail::HostReduce::Sum;
}

// What the engine reduces for t: t itself when it is already a contiguous buffer in the wire's
// dtype on `where` (gradient buckets), else a private copy there. 16-bit tensors travel and are
// summed as float32, their compute dtype.
Tensor reduction_buffer(const Tensor& t, Device where) {
  const DType wire = compute_dtype(t.dtype());
  if (t.device() == where && t.is_contiguous() && t.dtype() == wire) return t;
  return private_copy(t, wire, where);
}

// Once the engine has reduced `buffer` (from reduction_buffer): t = the result, divided by the
// world size for Mean. A result the engine wrote into t itself bumps t's storage version, as
// an in-place op does (autograd's saved-tensor checks and the kept host copies of
// ops/host_values.h read it).
void store_result(Tensor& t, const Tensor& buffer, ReduceOp op) {
  NoGradGuard ng;
  const bool in_place = buffer.raw_data() == t.raw_data();
  if (op == ReduceOp::Mean) {
    const Tensor mean = div(buffer, static_cast<double>(world_size()));
    t.copy_(in_place ? mean : mean.to(t.dtype()));
  } else if (!in_place) {
    write_back(t, buffer);
  } else {
    t.impl()->storage->bump_version();
  }
}

// Whether this collective of a tensor on CUDA device `device` goes through NCCL: chosen at the
// first such collective, on every rank alike (the choice's inputs are the same everywhere or,
// for the GPUs' identities, gathered), then kept. The caller holds the collective lock and has
// checked that every rank's tensor is on CUDA.
bool use_nccl(const char* op, int device) {
  using Path = State::CudaPath;
  State& s = state();
  if (s.cuda_path == Path::Undecided) {
    const bool forced = s.cuda_option == CudaCollectives::Nccl;
    if (s.cuda_option == CudaCollectives::Host) {
      s.cuda_path = Path::Host;
    } else if (!detail::nccl_built()) {
      TG_CHECK(!forced, op,
               "cuda_collectives is Nccl, but this build has no NCCL (TAPEGRAD_NCCL; it needs the "
               "CUDA backend, MPI and NCCL)");
      s.cuda_path = Path::Host;
    } else if (const auto pair = detail::ranks_sharing_a_gpu(*s.comm, device)) {
      TG_CHECK(!forced, op, "cuda_collectives is Nccl, but ranks ", pair->first, " and ",
               pair->second,
               " use the same GPU, and NCCL takes one rank per GPU: give each rank a device of "
               "its own (cuda:<local rank>), or use CudaCollectives::Host");
      s.cuda_path = Path::Host;
    } else {
      s.nccl = detail::make_nccl_communicator(*s.comm, device);
      s.cuda_path = Path::Nccl;
    }
  }
  if (s.cuda_path != Path::Nccl) return false;
  TG_CHECK(s.nccl->device() == device, op, "NCCL's communicator is on cuda:", s.nccl->device(),
           " (the device of this rank's first CUDA collective), this tensor on cuda:", device,
           ": a rank's CUDA collectives use one device");
  return true;
}

// all_reduce and, for CUDA tensors, all_reduce_async: the signature, then the data, blocking
// (through host memory) or queued on the device (NCCL). The caller holds the collective lock.
void all_reduce_now(const char* op_name, Kind kind, Tensor& t, ReduceOp op) {
  agree(op_name, kind, t.dtype(), t.numel(), 0, t.device());
  if (t.numel() == 0) return;
  // Over NCCL the buffer stays on the device (a copy there when t is strided or 16-bit).
  const bool nccl = t.device().is_cuda() && use_nccl(op_name, t.device().index);
  const Tensor buffer = reduction_buffer(t, nccl ? t.device() : kCPU);
  if (nccl) {
    state().nccl->all_reduce(buffer.raw_data(), buffer.numel(), buffer.dtype(), host_reduce(op));
  } else {
    state().comm->all_reduce(buffer.raw_data(), buffer.numel(), buffer.dtype(), host_reduce(op));
  }
  store_result(t, buffer, op);
}

}  // namespace

void all_reduce(Tensor& t, ReduceOp op) {
  constexpr const char* kOp = "dist.all_reduce";
  check_all_reduce(kOp, t, op);
  if (!state().comm) return;  // a world of one: already the result
  Guarded g("all_reduce");
  all_reduce_now(kOp, kAllReduce, t, op);
}

// A nonblocking all-reduce: first its signature's exchange on the control channel (in call
// order with the blocking collectives), then, once the ranks agreed and every earlier one's
// data has started, its data on the data channel: the data of every rank's reductions start in
// the same order, whatever each rank's tests saw complete.
struct detail::PendingReduce {
  enum class Stage : uint8_t { Agreeing, Reducing, Done };
  PendingReduce(Tensor t, ReduceOp op)
      : target(std::move(t)),
        buffer(reduction_buffer(target, kCPU)),
        op(op),
        signature(kAllReduceAsync, target.dtype(), target.numel(), 0, target.device(),
                  state().comm->is_shared(
                      buffer.raw_data(),
                      buffer.numel() * static_cast<int64_t>(dtype_size(buffer.dtype())))) {}
  Tensor target;  // the caller's
  Tensor buffer;  // reduction_buffer(target, kCPU)
  ReduceOp op;
  Signature signature;
  std::unique_ptr<Request> request;  // the stage's
  Stage stage = Stage::Agreeing;
  std::exception_ptr error;  // why it failed, until test() or wait() says so
};

namespace {

constexpr const char* kAsyncOp = "dist.all_reduce_async";

// Moves one reduction to its next stage when its request has finished; false when it has not.
bool advance(detail::PendingReduce& p) {
  using Stage = detail::PendingReduce::Stage;
  if (!p.request->test()) return false;
  p.request.reset();
  if (p.stage == Stage::Agreeing) {
    p.signature.check(kAsyncOp);
    if (p.buffer.numel() == 0) {
      p.stage = Stage::Done;
      return true;
    }
    detail::Communicator& comm = *state().comm;
    p.request = p.signature.all_shared()
                    ? comm.start_shared_all_reduce(p.buffer.raw_data(), p.buffer.numel(),
                                                   p.buffer.dtype(), host_reduce(p.op))
                    : comm.start_all_reduce(p.buffer.raw_data(), p.buffer.numel(), p.buffer.dtype(),
                                            host_reduce(p.op), detail::Channel::Data);
    p.stage = Stage::Reducing;
    return true;
  }
  store_result(p.target, p.buffer, p.op);
  p.stage = Stage::Done;
  return true;
}

// Advances every reduction in flight, in the order they were started; the caller holds the
// collective lock. A reduction still agreeing stops the walk: the data of the ones after it
// must not start before its own.
void advance_in_flight() {
  using Stage = detail::PendingReduce::Stage;
  std::deque<std::shared_ptr<detail::PendingReduce>>& in_flight = state().in_flight;
  for (const std::shared_ptr<detail::PendingReduce>& p : in_flight) {
    try {
      while (p->stage != Stage::Done && advance(*p)) {
      }
    } catch (...) {
      p->error = std::current_exception();
      p->stage = Stage::Done;
    }
    if (p->stage == Stage::Agreeing) break;
  }
  std::erase_if(in_flight, [](const auto& p) { return p->stage == Stage::Done; });
}

}  // namespace

Work all_reduce_async(Tensor& t, ReduceOp op) {
  check_all_reduce(kAsyncOp, t, op);
  if (!state().comm) return {};  // a world of one: already the result
  if (t.device().is_cuda()) {
    // Agreed at once, so that NCCL's collectives are queued in the program's order on every
    // rank (NCCL matches them by that order alone).
    Guarded g("all_reduce_async");
    all_reduce_now(kAsyncOp, kAllReduceAsync, t, op);
    return {};
  }
  auto p = std::make_shared<detail::PendingReduce>(t, op);
  std::lock_guard<std::mutex> lock(state().collective);
  p->request = start_agreeing(p->signature);
  state().in_flight.push_back(p);
  return Work(std::move(p));
}

Work::Work(std::shared_ptr<detail::PendingReduce> pending) : pending_(std::move(pending)) {}
Work::Work(Work&&) noexcept = default;

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    Work finished = std::move(*this);  // waits for what this one held, if unfinished
    pending_ = std::move(other.pending_);
  }
  return *this;
}

Work::~Work() {
  if (!pending_) return;
  try {
    wait();
  } catch (...) {  // a destructor cannot report it; the ranks still finished the collective
  }
}

// The Work's state is read and written under the collective lock: a program may test one
// thread's Work from another.
bool Work::test() {
  if (!pending_) return true;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(state().collective);
    if (pending_->stage != detail::PendingReduce::Stage::Done) advance_in_flight();
    if (pending_->stage != detail::PendingReduce::Stage::Done) return false;
    error = std::exchange(pending_->error, nullptr);
  }
  if (error) std::rethrow_exception(error);
  return true;
}

void Work::wait() {
  if (!pending_) return;
  std::exception_ptr error;
  {
    Guarded g("all_reduce_async");
    while (pending_->stage != detail::PendingReduce::Stage::Done) advance_in_flight();
    error = std::exchange(pending_->error, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

Tensor empty_shared(const Shape& sizes, DType dtype) {
  constexpr const char* kOp = "dist.empty_shared";
  check_initialized(kOp);
  Tensor plain = Tensor::empty_like_shape(sizes, dtype, kCPU, kOp);  // checks sizes
  if (!state().comm) return plain;
  Guarded g("empty_shared");
  agree(kOp, kEmptyShared, dtype, plain.numel(), 0, kCPU);
  const int64_t bytes = plain.numel() * static_cast<int64_t>(dtype_size(dtype));
  void* data = state().comm->allocate_shared(bytes);
  if (!data) return plain;  // the ranks do not share one machine
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::borrow(data, static_cast<size_t>(bytes), kCPU);
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void broadcast(Tensor& t, int root) {
  constexpr const char* kOp = "dist.broadcast";
  check_initialized(kOp);
  check_writable(t, kOp);
  TG_CHECK(root >= 0 && root < world_size(), kOp, "argument 'root' must be in [0, ", world_size(),
           "), got ", root);
  if (!state().comm) return;
  Guarded g("broadcast");
  agree(kOp, kBroadcast, t.dtype(), t.numel(), root, t.device());
  if (t.numel() == 0) return;
  const int64_t bytes = t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  if (t.device().is_cuda() && use_nccl(kOp, t.device().index)) {
    NoGradGuard ng;
    const Tensor buffer = t.is_contiguous() ? t : t.detach().contiguous();
    state().nccl->broadcast(buffer.raw_data(), bytes, root);
    if (buffer.raw_data() != t.raw_data()) {
      t.copy_(buffer);
    } else {
      t.impl()->storage->bump_version();  // written in place (store_result)
    }
    return;
  }
  Tensor h = private_copy(t, t.dtype());
  state().comm->broadcast(h.raw_data(), bytes, root);
  if (rank() != root) write_back(t, h);
}

Tensor all_gather(const Tensor& t) {
  constexpr const char* kOp = "dist.all_gather";
  check_initialized(kOp);
  TG_CHECK(t.defined(), kOp, "argument 'tensor' is undefined");
  Shape shape = t.sizes();
  shape.insert(shape.begin(), world_size());
  NoGradGuard ng;
  if (!state().comm) return t.detach().unsqueeze(0).clone();
  Guarded g("all_gather");
  agree(kOp, kAllGather, t.dtype(), t.numel(), 0, t.device());
  const int64_t bytes = t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  if (t.device().is_cuda() && bytes && use_nccl(kOp, t.device().index)) {
    const Tensor mine = t.detach().contiguous();
    Tensor out = empty(shape, TensorOptions(t.dtype()).device(t.device()));
    state().nccl->all_gather(mine.raw_data(), out.raw_data(), bytes);
    return out;
  }
  Tensor h = private_copy(t, t.dtype());
  Tensor out = empty(shape, TensorOptions(t.dtype()));
  if (bytes) state().comm->all_gather(h.raw_data(), out.raw_data(), bytes);
  return out.to(t.device());
}

void abort(const std::string& message, int code) {
  std::fprintf(stderr, "[rank %d] %s\n", rank(), message.c_str());
  std::fflush(stderr);
  if (state().comm) state().comm->abort(code);
  std::_Exit(code);
}

}  // namespace tg::dist
