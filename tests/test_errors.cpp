// Bad input: every error is a tg::Error whose message starts with "[op]" and names the
// argument, what was expected and what came.
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include "test_util.h"

using namespace tg;
using tgtest::check_throws_with_prefix;

TEST_CASE("shape errors") {
  Tensor a = ones({2, 3}), b = ones({4});
  check_throws_with_prefix([&] { add(a, b); }, "[add]", "not broadcastable");
  check_throws_with_prefix(
      [&] {
        matmul(ones({2, 3}), ones({4, 5}));
      },
      "[matmul]", "inner dims differ");
  check_throws_with_prefix(
      [&] {
        matmul(ones({2, 2, 3}), ones({3, 3, 1}));
      },
      "[matmul]", "not broadcastable");
  check_throws_with_prefix([&] { matmul(scalar_tensor(1.0), ones({2})); }, "[matmul]",
                           "at least 1-D");
  check_throws_with_prefix([&] { a.view({4, 2}); }, "[view]", "invalid");
  check_throws_with_prefix([&] { a.transpose(0, 1).view({6}); }, "[view]", "not contiguous");
  check_throws_with_prefix([&] { a.reshape({-1, -1}); }, "[reshape]", "only one dimension");
  check_throws_with_prefix([&] { a.permute({0, 0}); }, "[permute]", "repeat");
  check_throws_with_prefix([&] { a.permute({0}); }, "[permute]", "expected 2 dims");
  check_throws_with_prefix([&] { a.expand({2, 4}); }, "[expand]", "cannot expand");
  check_throws_with_prefix([&] { a.narrow(1, 2, 2); }, "[narrow]", "do not fit");
  check_throws_with_prefix([&] { a.slice(0, 0, 1, 0); }, "[slice]", "step");
  check_throws_with_prefix([&] { tg::sum(a, {2}); }, "[sum]", "out of range");
  check_throws_with_prefix([&] { tg::sum(a, {1, -1}); }, "[sum]", "more than once");
  check_throws_with_prefix([&] { a.size(5); }, "[size]", "out of range");
  check_throws_with_prefix([&] { cat({a, ones({3, 3})}, 1); }, "[cat]", "tensors[1]");
  check_throws_with_prefix([&] { cat({}, 0); }, "[cat]", "non-empty");
  check_throws_with_prefix([&] { stack({a, ones({3, 2})}); }, "[stack]", "tensors[1]");
  check_throws_with_prefix(
      [&] {
        split(ones({5}), std::vector<int64_t>{2, 2});
      },
      "[split]", "sum to 4");
  check_throws_with_prefix([&] { chunk(ones({5}), 0); }, "[chunk]", "positive");
  check_throws_with_prefix(
      [&] {
        from_vector(std::vector<float>{1, 2, 3}, {2, 2});
      },
      "[from_vector]", "3 values");
  check_throws_with_prefix([&] { empty({-1}); }, "[empty]", "non-negative");
  check_throws_with_prefix([&] { ones({2}).item<float>(); }, "[item]", "one element");
  check_throws_with_prefix([&] { tg::max(empty({0})); }, "[max]", "size 0");
  check_throws_with_prefix([&] { tg::max(empty({2, 0}), {1}); }, "[max]", "size 0");
}

TEST_CASE("dtype errors") {
  Tensor f = ones({2}), d = ones({2}, kFloat64), i = ones({2}, kInt64);
  check_throws_with_prefix([&] { matmul(f, d); }, "[matmul]", "dtype float64, expected float32");
  check_throws_with_prefix([&] { matmul(i, i); }, "[matmul]",
                           "must be a floating dtype, got int64");
  check_throws_with_prefix([&] { exp(i); }, "[exp]", "got int64");
  check_throws_with_prefix([&] { where(f, f, f); }, "[where]", "'condition' must be bool");
  check_throws_with_prefix([&] { masked_fill(f, f, 0); }, "[masked_fill]", "must be bool");
  check_throws_with_prefix([&] { i.requires_grad_(); }, "[requires_grad_]", "int64");
  check_throws_with_prefix([&] { f.data_ptr<double>(); }, "[data_ptr]", "float32");
  check_throws_with_prefix([&] { rand({2}, kInt64); }, "[rand]", "int64");
  check_throws_with_prefix([&] { f.add_(d); }, "[add_]", "dtype float64");
}

TEST_CASE("int64 division: by zero is an error, never undefined; INT64_MIN / -1 wraps") {
  const int64_t lo = std::numeric_limits<int64_t>::min();
  Tensor a = from_vector(std::vector<int64_t>{7, -7, lo, 9}, {4});
  Tensor b = from_vector(std::vector<int64_t>{2, 2, -1, -3}, {4});
  CHECK(div(a, b).to_vector<int64_t>() == std::vector<int64_t>{3, -3, lo, -3});  // truncation
  check_throws_with_prefix(
      [&] {
        div(a, from_vector(std::vector<int64_t>{1, 0, 1, 1}, {4}));
      },
      "[div]", "integer division by zero: argument 'other' (int64) holds 0");
  check_throws_with_prefix([&] { div(a, 0.0); }, "[div]", "integer division by zero");
  // Floating divisors of zero follow IEEE: inf and NaN, no error.
  std::vector<double> q = div(from_vector(std::vector<double>{1, 0}, {2}), 0.0).to_vector<double>();
  CHECK(std::isinf(q[0]));
  CHECK(std::isnan(q[1]));
}

