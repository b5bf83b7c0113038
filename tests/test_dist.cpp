// tg::dist's collectives against hand-computed results, run as one process (a world of one,
// every build) and, with MPI, as two under mpirun (ctest label dist). Every rank runs every
// case, so the collectives match up; results are checked on every rank.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <tapegrad.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace tg;

namespace {

int W() { return dist::world_size(); }
int R() { return dist::rank(); }

// (rank + 1) * (i + 1) for i < n, in dtype.
Tensor ramp(int64_t n, DType dtype, int rank) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<double>((rank + 1) * (i + 1)));
  return from_vector(v, {n}).to(dtype);
}

std::vector<double> values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return tg::max(tg::abs(sub(a.to(kFloat64), b.to(kFloat64)))).item<double>();
}

}  // namespace

TEST_CASE("the process group: rank, world size, engine") {
  CHECK(dist::is_initialized());
  CHECK(R() >= 0);
  CHECK(R() < W());
  // MPI runs the group when the build has it and mpirun started this process.
  const bool mpi = dist::available() && std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  CHECK(std::strcmp(dist::backend(), mpi ? "mpi" : "none") == 0);
  CHECK(std::strcmp(dist::cuda_backend(), "none") == 0);  // no CUDA collective yet
  // Every rank of these tests runs on this machine: their local ranks are 0 to W - 1, in an
  // order the launcher picks (Open MPI 5 does not follow the ranks' own).
  std::vector<double> local = values(dist::all_gather(full({1}, double(dist::local_rank()))));
  std::sort(local.begin(), local.end());
  for (int r = 0; r < W(); ++r) CHECK(local[r] == r);
  CHECK_THROWS_WITH(dist::init(), "[dist.init] the process group is already initialized");
  dist::barrier();
}

TEST_CASE("all_reduce: Sum, Mean and Max in every dtype") {
  const double tri = W() * (W() + 1) / 2.0;  // sum over ranks of (rank + 1)
  for (DType dt : {kFloat32, kFloat64, kInt64, kBFloat16, kFloat16}) {
    CAPTURE(dt);
    Tensor s = ramp(5, dt, R());
    dist::all_reduce(s);
    CHECK(s.dtype() == dt);
    Tensor m = ramp(5, dt, R());
    dist::all_reduce(m, dist::ReduceOp::Max);
    for (int64_t i = 0; i < 5; ++i) {
      CHECK(values(s)[i] == tri * (i + 1));
      CHECK(values(m)[i] == W() * (i + 1.0));
    }
    if (dt != kInt64) {
      Tensor a = ramp(5, dt, R());
      dist::all_reduce(a, dist::ReduceOp::Mean);
      for (int64_t i = 0; i < 5; ++i) CHECK(values(a)[i] == tri * (i + 1) / W());
    }
  }
  Tensor any = full({3}, R() == W() - 1 ? 1.0 : 0.0).to(kBool);
  dist::all_reduce(any, dist::ReduceOp::Max);
  CHECK(any.to_vector<bool>() == std::vector<bool>{true, true, true});
}

TEST_CASE("all_reduce in place through a strided view, and on a parameter under NoGradGuard") {
  Tensor base = zeros({3, 4});
  Tensor view = base.transpose(0, 1);  // (4, 3), strided
  view.copy_(full({4, 3}, R() + 1.0));
  dist::all_reduce(view);
  for (double x : values(base)) CHECK(x == W() * (W() + 1) / 2.0);

  Tensor w = full({2}, 1.0 + R()).requires_grad_();
  CHECK_THROWS_WITH(dist::all_reduce(w),
                    doctest::Contains("[dist.all_reduce] argument 'tensor' requires grad"));
  NoGradGuard ng;
  dist::all_reduce(w, dist::ReduceOp::Max);
  CHECK(values(w) == std::vector<double>{double(W()), double(W())});
}

