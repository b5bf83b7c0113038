// tg::dist's collectives against hand-computed results, run as one process (a world of one,
// every build) and, with MPI, as two under mpirun (ctest label dist). Every rank runs every
// case, so the collectives match up; results are checked on every rank.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <tapegrad.h>

#include <cstring>
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

}  // namespace

TEST_CASE("the process group: rank, world size, engine") {
  CHECK(dist::is_initialized());
  CHECK(R() >= 0);
  CHECK(R() < W());
  CHECK(std::strcmp(dist::backend(), dist::available() ? "mpi" : "none") == 0);
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

TEST_CASE("all_reduce gives every rank the same bits") {
  Generator gen{1234 + static_cast<uint64_t>(R()), 0};
  Tensor x = randn({1000}, gen);
  dist::all_reduce(x, dist::ReduceOp::Mean);
  Tensor all = dist::all_gather(x);
  REQUIRE(all.sizes() == Shape{W(), 1000});
  const std::vector<float> v = all.to_vector<float>();
  for (int r = 1; r < W(); ++r) CHECK(std::memcmp(v.data(), v.data() + r * 1000, 4000) == 0);
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
  if (W() > 1) {
    // Ranks that disagree get an error each, and the group goes on working.
    Tensor odd = zeros({3 + R()});
    CHECK_THROWS_WITH(dist::all_reduce(odd),
                      doctest::Contains("ranks disagree on the tensor's size"));
    Tensor d = zeros({2}).to(R() == 0 ? kFloat32 : kFloat64);
    CHECK_THROWS_WITH(dist::all_reduce(d),
                      doctest::Contains("ranks disagree on the tensor's dtype"));
    Tensor ok = ones({2});
    dist::all_reduce(ok);
    CHECK(values(ok) == std::vector<double>{double(W()), double(W())});
  }
}

int main(int argc, char** argv) {
  dist::InitOptions o;
  o.timeout_s = 120;
  dist::init(o);
  doctest::Context ctx(argc, argv);
  if (dist::rank() != 0) ctx.setOption("minimal", true);
  return ctx.run() != 0 ? 1 : 0;
}
