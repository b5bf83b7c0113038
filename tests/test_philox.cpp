// Philox4x32-10 known answers (DESIGN.md §5) and the (seed, offset) stream convention.
#include "test_util.h"

using namespace tg;

TEST_CASE("Random123 known answer: counter 0, key 0") {
  philox4x32_ctr_t ctr = {{0, 0, 0, 0}};
  philox4x32_key_t key = {{0, 0}};
  auto r = philox4x32(ctr, key);
  CHECK(r.v[0] == 0x6627e8d5u);
  CHECK(r.v[1] == 0xe169c58du);
  CHECK(r.v[2] == 0xbc57ac4cu);
  CHECK(r.v[3] == 0x9b00dbd8u);
}

TEST_CASE("seed 42 stream words and uniform") {
  const uint32_t want[8] = {0x9ceaf053, 0x77f5493b, 0x12bf50ad, 0x5742b3d7,
                            0xfcdb2127, 0x53ba6cfd, 0x838f5a6e, 0x744e06fb};
  for (uint64_t pos = 0; pos < 8; ++pos) CHECK(philox_word(42, pos) == want[pos]);
  CHECK(philox_uniform(42, 0) == doctest::Approx(0.612959862).epsilon(1e-8));
}

TEST_CASE("rand fills element n from stream position offset + n") {
  Generator g{42, 4};
  Tensor r = rand({4}, g, kFloat32);
  auto v = r.to_vector<float>();
  for (int n = 0; n < 4; ++n) CHECK(v[n] == philox_uniform(42, 4 + n));
  CHECK(g.offset == 8);
  Generator h{42, 0};
  rand({5}, h);
  CHECK(h.offset == 8);  // rounded up to a whole block of 4
}

TEST_CASE("dropout mask follows u > p at offset + n") {
  Tensor x = ones({8}, kFloat32);
  auto y = dropout(x, 0.5, 42, 0).to_vector<float>();
  for (int n = 0; n < 8; ++n) CHECK((y[n] != 0.f) == (philox_uniform(42, n) > 0.5f));
}

TEST_CASE("rand, randn and dropout over many elements: each position as drawn one at a time") {
  // Enough elements for the vector lanes' blocks, several chunks and both threads; dropout
  // starts mid-block.
  const int64_t n = 20011;
  Generator g{7, 8};
  const auto u = rand({n}, g, kFloat32).to_vector<float>();
  Generator h{7, 0};
  const auto z = randn({n}, h, kFloat64).to_vector<double>();
  const auto y = dropout(ones({n}, kFloat32), 0.3, 9, 6).to_vector<float>();
  int64_t bad_u = 0, bad_z = 0, bad_y = 0;
  for (int64_t i = 0; i < n; ++i) {
    bad_u += u[i] != philox_uniform(7, 8 + i);
    bad_z += z[i] != philox_normal(7, 0, i);
    bad_y += (y[i] != 0.f) != (philox_uniform(9, 6 + i) > 0.3f);
  }
  CHECK(bad_u == 0);
  CHECK(bad_z == 0);
  CHECK(bad_y == 0);
}
