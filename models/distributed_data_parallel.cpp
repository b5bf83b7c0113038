#include "models/distributed_data_parallel.h"

#include <algorithm>
#include <chrono>

#include "autograd/autograd.h"
#include "dist/dist.h"
#include "ops/ops.h"

namespace tg::nn {
namespace {

constexpr const char* kOp = "DistributedDataParallel";
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Bucket {
  std::vector<size_t> params;    // indices into Impl::params, in the bucket's order
  std::vector<int64_t> offsets;  // each one's first element in buffer
  Tensor buffer;                 // flat; the parameters' dtype and device
  size_t ready = 0;              // parameters whose gradient is in buffer this pass
};

struct Slot {
  size_t bucket = 0;
  size_t index = 0;  // within the bucket
};

}  // namespace

struct DistributedDataParallel::Impl {
  std::vector<Tensor> params;
  int64_t total_bytes = 0;  // of all the gradients
  int64_t bucket_cap = 0;
  bool shared_buckets = true;  // DistributedDataParallelOptions's
  std::vector<Bucket> buckets;
  // The CPU buckets' memory: a flat tensor per dtype, which the ranks of one machine share
  // (dist::empty_shared: the all-reduce reads the other ranks' buckets where they are) unless
  // the options say otherwise; kept when the buckets are cut again after the first pass.
  std::vector<Tensor> shared;
  std::vector<Slot> slots;  // per parameter
  std::vector<HookHandle> hooks;
  GradReductionStats stats;

  // The pass under way: started by its first hook, ended by the callback that hook queued.
  bool in_pass = false;
  bool reordered = false;       // buckets follow the first pass's gradient order
  std::vector<char> got;        // per parameter: gradient copied into its bucket this pass
  std::vector<size_t> arrival;  // parameters in the order their gradients became final
  size_t next_launch = 0;       // buckets are launched in index order on every rank
  size_t early = 0;             // of them, launched before backward ended
  // CPU buckets in flight, in launch order; those before `settled` have finished. They advance
  // in the hooks, on this thread: a thread of its own would take the core from backward.
  std::vector<dist::Work> in_flight;
  size_t settled = 0;
  std::vector<size_t> held;  // launched CUDA buckets, reduced when the pass ends
  double reduce_s = 0;       // this pass's time in the reduction's calls

  // Room for every cut of dtype's CPU gradients into buckets that start on cache lines (each
  // loses less than a line), so that the first pass's cut reuses the constructor's.
  Tensor shared_flat(DType dtype) const {
    const int64_t line = 64 / static_cast<int64_t>(dtype_size(dtype));
    int64_t n = 0;
    for (const Tensor& p : params)
      if (p.device() == kCPU && p.dtype() == dtype) n += p.numel() + line;
    return shared_buckets ? dist::empty_shared({n}, dtype) : empty({n}, dtype);
  }

  // Cut `order` into buckets of at most bucket_cap bytes and one dtype and device.
  void build_buckets(const std::vector<size_t>& order) {
    buckets.clear();
    slots.assign(params.size(), {});
    int64_t bytes = 0, elems = 0;
    for (size_t i : order) {
      const Tensor& p = params[i];
      const int64_t pb = p.numel() * static_cast<int64_t>(dtype_size(p.dtype()));
      const bool fits = !buckets.empty() && bytes + pb <= bucket_cap &&
                        params[buckets.back().params.front()].dtype() == p.dtype() &&
                        params[buckets.back().params.front()].device() == p.device();
      if (!fits) {
        buckets.emplace_back();
        bytes = elems = 0;
      }
      Bucket& b = buckets.back();
      slots[i] = {buckets.size() - 1, b.params.size()};
      b.params.push_back(i);
      b.offsets.push_back(elems);
      bytes += pb;
      elems += p.numel();
    }
    // CPU buckets: slices of one flat tensor per dtype (`shared`), each on a cache line.
    std::vector<std::pair<DType, int64_t>> flat_sizes;  // elements, by dtype
    std::vector<int64_t> starts(buckets.size(), 0), lengths(buckets.size(), 0);
    for (size_t k = 0; k < buckets.size(); ++k) {
      Bucket& b = buckets[k];
      const Tensor& first = params[b.params.front()];
      const int64_t n = lengths[k] = b.offsets.back() + params[b.params.back()].numel();
      if (first.device() != kCPU) {
        b.buffer = empty({n}, TensorOptions(first.dtype()).device(first.device()));
        continue;
      }
      auto it = std::find_if(flat_sizes.begin(), flat_sizes.end(),
                             [&](const auto& f) { return f.first == first.dtype(); });
      if (it == flat_sizes.end()) it = flat_sizes.insert(flat_sizes.end(), {first.dtype(), 0});
      const int64_t line = 64 / static_cast<int64_t>(dtype_size(first.dtype()));
      starts[k] = (it->second + line - 1) / line * line;
      it->second = starts[k] + n;
    }
    for (const auto& size : flat_sizes) {
      const DType dtype = size.first;  // not a structured binding: lambdas capture these
      const int64_t n = size.second;
      auto kept = std::find_if(shared.begin(), shared.end(), [&](const Tensor& t) {
        return t.dtype() == dtype && t.numel() >= n;
      });
      if (kept == shared.end()) kept = shared.insert(shared.end(), shared_flat(dtype));
      const Tensor& flat = *kept;
      for (size_t k = 0; k < buckets.size(); ++k) {
        Bucket& b = buckets[k];
        const Tensor& first = params[b.params.front()];
        if (first.device() != kCPU || first.dtype() != dtype) continue;
        b.buffer = flat.narrow(0, starts[k], lengths[k]);
      }
    }
  }

