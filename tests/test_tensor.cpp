// Tensor core: factories, views sharing storage, contiguous(), read-back, printing.
#include <sys/resource.h>

#include <cstdlib>
#include <sstream>

#include "test_util.h"

using namespace tg;

TEST_CASE("factories fill shapes, dtypes and values") {
  Tensor z = zeros({2, 3});
  CHECK(z.sizes() == Shape{2, 3});
  CHECK(z.dtype() == kFloat32);
  CHECK(z.strides() == Shape{3, 1});
  CHECK(z.to_vector<float>() == std::vector<float>(6, 0.f));
  CHECK(ones({4}, kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(full({2}, 2.5, kFloat64).to_vector<double>() == std::vector<double>{2.5, 2.5});
  CHECK(arange(5, kInt64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(1, 2, 0.25, kFloat64).to_vector<double>() ==
        std::vector<double>{1, 1.25, 1.5, 1.75});
  CHECK(arange(3, 0, -1, kInt64).to_vector<int64_t>() == std::vector<int64_t>{3, 2, 1});
  Tensor e = empty({3, 0});
  CHECK(e.numel() == 0);
  Tensor s = scalar_tensor(3.0);
  CHECK(s.dim() == 0);
  CHECK(s.item<float>() == 3.0f);
  Tensor v = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(v.dtype() == kFloat64);
  CHECK(v.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  Tensor b = from_vector(std::vector<bool>{true, false}, {2});
  CHECK(b.dtype() == kBool);
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, false});
  Tensor r = ones({2}, TensorOptions().dtype(kFloat64).requires_grad(true));
  CHECK(r.requires_grad());
  CHECK(r.is_leaf());
}

TEST_CASE("rand and randn are seeded, reproducible and roughly distributed") {
  Generator g1{7, 0}, g2{7, 0};
  Tensor a = rand({1000}, g1), b = rand({1000}, g2);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(g1.offset == 1000);
  Tensor c = rand({1000}, g1);
  CHECK(c.to_vector<float>() != a.to_vector<float>());
  auto va = a.to_vector<float>();
  for (float x : va) CHECK((x > 0.f && x <= 1.f));
  CHECK(std::abs(mean(a).item<float>() - 0.5f) < 0.05f);
  Generator g3{9, 0};
  Tensor n = randn({20000}, g3, kFloat64);
  CHECK(g3.offset == 40000);
  CHECK(std::abs(mean(n).item<double>()) < 0.05);
  CHECK(std::abs(var(n).item<double>() - 1.0) < 0.05);
  manual_seed(3);
  Tensor d1 = randn({5});
  manual_seed(3);
  Tensor d2 = randn({5});
  CHECK(d1.to_vector<float>() == d2.to_vector<float>());
}

TEST_CASE("views share storage with their base") {
  Tensor x = arange(24, kFloat64).reshape({2, 3, 4});
  CHECK(x.is_contiguous());
  Tensor t = x.transpose(0, 2);
  CHECK(t.sizes() == Shape{4, 3, 2});
  CHECK(t.strides() == Shape{1, 4, 12});
  CHECK(!t.is_contiguous());
  // A view with no elements is contiguous whatever its strides, and views again.
  Tensor empty_rows = x.slice(1, 1, 1).transpose(0, 2);
  CHECK(empty_rows.is_contiguous());
  CHECK(empty_rows.view({0}).numel() == 0);
  CHECK(t.impl()->storage == x.impl()->storage);
  Tensor p = x.permute({1, 2, 0});
  CHECK(p.sizes() == Shape{3, 4, 2});
  Tensor sl = x.slice(2, 1, 4, 2);  // columns 1 and 3
  CHECK(sl.sizes() == Shape{2, 3, 2});
  CHECK(sl.to_vector<double>() == std::vector<double>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23});
  Tensor nr = x.narrow(1, 1, 2);
  CHECK(nr.offset() == 4);
  CHECK(x.slice(0, -1, 100).sizes() == Shape{1, 3, 4});
  Tensor u = x.unsqueeze(1);
  CHECK(u.sizes() == Shape{2, 1, 3, 4});
  CHECK(u.squeeze(1).sizes() == Shape{2, 3, 4});
  CHECK(ones({1, 3, 1}).squeeze().sizes() == Shape{3});
  Tensor ex = ones({3, 1}).expand({2, 3, 4});
  CHECK(ex.strides() == Shape{0, 1, 0});
  CHECK(ex.sizes() == Shape{2, 3, 4});
  CHECK(x.view({6, -1}).sizes() == Shape{6, 4});
  CHECK(x.flatten().sizes() == Shape{24});
  // Writing through a view changes the base.
  {
    Tensor col = x.slice(2, 0, 1);
    col.fill_(-1);
  }
  CHECK(x.to_vector<double>()[4] == -1);
  CHECK(x.to_vector<double>()[5] == 5);
}

TEST_CASE("contiguous copies strided data in row-major order") {
  Tensor x = arange(6, kFloat64).reshape({2, 3});
  Tensor t = x.transpose(0, 1);
  Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.impl()->storage != x.impl()->storage);
  CHECK(c.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(x.contiguous().is_same(x));
  CHECK(t.reshape({6}).to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  Tensor e = ones({3}).expand({2, 3}).contiguous();
  CHECK(e.strides() == Shape{3, 1});
}

TEST_CASE("contiguous copies of large transposes (the CPU's tiled path), converting too") {
  // 70 x 130 planes: whole tiles and partial ones on both dims; the batch dim outermost.
  const int64_t B = 3, R = 70, C = 130;
  Tensor x = arange(B * R * C, kInt64).reshape({B, R, C});
  auto want = [&](int64_t b, int64_t c, int64_t r) { return (b * R + r) * C + c; };
  const std::vector<int64_t> t = x.transpose(1, 2).contiguous().to_vector<int64_t>();
  const std::vector<float> f = x.transpose(1, 2).to(kFloat32).to_vector<float>();
  const std::vector<int64_t> n = neg(x.transpose(1, 2)).to_vector<int64_t>();
  REQUIRE(t.size() == static_cast<size_t>(B * R * C));
  int64_t wrong = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t r = 0; r < R; ++r) {
        const size_t i = static_cast<size_t>((b * C + c) * R + r);
        const int64_t w = want(b, c, r);
        wrong += t[i] != w || f[i] != static_cast<float>(w) || n[i] != -w;
      }
    }
  }
  CHECK(wrong == 0);
  // (C, B, R) from (B, R, C): x's unit-stride dim outermost, the batch dim between.
  const std::vector<int64_t> p = x.permute({2, 0, 1}).contiguous().to_vector<int64_t>();
  int64_t wrong_p = 0;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t r = 0; r < R; ++r)
        wrong_p += p[static_cast<size_t>((c * B + b) * R + r)] != want(b, c, r);
  CHECK(wrong_p == 0);
}