TEST_CASE("a collective's in-place result counts as an in-place change for autograd") {
  // b is saved by mul for a's gradient; all_reduce writes the sum into b's own storage (a
  // contiguous float32 tensor is its own buffer), which backward must see.
  Tensor a = full({3}, 2.0).requires_grad_();
  Tensor b = full({3}, 1.0 + R());
  Tensor c = sum(mul(a, b));
  dist::all_reduce(b);
  if (W() > 1) {
    CHECK_THROWS_WITH(c.backward(), doctest::Contains("modified in place afterwards"));
  } else {
    c.backward();  // a world of one writes nothing
    CHECK(values(a.grad()) == std::vector<double>{1.0, 1.0, 1.0});
  }
}

TEST_CASE("all_reduce gives every rank the same bits") {
  Generator gen{1234 + static_cast<uint64_t>(R()), 0};
  Tensor x = randn({1000}, gen);
  Tensor nonblocking = x.clone();
  dist::all_reduce(x, dist::ReduceOp::Mean);
  dist::all_reduce_async(nonblocking, dist::ReduceOp::Mean).wait();
  CHECK(max_abs_diff(x, nonblocking) <= 1e-6);  // MPI may order the sums its own way for each
  for (const Tensor& t : {x, nonblocking}) {
    Tensor all = dist::all_gather(t);
    REQUIRE(all.sizes() == Shape{W(), 1000});
    const std::vector<float> v = all.to_vector<float>();
    for (int r = 1; r < W(); ++r) CHECK(std::memcmp(v.data(), v.data() + r * 1000, 4000) == 0);
  }
}

TEST_CASE("all_reduce_async: several in flight, beside blocking collectives") {
  const double tri = W() * (W() + 1) / 2.0;
  std::vector<Tensor> ts;
  std::vector<dist::ReduceOp> ops;
  std::vector<dist::Work> works;
  auto start = [&](const Tensor& t, dist::ReduceOp op) {
    ts.push_back(t);
    ops.push_back(op);
    works.push_back(dist::all_reduce_async(ts.back(), op));
  };
  for (DType dt : {kFloat32, kFloat64, kInt64, kBFloat16, kFloat16}) {
    start(ramp(5, dt, R()), dist::ReduceOp::Sum);
    start(ramp(5, dt, R()), dist::ReduceOp::Max);
    if (dt != kInt64) start(ramp(5, dt, R()), dist::ReduceOp::Mean);
    // Ranks advance their reductions at different points: rank 0 tests as it goes, the others
    // do not; the data must still meet in the order it was started.
    if (R() == 0) works.front().test();
  }
  Tensor base = zeros({3, 4});
  Tensor view = base.transpose(0, 1);  // strided: reduced through a host copy
  view.copy_(full({4, 3}, R() + 1.0));
  start(view, dist::ReduceOp::Sum);
  Tensor blocking = ramp(3, kFloat32, R());
  dist::all_reduce(blocking);  // a blocking collective while the others are in flight
  CHECK(values(blocking) == std::vector<double>{tri, 2 * tri, 3 * tri});
  Tensor none = zeros({0});
  start(none, dist::ReduceOp::Sum);
  for (size_t k = works.size(); k-- > 0;) works[k].wait();  // any order
  for (size_t k = 0; k + 2 < ts.size(); ++k) {
    CAPTURE(k);
    CHECK(ts[k].dtype() == ramp(1, ts[k].dtype(), 0).dtype());
    const std::vector<double> v = values(ts[k]);
    for (int64_t i = 0; i < 5; ++i) {
      const double want = ops[k] == dist::ReduceOp::Max   ? W() * (i + 1.0)
                          : ops[k] == dist::ReduceOp::Sum ? tri * (i + 1)
                                                          : tri * (i + 1) / W();
      CHECK(v[i] == want);
    }
  }
  for (double x : values(base)) CHECK(x == tri);
  for (dist::Work& w : works) CHECK(w.test());  // finished stays finished

  // Destroying or overwriting an unfinished Work waits for it.
  Tensor a = full({2}, 1.0), b = full({2}, 2.0);
  { dist::Work w = dist::all_reduce_async(a); }
  CHECK(values(a) == std::vector<double>{1.0 * W(), 1.0 * W()});
  dist::Work w = dist::all_reduce_async(b);
  w = dist::Work();
  CHECK(values(b) == std::vector<double>{2.0 * W(), 2.0 * W()});
  CHECK(w.test());
  w.wait();
}