  Tensor slice(size_t i) {
    const Slot& s = slots[i];
    Bucket& b = buckets[s.bucket];
    return b.buffer.narrow(0, b.offsets[s.index], params[i].numel()).view(params[i].sizes());
  }

  void launch_ready() {
    while (next_launch < buckets.size() &&
           buckets[next_launch].ready == buckets[next_launch].params.size()) {
      Bucket& b = buckets[next_launch];
      if (b.buffer.device() == kCPU) {
        in_flight.push_back(dist::all_reduce_async(b.buffer));
      } else {
        held.push_back(next_launch);
      }
      ++next_launch;
    }
  }

  // Lets the reductions in flight move on (the engine moves data only inside its calls).
  void advance_reductions() {
    if (settled == in_flight.size()) return;
    const Clock::time_point t0 = Clock::now();
    while (settled < in_flight.size() && in_flight[settled].test()) ++settled;
    reduce_s += seconds_since(t0);
  }

  void on_gradient_ready(size_t i, const Tensor& param) {
    TG_CHECK(!grad_enabled(), kOp,
             "backward with create_graph is not supported: the reduced gradients would carry no "
             "graph");
    if (!in_pass) start_pass();
    if (got[i]) return;
    NoGradGuard ng;
    slice(i).copy_(param.grad());
    got[i] = 1;
    arrival.push_back(i);
    ++buckets[slots[i].bucket].ready;
    const Clock::time_point t0 = Clock::now();
    launch_ready();
    reduce_s += seconds_since(t0);
    early = next_launch;
    advance_reductions();
  }

  // Ends the pass whatever happens to it: run as a callback when backward finishes, or (the
  // token's destructor) when backward threw before it could.
  struct PassToken {
    explicit PassToken(Impl* owner) : impl(owner) {}
    PassToken(const PassToken&) = delete;
    PassToken& operator=(const PassToken&) = delete;
    Impl* impl;
    bool finished = false;
    ~PassToken() {
      if (!finished) impl->abandon_pass();
    }
  };

  void start_pass() {
    in_pass = true;
    auto token = std::make_shared<PassToken>(this);
    queue_callback([this, token] {
      token->finished = true;
      finish_pass();
    });
  }

