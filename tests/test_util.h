// Helpers shared by the test suites.
#pragma once
#include <doctest/doctest.h>

#include <tapegrad.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

namespace tgtest {

// A transformer small enough for float64 gradchecks: vocab 11, d_model 8, 2 layers, 2 query
// heads sharing 1 key/value head.
inline tg::nn::TransformerConfig tiny_transformer_config() {
  return {.vocab = 11,
          .d_model = 8,
          .layers = 2,
          .heads = 2,
          .kv_heads = 1,
          .ffn = 12,
          .dtype = tg::kFloat64};
}

// A float64 tensor of the given shape with values from a fixed Philox stream.
inline tg::Tensor rnd(const tg::Shape& shape, uint64_t seed = 1, double lo = -1.0,
                      double hi = 1.0) {
  tg::Generator g{seed, 0};
  return tg::add(tg::mul(tg::rand(shape, g, tg::kFloat64), hi - lo), lo);
}

// A differentiable function of a list of tensors, as the gradchecks take it.
using Fn = std::function<tg::Tensor(const std::vector<tg::Tensor>&)>;

// t as a leaf that requires its gradient.
inline tg::Tensor leaf(tg::Tensor t) { return t.requires_grad_(true); }

// A file's bytes.
inline std::vector<char> read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A safetensors file by hand: the 8-byte header length, the header, the data.
inline std::vector<char> safetensors_bytes(const std::string& header,
                                           const std::vector<char>& data = {}) {
  const uint64_t n = header.size();
  std::string text(8, '\0');
  std::memcpy(text.data(), &n, 8);
  text += header;
  text.append(data.begin(), data.end());
  return std::vector<char>(text.begin(), text.end());
}

// max |got - want| / max(|want|) over the elements (as float64), matching infinities equal;
// infinite when one is NaN or only one is infinite.
inline double rel_error(const tg::Tensor& got, const tg::Tensor& want) {
  auto g = got.to(tg::kFloat64).to_vector<double>(), w = want.to(tg::kFloat64).to_vector<double>();
  REQUIRE(g.size() == w.size());
  double scale = 0, err = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isinf(w[i]) || std::isinf(g[i])) {
      if (g[i] != w[i]) return INFINITY;
      continue;
    }
    if (std::isnan(g[i]) || std::isnan(w[i])) return INFINITY;
    scale = std::max(scale, std::abs(w[i]));
    err = std::max(err, std::abs(g[i] - w[i]));
  }
  return scale > 0 ? err / scale : err;
}

// Which elements of t are NaN, and which are -inf (an SDPA row that sees no key has stats -inf).
inline std::vector<bool> nan_positions(const tg::Tensor& t) {
  std::vector<bool> n;
  for (double x : t.to(tg::kCPU).to(tg::kFloat64).to_vector<double>()) n.push_back(std::isnan(x));
  return n;
}
inline std::vector<bool> neg_inf_positions(const tg::Tensor& t) {
  std::vector<bool> n;
  for (double x : t.to(tg::kCPU).to(tg::kFloat64).to_vector<double>()) n.push_back(x == -INFINITY);
  return n;
}
// Whether every element of t is finite.
inline bool all_finite(const tg::Tensor& t) {
  for (double x : t.to(tg::kCPU).to(tg::kFloat64).to_vector<double>())
    if (!std::isfinite(x)) return false;
  return true;
}
// A float64 CPU copy of t with element `at` (in row-major order) NaN.
inline tg::Tensor with_nan_at(const tg::Tensor& t, int64_t at) {
  std::vector<double> x = t.to(tg::kFloat64).to_vector<double>();
  x.at(static_cast<size_t>(at)) = NAN;
  return tg::from_vector(x, t.sizes());
}

inline void check_close(const std::vector<double>& got, const std::vector<double>& want,
                        double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    CHECK(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

// gradcheck that reports the worst element per input when it fails.
#define CHECK_GRADCHECK(f, inputs)                  \
  do {                                              \
    auto gc_result_ = tg::gradcheck((f), (inputs)); \
    INFO(gc_result_.message);                       \
    CHECK(gc_result_.ok);                           \
  } while (0)

// gradgradcheck likewise: the second derivatives through create_graph.
#define CHECK_GRADGRADCHECK(f, inputs)                   \
  do {                                                   \
    auto ggc_result_ = tg::gradgradcheck((f), (inputs)); \
    INFO(ggc_result_.message);                           \
    CHECK(ggc_result_.ok);                               \
  } while (0)

template <class F>
void check_throws_with_prefix(F&& f, const std::string& prefix, const std::string& contains = "") {
  bool threw = false;
  try {
    f();
  } catch (const tg::Error& e) {
    threw = true;
    std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(msg.rfind(prefix, 0) == 0);
    if (!contains.empty()) CHECK(msg.find(contains) != std::string::npos);
  }
  CHECK(threw);
}

}  // namespace tgtest