TEST_CASE("dtype conversion and read-back") {
  Tensor x = from_vector(std::vector<double>{1.7, -2.2, 0.0}, {3});
  CHECK(x.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, -2, 0});
  CHECK(x.to(kBool).to_vector<bool>() == std::vector<bool>{true, true, false});
  CHECK(x.to(kFloat32).dtype() == kFloat32);
  CHECK(x.to(kFloat64).is_same(x));
  CHECK(x.to(kCPU).is_same(x));
  CHECK(tg::sum(x).item<double>() == doctest::Approx(-0.5));
}

TEST_CASE("printing shows shape, dtype, device and values") {
  std::ostringstream os;
  os << from_vector(std::vector<int64_t>{1, 2, 3, 4}, {2, 2});
  CHECK(os.str() == "tensor(shape=[2, 2], dtype=int64, device=cpu)\n[[1, 2],\n [3, 4]]");
  std::ostringstream os2;
  os2 << arange(100, kInt64);
  CHECK(os2.str().find("[0, 1, 2, ..., 97, 98, 99]") != std::string::npos);
}

TEST_CASE("live storage is counted") {
  int64_t before = live_storage_count();
  {
    Tensor a = zeros({10});
    Tensor v = a.view({2, 5});
    CHECK(live_storage_count() == before + 1);
  }
  CHECK(live_storage_count() == before);
}

// A freed CPU block of 256 KiB or more is kept and handed to the next tensor of its size
// class, which then takes no page faults; release_free_memory() gives it back
// (core/storage.cpp).
TEST_CASE("CPU blocks of 256 KiB and more are reused until release_free_memory") {
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("AddressSanitizer build: freed blocks are not kept");
#else
  const auto faults = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<long>(u.ru_minflt);
  };
  SUBCASE("40 MiB: no page faults from a kept block") {
    const int64_t n = int64_t{40} << 18;  // 40 MiB of float32: 10240 pages of 4 KiB
    const auto faults_of_a_fill = [&](double value) {
      const long before = faults();
      Tensor t = full({n}, value);
      const long taken = faults() - before;
      CHECK(min(t).item<float>() == static_cast<float>(value));
      CHECK(sum(t).item<double>() == doctest::Approx(value * static_cast<double>(n)));
      return taken;
    };
    release_free_memory();
    const long fresh = faults_of_a_fill(1.0);   // mapped afresh
    const long reused = faults_of_a_fill(2.0);  // the block the first left
    release_free_memory();
    const long after_release = faults_of_a_fill(3.0);
    INFO("page faults: fresh ", fresh, ", reused ", reused, ", after release ", after_release);
    CHECK(reused < 500);
    // A fresh mapping faults once per 4 KiB page, unless the system backs it with huge pages
    // (transparent huge pages set to "always"), where there is nothing to tell apart.
    if (fresh > 5000) {
      CHECK(after_release > 5000);
    } else {
      MESSAGE("fresh mappings took ", fresh, " page faults (huge pages?): release not checked");
    }
  }
  SUBCASE("1 MiB: the block goes to the next tensor of its size class, not back to malloc") {
    release_free_memory();
    const int64_t n = int64_t{1} << 18;  // 1 MiB of float32; its size class steps by 64 KiB
    void* kept = nullptr;
    {
      Tensor t = full({n}, 1.0);
      kept = t.raw_data();
    }
    // Were the block back in the C heap, this allocation of its size could take it.
    void* other = std::malloc(size_t{1} << 20);
    REQUIRE(other != nullptr);
    CHECK(other != kept);
    {
      Tensor t = empty({n - 1000});  // 4000 bytes less: the same class
      CHECK(t.raw_data() == kept);
    }
    {
      Tensor t = empty({n + 16384 + 1});  // the next class
      CHECK(t.raw_data() != kept);
    }
    std::free(other);
  }
  release_free_memory();
#endif
}

TEST_CASE("set_num_threads") {
  int prev = get_num_threads();
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  set_num_threads(prev);
  CHECK(get_num_threads() == prev);
}