  void finish_pass() {
    NoGradGuard ng;
    // A parameter this backward did not reach contributes what its .grad() holds (zeros when
    // none): every reduction averages the ranks' .grad(), whichever of them this pass changed.
    for (size_t i = 0; i < params.size(); ++i) {
      if (got[i]) continue;
      const Tensor g = params[i].grad();
      if (g.defined()) {
        slice(i).copy_(g);
      } else {
        slice(i).zero_();
      }
      got[i] = 1;
      ++buckets[slots[i].bucket].ready;
    }
    const Clock::time_point wait_start = Clock::now();
    try {
      launch_ready();
      for (; settled < in_flight.size(); ++settled) in_flight[settled].wait();
      for (size_t k : held) dist::all_reduce(buckets[k].buffer, dist::ReduceOp::Sum);
    } catch (...) {
      abandon_pass();
      throw;
    }
    stats.wait_s = seconds_since(wait_start);
    reduce_s += stats.wait_s;
    stats.reduce_s = reduce_s;
    stats.buckets = static_cast<int64_t>(buckets.size());
    stats.early_buckets = static_cast<int64_t>(early);
    stats.bytes = total_bytes;
    // The means, written into the gradients this rank's backward made where it made them (as
    // libtorch's reducer does): no fresh buffers, which would cost page faults every step.
    const double inverse = 1.0 / dist::world_size();
    for (Bucket& b : buckets) b.buffer.mul_(inverse);
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor g = params[i].grad();
      if (g.defined() && g.is_contiguous() && g.sizes() == params[i].sizes() &&
          g.dtype() == params[i].dtype() && g.device() == params[i].device()) {
        Tensor(g).copy_(slice(i));
      } else {
        params[i].set_grad(slice(i).clone());
      }
    }
    if (!reordered) reorder_buckets();
    reset_pass();
  }

  // After the first pass: buckets in the order its gradients became final (rank 0's order, so
  // that every rank cuts the same buckets), so that later passes fill them front to back.
  void reorder_buckets() {
    reordered = true;
    std::vector<size_t> order = arrival;
    std::vector<char> arrived(params.size(), 0);
    for (size_t i : arrival) arrived[i] = 1;
    for (size_t i = params.size(); i-- > 0;)
      if (!arrived[i]) order.push_back(i);
    Tensor t = empty({static_cast<int64_t>(order.size())}, kInt64);
    for (size_t k = 0; k < order.size(); ++k)
      t.data_ptr<int64_t>()[k] = static_cast<int64_t>(order[k]);
    dist::broadcast(t, 0);
    for (size_t k = 0; k < order.size(); ++k)
      order[k] = static_cast<size_t>(t.data_ptr<int64_t>()[k]);
    build_buckets(order);
  }

  // Every rank must finish the reductions it started, whatever happened to this pass.
  void abandon_pass() {
    for (dist::Work& w : in_flight) {
      try {
        w.wait();
      } catch (...) {  // the error that ended the pass is the one that propagates
      }
    }
    reset_pass();
  }

  void reset_pass() {
    in_pass = false;
    std::fill(got.begin(), got.end(), 0);
    arrival.clear();
    in_flight.clear();
    held.clear();
    next_launch = early = settled = 0;
    reduce_s = 0;
    for (Bucket& b : buckets) b.ready = 0;
  }
};

DistributedDataParallel::DistributedDataParallel(Module& module,
                                                 DistributedDataParallelOptions options)
    : module_(module), impl_(std::make_unique<Impl>()) {
  TG_CHECK(options.bucket_bytes >= 0, kOp, "bucket_bytes must be >= 0, got ", options.bucket_bytes);
  Impl& m = *impl_;
  m.params = module.parameters();
  if (options.broadcast_parameters) {
    NoGradGuard ng;
    for (const Tensor& p : m.params) {
      Tensor data = p.detach();
      dist::broadcast(data, 0);
    }
  }
  if (dist::world_size() == 1 || m.params.empty()) return;  // nothing to reduce
  for (const Tensor& p : m.params)
    m.total_bytes += p.numel() * static_cast<int64_t>(dtype_size(p.dtype()));
  m.shared_buckets = options.shared_buckets;
  m.bucket_cap = options.bucket_bytes > 0
                     ? options.bucket_bytes
                     : std::clamp<int64_t>(m.total_bytes / 8, int64_t{64} << 10, int64_t{25} << 20);
  // Until the first pass shows the tape's order: the reverse of registration, which is close
  // (the last layers' gradients are final first).
  std::vector<size_t> order(m.params.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
  m.build_buckets(order);
  m.got.assign(m.params.size(), 0);
  for (size_t i = 0; i < m.params.size(); ++i) {
    m.hooks.push_back(register_post_accumulate_grad_hook(
        m.params[i], [impl = impl_.get(), i](const Tensor& p) { impl->on_gradient_ready(i, p); }));
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

int64_t DistributedDataParallel::bucket_count() const {
  return static_cast<int64_t>(impl_->buckets.size());
}

const GradReductionStats& DistributedDataParallel::last_reduction() const { return impl_->stats; }

}  // namespace tg::nn