TEST_CASE("nn op errors") {
  Tensor w = ones({4, 3});
  check_throws_with_prefix([&] { embedding(w, ones({2}, kInt64).to(kFloat32)); }, "[embedding]",
                           "'ids' must be int64");
  check_throws_with_prefix(
      [&] {
        embedding(w, from_vector(std::vector<int64_t>{0, 4}, {2}));
      },
      "[embedding]", "[0, 4)");
  check_throws_with_prefix([&] { embedding(ones({4}), ones({1}, kInt64)); }, "[embedding]", "2-D");
  Tensor logits = ones({2, 3});
  check_throws_with_prefix(
      [&] {
        cross_entropy(logits, from_vector(std::vector<int64_t>{0, 3}, {2}));
      },
      "[cross_entropy]", "[0, 3)");
  check_throws_with_prefix(
      [&] { cross_entropy(logits, from_vector(std::vector<int64_t>{0}, {1})); }, "[cross_entropy]",
      "expected [2]");
  check_throws_with_prefix([&] { cross_entropy(logits, ones({2})); }, "[cross_entropy]",
                           "'targets' must be int64");
  check_throws_with_prefix([&] { dropout(logits, 1.0, 0, 0); }, "[dropout]", "[0, 1)");
  check_throws_with_prefix([&] { dropout(logits, -0.1, 0, 0); }, "[dropout]", "[0, 1)");
  check_throws_with_prefix([&] { arange(0, 1, 0); }, "[arange]", "non-zero");
  check_throws_with_prefix([&] { var(ones({3}), {}, -1); }, "[var]", "correction");
  check_throws_with_prefix([&] { set_num_threads(0); }, "[set_num_threads]", ">= 1");
  check_throws_with_prefix([&] { ones({2}).grad().to_vector<float>(); }, "[to_vector]",
                           "undefined");
}

TEST_CASE("device errors without CUDA") {
  if (cuda_is_available()) return;  // the CUDA suite covers devices when one exists
  check_throws_with_prefix([&] { ones({2}).to(kCUDA); }, "[");
  check_throws_with_prefix([&] { ones({2}, TensorOptions().device(kCUDA)); }, "[");
}

TEST_CASE("float32 matmul precision: PyTorch's two names, anything else an error") {
  // Until set, the environment decides on every call (the test environment sets nothing).
  CHECK(float32_matmul_precision() == "highest");  // the default
  setenv("TAPEGRAD_FLOAT32_MATMUL_PRECISION", "high", 1);
  CHECK(float32_matmul_precision() == "high");
  setenv("TAPEGRAD_FLOAT32_MATMUL_PRECISION", "medium", 1);
  check_throws_with_prefix([&] { float32_matmul_precision(); }, "[float32_matmul_precision]",
                           "TAPEGRAD_FLOAT32_MATMUL_PRECISION: expected \"highest\" or \"high\", "
                           "got \"medium\"");
  unsetenv("TAPEGRAD_FLOAT32_MATMUL_PRECISION");
  set_float32_matmul_precision("high");
  CHECK(float32_matmul_precision() == "high");
  check_throws_with_prefix([&] { set_float32_matmul_precision("medium"); },
                           "[set_float32_matmul_precision]", "got \"medium\"");
  CHECK(float32_matmul_precision() == "high");  // a refused value changes nothing
  set_float32_matmul_precision("highest");
  CHECK(float32_matmul_precision() == "highest");
}

TEST_CASE("tensor-core SDPA's deterministic dQ: on by default, \"1\" or \"0\", else an error") {
  CHECK(cuda_sdpa_deterministic());  // the test environment sets nothing
  setenv("TAPEGRAD_CUDA_SDPA_DETERMINISTIC", "0", 1);
  CHECK(!cuda_sdpa_deterministic());
  setenv("TAPEGRAD_CUDA_SDPA_DETERMINISTIC", "yes", 1);
  check_throws_with_prefix(
      [&] { cuda_sdpa_deterministic(); }, "[cuda_sdpa_deterministic]",
      "TAPEGRAD_CUDA_SDPA_DETERMINISTIC: expected \"1\" or \"0\", got \"yes\"");
  set_cuda_sdpa_deterministic(true);  // set: the environment is not read
  CHECK(cuda_sdpa_deterministic());
  unsetenv("TAPEGRAD_CUDA_SDPA_DETERMINISTIC");
  set_cuda_sdpa_deterministic(false);
  CHECK(!cuda_sdpa_deterministic());
  set_cuda_sdpa_deterministic(true);
}