TEST_CASE("all_reduce_async: buckets of every size, finished in a different order on each rank") {
  // The nonblocking data go round the ranks in parts, one per rank (fewer elements than ranks
  // leave parts empty); each rank here waits for its reductions in its own order, so their
  // messages cross. Integer-valued floats: the sums are exact whatever their order.
  // The same in memory the ranks share (empty_shared: each rank reads the others' buffers), and
  // with rank 0's in shared memory alone (the ranks then agree on messages).
  bool shared = false, mixed = false;
  SUBCASE("private buffers") {}
  SUBCASE("shared buffers") { shared = true; }
  SUBCASE("rank 0's shared, the others' private") { mixed = true; }
  auto place = [&](const Tensor& t) {
    Tensor s = dist::empty_shared(t.sizes(), t.dtype());  // collective: every rank makes it
    if (!shared && !(mixed && R() == 0)) return t;
    s.copy_(t);
    return s;
  };
  const std::vector<int64_t> sizes{1, 2, 3, 7, 1000, 100003};
  std::vector<Tensor> ts;
  std::vector<dist::Work> works;
  for (int64_t n : sizes) {
    ts.push_back(place(add(arange(0, static_cast<double>(n)), full({n}, 1000.0 * R()))));
    works.push_back(dist::all_reduce_async(ts.back()));
  }
  Tensor maxed = place(ramp(9, kFloat64, R()));
  works.push_back(dist::all_reduce_async(maxed, dist::ReduceOp::Max));
  Tensor counts = place(ramp(5, kInt64, R()));
  works.push_back(dist::all_reduce_async(counts));
  Tensor any = place(full({4}, R() == W() - 1 ? 1.0 : 0.0).to(kBool));
  works.push_back(dist::all_reduce_async(any, dist::ReduceOp::Max));
  // Rank r starts at its r-th reduction; odd ranks walk them backwards.
  const size_t n = works.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t at = (k + static_cast<size_t>(R())) % n;
    works[R() % 2 == 1 ? n - 1 - at : at].wait();
  }
  const double ranks_sum = 1000.0 * W() * (W() - 1) / 2;
  for (size_t k = 0; k < sizes.size(); ++k) {
    CAPTURE(sizes[k]);
    const std::vector<double> v = values(ts[k]);
    bool exact = true;
    for (int64_t i = 0; i < sizes[k]; ++i) exact = exact && v[i] == W() * i + ranks_sum;
    CHECK(exact);
    const std::vector<float> all = dist::all_gather(ts[k]).to_vector<float>();
    const auto bytes = static_cast<size_t>(sizes[k]) * sizeof(float);
    for (int r = 1; r < W(); ++r)
      CHECK(std::memcmp(all.data(), all.data() + r * sizes[k], bytes) == 0);
  }
  CHECK(values(maxed) == values(ramp(9, kFloat64, W() - 1)));
  CHECK(values(counts) == values(mul(ramp(5, kInt64, 0), W() * (W() + 1) / 2)));
  CHECK(values(any) == std::vector<double>(4, 1.0));
}

TEST_CASE("broadcast and all_gather") {
  const int root = W() - 1;
  for (DType dt : {kFloat32, kFloat64, kInt64, kBFloat16, kBool}) {
    CAPTURE(dt);
    Tensor t = ramp(4, kFloat64, R()).to(dt);
    dist::broadcast(t, root);
    CHECK(values(t) == values(ramp(4, kFloat64, root).to(dt)));
    Tensor g = dist::all_gather(ramp(4, kFloat64, R()).reshape({2, 2}).to(dt));
    REQUIRE(g.sizes() == Shape{W(), 2, 2});
    CHECK(g.dtype() == dt);
    for (int r = 0; r < W(); ++r)
      CHECK(values(g.narrow(0, r, 1).flatten()) == values(ramp(4, kFloat64, r).to(dt)));
  }
  Tensor empty_t = zeros({0, 3});
  dist::all_reduce(empty_t);
  CHECK(dist::all_gather(empty_t).sizes() == Shape{W(), 0, 3});
}

TEST_CASE("collectives: errors") {
  Tensor i = ramp(3, kInt64, 0);
  CHECK_THROWS_WITH(dist::all_reduce(i, dist::ReduceOp::Mean),
                    "[dist.all_reduce] Mean takes a floating tensor, got int64");
  Tensor b = zeros({2}).to(kBool);
  CHECK_THROWS_WITH(dist::all_reduce(b),
                    "[dist.all_reduce] a bool tensor takes Max (any), not Sum");
  Tensor t = zeros({2});
  CHECK_THROWS_WITH(dist::broadcast(t, W()),
                    doctest::Contains("[dist.broadcast] argument 'root' must be in [0, "));
  CHECK_THROWS_WITH(dist::broadcast(t, -1), doctest::Contains("got -1"));
  Tensor e = zeros({1}).expand({3});
  CHECK_THROWS_WITH(dist::all_reduce(e), doctest::Contains("has stride 0 in dim 0"));
  Tensor u;
  CHECK_THROWS_WITH(dist::all_reduce(u), "[dist.all_reduce] argument 'tensor' is undefined");
  CHECK_THROWS_WITH(dist::all_reduce_async(i, dist::ReduceOp::Mean),
                    "[dist.all_reduce_async] Mean takes a floating tensor, got int64");
  CHECK_THROWS_WITH(dist::all_reduce_async(e), doctest::Contains("has stride 0 in dim 0"));
  CHECK_THROWS_WITH(dist::empty_shared({2, -1}),
                    "[dist.empty_shared] sizes must be non-negative, got [2, -1]");
  if (W() > 1) {
    // The ranks' disagreement on a nonblocking all-reduce surfaces from wait() on every rank;
    // the reductions around it go through.
    Tensor before = ones({2}), uneven = zeros({3 + R()}), after = ones({2});
    dist::Work w1 = dist::all_reduce_async(before);
    dist::Work w2 = dist::all_reduce_async(uneven);
    dist::Work w3 = dist::all_reduce_async(after);
    w1.wait();
    CHECK_THROWS_WITH(w2.wait(), doctest::Contains("[dist.all_reduce_async] ranks disagree on "
                                                   "the tensor's size: "));
    CHECK(w2.test());  // reported once
    w3.wait();
    CHECK(values(before) == std::vector<double>{double(W()), double(W())});
    CHECK(values(after) == values(before));
    // One rank's blocking all_reduce against another's nonblocking one: an error on each.
    Tensor mixed = ones({2});
    if (R() == 0) {
      CHECK_THROWS_WITH(dist::all_reduce(mixed),
                        doctest::Contains("ranks called different collectives"));
    } else {
      dist::Work w = dist::all_reduce_async(mixed);
      CHECK_THROWS_WITH(w.wait(), doctest::Contains("ranks called different collectives"));
    }
    // Ranks that disagree get an error each, and the group goes on working.
    Tensor odd = zeros({3 + R()});
    CHECK_THROWS_WITH(dist::all_reduce(odd),
                      doctest::Contains("ranks disagree on the tensor's size"));
    Tensor d = zeros({2}).to(R() == 0 ? kFloat32 : kFloat64);
    CHECK_THROWS_WITH(dist::all_reduce(d),
                      doctest::Contains("ranks disagree on the tensor's dtype"));
    CHECK_THROWS_WITH(dist::empty_shared({2 + R()}),
                      doctest::Contains("[dist.empty_shared] ranks disagree on the tensor's size"));
    Tensor ok = ones({2});
    dist::all_reduce(ok);
    CHECK(values(ok) == std::vector<double>{double(W()), double(W())});
  }
}