TEST_CASE(
    "tensor-core SDPA's deterministic dQ sums: auto by default, pass or fixed, else an error") {
  CHECK(cuda_sdpa_deterministic_dq() == "auto");  // the test environment sets nothing
  setenv("TAPEGRAD_CUDA_SDPA_DETERMINISTIC_DQ", "fixed", 1);
  CHECK(cuda_sdpa_deterministic_dq() == "fixed");
  setenv("TAPEGRAD_CUDA_SDPA_DETERMINISTIC_DQ", "atomic", 1);
  check_throws_with_prefix([&] { cuda_sdpa_deterministic_dq(); }, "[cuda_sdpa_deterministic_dq]",
                           "TAPEGRAD_CUDA_SDPA_DETERMINISTIC_DQ: expected \"auto\", \"pass\" or "
                           "\"fixed\", got \"atomic\"");
  set_cuda_sdpa_deterministic_dq("pass");  // set: the environment is not read
  CHECK(cuda_sdpa_deterministic_dq() == "pass");
  unsetenv("TAPEGRAD_CUDA_SDPA_DETERMINISTIC_DQ");
  check_throws_with_prefix([&] { set_cuda_sdpa_deterministic_dq("on"); },
                           "[set_cuda_sdpa_deterministic_dq]",
                           "mode: expected \"auto\", \"pass\" or \"fixed\", got \"on\"");
  CHECK(cuda_sdpa_deterministic_dq() == "pass");  // unchanged by the refused call
  set_cuda_sdpa_deterministic_dq("auto");
  CHECK(cuda_sdpa_deterministic_dq() == "auto");
}

TEST_CASE("tensor-core SDPA's warpgroup products: auto by default, on or off, else an error") {
  CHECK(cuda_sdpa_wgmma() == "auto");  // the test environment sets nothing
  for (const auto& [env, mode] : std::vector<std::pair<const char*, const char*>>{
           {"0", "off"}, {"off", "off"}, {"1", "on"}, {"on", "on"}, {"auto", "auto"}}) {
    setenv("TAPEGRAD_CUDA_SDPA_WGMMA", env, 1);
    CHECK(cuda_sdpa_wgmma() == mode);
  }
  setenv("TAPEGRAD_CUDA_SDPA_WGMMA", "yes", 1);
  check_throws_with_prefix([&] { cuda_sdpa_wgmma(); }, "[cuda_sdpa_wgmma]",
                           "TAPEGRAD_CUDA_SDPA_WGMMA: expected \"auto\", \"on\" (or \"1\") or "
                           "\"off\" (or \"0\"), got \"yes\"");
  set_cuda_sdpa_wgmma("on");  // set: the environment is not read
  CHECK(cuda_sdpa_wgmma() == "on");
  unsetenv("TAPEGRAD_CUDA_SDPA_WGMMA");
  check_throws_with_prefix([&] { set_cuda_sdpa_wgmma("1"); }, "[set_cuda_sdpa_wgmma]",
                           "mode: expected \"auto\", \"on\" or \"off\", got \"1\"");
  CHECK(cuda_sdpa_wgmma() == "on");  // unchanged by the refused call
  set_cuda_sdpa_wgmma("off");
  CHECK(cuda_sdpa_wgmma() == "off");
  set_cuda_sdpa_wgmma("auto");
  CHECK(cuda_sdpa_wgmma() == "auto");
}

TEST_CASE("tensor-core SDPA rows per warp: automatic, 16 or 32, anything else an error") {
  // Until set, the environment decides on every call (the test environment sets nothing).
  CHECK(cuda_sdpa_warp_rows() == 0);  // automatic
  setenv("TAPEGRAD_CUDA_SDPA_WARP_ROWS", "32", 1);
  CHECK(cuda_sdpa_warp_rows() == 32);
  setenv("TAPEGRAD_CUDA_SDPA_WARP_ROWS", "0", 1);
  CHECK(cuda_sdpa_warp_rows() == 0);
  setenv("TAPEGRAD_CUDA_SDPA_WARP_ROWS", "24", 1);
  check_throws_with_prefix(
      [&] { cuda_sdpa_warp_rows(); }, "[cuda_sdpa_warp_rows]",
      "TAPEGRAD_CUDA_SDPA_WARP_ROWS: expected \"0\" (automatic), \"16\" or \"32\", "
      "got \"24\"");
  unsetenv("TAPEGRAD_CUDA_SDPA_WARP_ROWS");
  set_cuda_sdpa_warp_rows(32);
  CHECK(cuda_sdpa_warp_rows() == 32);
  check_throws_with_prefix([&] { set_cuda_sdpa_warp_rows(64); }, "[set_cuda_sdpa_warp_rows]",
                           "rows: expected 0 (automatic), 16 or 32, got 64");
  CHECK(cuda_sdpa_warp_rows() == 32);  // a refused value changes nothing
  set_cuda_sdpa_warp_rows(16);
  CHECK(cuda_sdpa_warp_rows() == 16);
  set_cuda_sdpa_warp_rows(0);
  CHECK(cuda_sdpa_warp_rows() == 0);
}