namespace {

// The engine main asked for CUDA tensors ("nccl", "host" or "auto").
std::string wanted_cuda_collectives() {
  const char* want = std::getenv("TAPEGRAD_TEST_CUDA_COLLECTIVES");
  return want ? want : "auto";
}

// Rank r on GPU r mod the count: NCCL takes one rank per GPU, so with fewer GPUs than ranks the
// ranks share one and the automatic choice is host memory.
Device rank_gpu() { return {DeviceType::CUDA, R() % cuda_device_count()}; }
bool ranks_share_a_gpu() { return W() > cuda_device_count(); }

// A world of one that no launcher started: collectives move nothing, and choose no engine.
bool alone() { return std::strcmp(dist::backend(), "none") == 0; }

// Whether the engine main asked for can carry CUDA collectives here.
bool cuda_collectives_possible() {
  return alone() || wanted_cuda_collectives() != "nccl" ||
         (dist::nccl_available() && !ranks_share_a_gpu());
}

}  // namespace

TEST_CASE("collectives of CUDA tensors: NCCL, or through host memory") {
  if (!cuda_is_available()) {
    MESSAGE("no CUDA device: skipped");
    return;
  }
  const Device dev = rank_gpu();
  const std::string want = wanted_cuda_collectives();
  const bool sharing = ranks_share_a_gpu();
  Tensor first = full({2}, 1.0).to(dev);
  if (!cuda_collectives_possible()) {
    CHECK_THROWS_WITH(dist::all_reduce(first),
                      doctest::Contains(!dist::nccl_available() ? "this build has no NCCL"
                                                                : "NCCL takes one rank per GPU"));
    CHECK(std::string(dist::cuda_backend()) == "none");
    return;
  }
  dist::all_reduce(first);  // chooses the engine
  std::string engine = want != "host" && dist::nccl_available() && !sharing ? "nccl" : "host";
  if (alone()) engine = "none";
  CHECK(dist::cuda_backend() == engine);
  CHECK(values(first) == std::vector<double>{double(W()), double(W())});

  const double tri = W() * (W() + 1) / 2.0;
  for (DType dt : {kFloat32, kFloat64, kInt64, kBFloat16, kFloat16}) {
    CAPTURE(dt);
    Tensor s = ramp(5, dt, R()).to(dev), m = ramp(5, dt, R()).to(dev);
    dist::all_reduce(s);
    dist::all_reduce(m, dist::ReduceOp::Max);
    CHECK(s.device() == dev);
    CHECK(s.dtype() == dt);
    for (int64_t i = 0; i < 5; ++i) {
      CHECK(values(s)[i] == tri * (i + 1));
      CHECK(values(m)[i] == W() * (i + 1.0));
    }
    if (dt != kInt64) {
      Tensor a = ramp(5, dt, R()).to(dev);
      dist::Work w = dist::all_reduce_async(a, dist::ReduceOp::Mean);
      CHECK(w.test());  // a CUDA tensor's Work comes back finished
      for (int64_t i = 0; i < 5; ++i) CHECK(values(a)[i] == tri * (i + 1) / W());
    }
    Tensor b = ramp(4, kFloat64, R()).to(dt).to(dev);
    dist::broadcast(b, W() - 1);
    CHECK(values(b) == values(ramp(4, kFloat64, W() - 1).to(dt)));
    Tensor g = dist::all_gather(ramp(4, kFloat64, R()).reshape({2, 2}).to(dt).to(dev));
    REQUIRE(g.sizes() == Shape{W(), 2, 2});
    CHECK(g.device() == dev);
    for (int r = 0; r < W(); ++r)
      CHECK(values(g.narrow(0, r, 1).flatten()) == values(ramp(4, kFloat64, r).to(dt)));
  }
  Tensor any = full({3}, R() == W() - 1 ? 1.0 : 0.0).to(kBool).to(dev);
  dist::all_reduce(any, dist::ReduceOp::Max);
  CHECK(any.to(kCPU).to_vector<bool>() == std::vector<bool>{true, true, true});
  // Strided views, written in place.
  Tensor base = zeros({3, 4}).to(dev);
  Tensor view = base.transpose(0, 1);
  view.copy_(full({4, 3}, R() + 1.0).to(dev));
  dist::all_reduce(view);
  for (double x : values(base)) CHECK(x == tri);
  Tensor rows = ramp(6, kFloat32, R()).to(dev).reshape({3, 2}).transpose(0, 1);
  dist::broadcast(rows, 0);
  CHECK(values(rows.contiguous()) ==
        values(ramp(6, kFloat32, 0).reshape({3, 2}).transpose(0, 1).contiguous()));
  // Every rank ends with the same bits.
  Generator gen{99 + static_cast<uint64_t>(R()), 0};
  Tensor x = randn({1000}, gen).to(dev);
  dist::all_reduce(x, dist::ReduceOp::Mean);
  const std::vector<float> v = dist::all_gather(x).to(kCPU).to_vector<float>();
  for (int r = 1; r < W(); ++r)
    // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): the same bits, on purpose
    CHECK(std::memcmp(v.data(), v.data() + r * 1000, 4000) == 0);
  if (W() > 1) {
    Tensor mixed = R() == 0 ? ones({2}).to(dev) : ones({2});
    CHECK_THROWS_WITH(dist::all_reduce(mixed),
                      doctest::Contains("ranks disagree on the tensor's kind of device"));
  }
}

namespace {

// Every value of every parameter, in order.
std::vector<float> flat_params(nn::Module& m) {
  std::vector<float> out;
  for (const Tensor& p : m.parameters()) {
    const std::vector<float> v = p.contiguous().to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Two parameters; `use_b` decides whether the loss reaches b.
class Pair : public nn::Module {
 public:
  Pair()
      : a(register_parameter("a", full({3}, 1.0 + R()))),
        b(register_parameter("b", full({2}, 2.0))) {}
  Tensor loss(bool use_b) const {
    Tensor l = tg::sum(mul(a, a));
    return use_b ? add(l, tg::sum(mul(b, 3.0))) : l;
  }
  Tensor a, b;
};

// W ranks on batch 64/W train as one process on batch 64, the models on `dev`.
void check_ddp_matches_one_process(Device dev) {
  const nn::TransformerConfig cfg{
      .vocab = 256, .d_model = 32, .layers = 2, .heads = 4, .kv_heads = 2};
  auto task = nn::make_task("sort", 6);
  nn::Transformer single(cfg, 100);       // one process, the whole batch
  nn::Transformer model(cfg, 100 + R());  // each rank's own init: DDP copies rank 0's
  single.to(dev);
  model.to(dev);
  nn::DistributedDataParallel ddp(model, {.bucket_bytes = 16 << 10});
  CHECK(flat_params(model) == flat_params(single));
  nn::AdamW opt_single(single.named_parameters()), opt(model.named_parameters());
  const int64_t batch = 64 % W() == 0 ? 64 : 16 * W();  // 64 for the 1 and 2 ranks of CI
  for (int64_t step = 0; step < 20; ++step) {
    const nn::Batch global = nn::task_batch(*task, batch, 3, step);
    Generator d1{0, 0}, d2{0, 0};
    nn::train_step(single, opt_single, global, d1);
    nn::train_step(model, opt, nn::shard(global, R(), W()), d2);
  }
  const std::vector<float> mine = flat_params(model), one = flat_params(single);
  REQUIRE(mine.size() == one.size());
  double worst = 0;
  for (size_t i = 0; i < mine.size(); ++i)
    worst = std::max(worst, std::abs(double(mine[i]) - one[i]));
  CHECK(worst < 1e-5);
  // Bitwise the same model on every rank.
  Tensor all = dist::all_gather(from_vector(mine, {static_cast<int64_t>(mine.size())}));
  const std::vector<float> v = all.to_vector<float>();
  for (int r = 1; r < W(); ++r)
    CHECK(std::memcmp(v.data(), v.data() + r * mine.size(), mine.size() * 4) == 0);
  if (W() > 1) {
    CHECK(ddp.bucket_count() > 2);
    const nn::GradReductionStats& s = ddp.last_reduction();
    CHECK(s.buckets == ddp.bucket_count());
    if (dev.is_cpu()) CHECK(s.early_buckets == s.buckets);  // each went out during backward
    CHECK(s.bytes == model.parameter_count() * 4);
    CHECK(s.reduce_s > 0);
  } else {
    CHECK(ddp.bucket_count() == 0);  // a world of one: nothing to reduce
  }
}

}  // namespace

TEST_CASE("DistributedDataParallel: W ranks on batch 64/W train as one process on batch 64") {
  check_ddp_matches_one_process(kCPU);
}

TEST_CASE("DistributedDataParallel on CUDA: W ranks train as one process") {
  if (!cuda_is_available()) {
    MESSAGE("no CUDA device: skipped");
    return;
  }
  if (!cuda_collectives_possible()) return;  // the case above checks the error
  check_ddp_matches_one_process(rank_gpu());
}

TEST_CASE("DistributedDataParallel: a parameter some ranks do not reach; accumulation; errors") {
  Pair m;
  nn::DistributedDataParallel ddp(m);
  CHECK(values(m.a) == std::vector<double>{1, 1, 1});  // rank 0's
  const bool use_b = R() == 0;                         // b's gradient comes from rank 0 alone
  m.loss(use_b).backward();
  CHECK(values(m.a.grad()) == std::vector<double>{2, 2, 2});  // 2a, the same on every rank
  REQUIRE(m.b.grad().defined());
  CHECK(values(m.b.grad()) == std::vector<double>{3.0 / W(), 3.0 / W()});
  const void* a_grad = m.a.grad().raw_data();
  m.loss(use_b).backward();  // a second backward before a step: the sum, as in one process
  CHECK(values(m.a.grad()) == std::vector<double>{4, 4, 4});
  CHECK(m.a.grad().raw_data() == a_grad);  // the mean went where backward accumulated
  CHECK(values(m.b.grad()) == std::vector<double>{6.0 / W(), 6.0 / W()});
  m.zero_grad();
  if (W() > 1) {
    CHECK_THROWS_WITH(backward({m.loss(true)}, {}, std::nullopt, /*create_graph=*/true),
                      doctest::Contains("[DistributedDataParallel] backward with create_graph"));
  }
  m.zero_grad();
  CHECK_THROWS_WITH(nn::DistributedDataParallel(m, {.bucket_bytes = -1}),
                    "[DistributedDataParallel] bucket_bytes must be >= 0, got -1");
  nn::Batch b{zeros({6, 2}, kInt64), zeros({6, 2}, kInt64)};
  CHECK_THROWS_WITH(nn::shard(b, 0, 4),
                    doctest::Contains("[shard] a batch of 6 rows does not split over 4 ranks"));
  CHECK(nn::shard(b, 2, 3).inputs.sizes() == Shape{2, 2});
}

int main(int argc, char** argv) {
  dist::InitOptions o;
  o.timeout_s = 120;
  // The engine for CUDA tensors, from the ctest entries that choose one (auto otherwise).
  if (const char* want = std::getenv("TAPEGRAD_TEST_CUDA_COLLECTIVES")) {
    const std::string w = want;
    o.cuda_collectives = w == "nccl"   ? dist::CudaCollectives::Nccl
                         : w == "host" ? dist::CudaCollectives::Host
                                       : dist::CudaCollectives::Auto;
  }
  dist::init(o);
  doctest::Context ctx(argc, argv);
  if (dist::rank() != 0) ctx.setOption("minimal", true);
  return ctx.run() != 0 ? 1 : 0;
}
